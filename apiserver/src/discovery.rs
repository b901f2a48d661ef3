//! The discovery documents some clients read before anything else: `/version`, `/api`,
//! `/apis`, `/apis/GROUP` and each served group version's resource list, as the legacy
//! (unaggregated) discovery endpoints give them.

use super::resources::Kind;
use super::route::GROUP_VERSIONS;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    APIGroup, APIGroupList, APIResource, APIResourceList, APIVersions, GroupVersionForDiscovery,
    ServerAddressByClientCIDR,
};
use k8s_openapi::apimachinery::pkg::version::Info;
use std::net::SocketAddr;

/// The Kubernetes release whose API (k8s-openapi's `v1_37`) the server serves.
pub(crate) const GIT_VERSION: &str = "v1.37.2";

pub(crate) fn version() -> String {
    let info = Info {
        build_date: "2026-01-01T00:00:00Z".into(),
        compiler: "gc".into(),
        emulation_major: Some("1".into()),
        emulation_minor: Some("37".into()),
        git_commit: "0000000000000000000000000000000000000000".into(),
        git_tree_state: "clean".into(),
        git_version: GIT_VERSION.into(),
        go_version: "go1.26.0".into(),
        major: "1".into(),
        min_compatibility_major: Some("1".into()),
        min_compatibility_minor: Some("36".into()),
        minor: "37".into(),
        platform: format!("linux/{}", go_arch()),
    };
    serde_json::to_string(&info).unwrap_or_default()
}

fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

pub(crate) fn api_versions(server: SocketAddr) -> String {
    let doc = APIVersions {
        server_address_by_client_cidrs: vec![ServerAddressByClientCIDR {
            client_cidr: "0.0.0.0/0".into(),
            server_address: server.to_string(),
        }],
        versions: vec!["v1".into()],
    };
    serde_json::to_string(&doc).unwrap_or_default()
}

fn group(name: &str) -> APIGroup {
    let versions: Vec<GroupVersionForDiscovery> = GROUP_VERSIONS
        .iter()
        .filter(|(g, _)| *g == name)
        .map(|(g, v)| GroupVersionForDiscovery {
            group_version: format!("{g}/{v}"),
            version: (*v).into(),
        })
        .collect();
    APIGroup {
        name: name.into(),
        preferred_version: versions.first().cloned(),
        server_address_by_client_cidrs: None,
        versions,
    }
}

pub(crate) fn group_list() -> String {
    let mut names: Vec<&str> = GROUP_VERSIONS
        .iter()
        .map(|(g, _)| *g)
        .filter(|g| !g.is_empty())
        .collect();
    names.dedup();
    let doc = APIGroupList {
        groups: names.into_iter().map(group).collect(),
    };
    serde_json::to_string(&doc).unwrap_or_default()
}

pub(crate) fn api_group(name: &str) -> String {
    serde_json::to_string(&group(name)).unwrap_or_default()
}

/// The verbs the real apiserver lists for these resources (what the API offers, not what
/// this client may do).
const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

fn resource(
    name: &str,
    singular: &str,
    kind: &str,
    namespaced: bool,
    short: &[&str],
) -> APIResource {
    APIResource {
        name: name.into(),
        singular_name: singular.into(),
        namespaced,
        kind: kind.into(),
        verbs: VERBS.iter().map(|v| (*v).to_string()).collect(),
        short_names: (!short.is_empty()).then(|| short.iter().map(|s| (*s).to_string()).collect()),
        ..Default::default()
    }
}

pub(crate) fn resource_list(group: &str) -> String {
    let mut resources: Vec<APIResource> = Kind::ALL
        .into_iter()
        .map(Kind::info)
        .filter(|i| i.group == group)
        .map(|i| {
            resource(
                i.resource,
                &i.kind.to_ascii_lowercase(),
                i.kind,
                i.namespaced,
                i.short_names,
            )
        })
        .collect();
    if group.is_empty() || group == "events.k8s.io" {
        resources.push(resource("events", "event", "Event", true, &["ev"]));
    }
    resources.sort_by(|a, b| a.name.cmp(&b.name));
    let group_version = GROUP_VERSIONS
        .iter()
        .find(|(g, _)| *g == group)
        .map(|(g, v)| {
            if g.is_empty() {
                (*v).to_string()
            } else {
                format!("{g}/{v}")
            }
        })
        .unwrap_or_default();
    serde_json::to_string(&APIResourceList {
        group_version,
        resources,
    })
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn documents_name_what_is_served() {
        let v: Value = serde_json::from_str(&version()).unwrap();
        assert_eq!(v["gitVersion"], GIT_VERSION);
        let core: Value = serde_json::from_str(&resource_list("")).unwrap();
        assert_eq!(core["kind"], "APIResourceList");
        assert_eq!(core["groupVersion"], "v1");
        let names: Vec<&str> = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "endpoints",
                "events",
                "namespaces",
                "nodes",
                "pods",
                "services"
            ]
        );
        let net: Value = serde_json::from_str(&resource_list("networking.k8s.io")).unwrap();
        assert_eq!(net["groupVersion"], "networking.k8s.io/v1");
        let groups: Value = serde_json::from_str(&group_list()).unwrap();
        assert_eq!(groups["groups"].as_array().unwrap().len(), 3);
    }
}
