//! Which API a URL path names (the apiserver's RequestInfo resolution, for the group versions
//! this server serves).

use super::resources::Kind;

/// The group versions served: the kinds' own, plus events.k8s.io for the events clients
/// write. Core v1 first, as `/api` lists it.
pub(crate) const GROUP_VERSIONS: [(&str, &str); 4] = [
    ("", "v1"),
    ("discovery.k8s.io", "v1"),
    ("events.k8s.io", "v1"),
    ("networking.k8s.io", "v1"),
];

/// Which of the two Event APIs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EventsApi {
    /// core/v1 Events (`/api/v1/namespaces/NS/events`).
    Core,
    /// events.k8s.io/v1 Events, what client-go's new recorder writes.
    Events,
}

impl EventsApi {
    pub(crate) fn group(self) -> &'static str {
        match self {
            EventsApi::Core => "",
            EventsApi::Events => "events.k8s.io",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    Version,
    ApiVersions,
    GroupList,
    Group(&'static str),
    ResourceList(&'static str),
    Resource {
        kind: Kind,
        namespace: Option<String>,
        name: Option<String>,
        watch_path: bool,
    },
    Events {
        api: EventsApi,
        namespace: Option<String>,
        name: Option<String>,
    },
    /// Under a served group version, but no route there: a Status 404.
    NoRoute,
    /// Nowhere the API is served: Go's plain-text 404.
    NotFound,
}

fn decode(segment: &str) -> Option<String> {
    let b = segment.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            out.push(u8::from_str_radix(segment.get(i + 1..i + 3)?, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

pub(crate) fn resolve(path: &str) -> Target {
    let trimmed = path.strip_prefix('/').unwrap_or(path);
    let trimmed = trimmed.strip_suffix('/').unwrap_or(trimmed);
    let Some(segments) = trimmed
        .split('/')
        .map(decode)
        .collect::<Option<Vec<String>>>()
    else {
        return Target::NotFound;
    };
    let s: Vec<&str> = segments.iter().map(String::as_str).collect();
    match s[..] {
        ["version"] => Target::Version,
        ["api"] => Target::ApiVersions,
        ["apis"] => Target::GroupList,
        ["api", "v1"] => Target::ResourceList(""),
        ["api", "v1", ref rest @ ..] => under_group_version("", "v1", rest),
        ["apis", group] => GROUP_VERSIONS
            .iter()
            .find(|(g, _)| !g.is_empty() && *g == group)
            .map_or(Target::NotFound, |(g, _)| Target::Group(g)),
        ["apis", group, version, ref rest @ ..] => {
            match GROUP_VERSIONS
                .iter()
                .find(|(g, v)| !g.is_empty() && *g == group && *v == version)
            {
                Some((g, _)) if rest.is_empty() => Target::ResourceList(g),
                Some((g, v)) => under_group_version(g, v, rest),
                None => Target::NotFound,
            }
        }
        _ => Target::NotFound,
    }
}

fn under_group_version(group: &str, version: &str, rest: &[&str]) -> Target {
    let (watch_path, rest) = match rest {
        ["watch", tail @ ..] => (true, tail),
        _ => (false, rest),
    };
    let (namespace, resource, name) = match *rest {
        [resource] => (None, resource, None),
        ["namespaces", ns, resource] => (Some(ns), resource, None),
        ["namespaces", ns, resource, name] => (Some(ns), resource, Some(name)),
        [resource, name] => (None, resource, Some(name)),
        _ => return Target::NoRoute,
    };
    if resource == "events" && !watch_path {
        let api = match group {
            "" => EventsApi::Core,
            "events.k8s.io" => EventsApi::Events,
            _ => return Target::NoRoute,
        };
        // Events are namespaced: `/events/NAME` without a namespace names nothing.
        if namespace.is_none() && name.is_some() {
            return Target::NoRoute;
        }
        return Target::Events {
            api,
            namespace: namespace.map(str::to_string),
            name: name.map(str::to_string),
        };
    }
    let Some(kind) = Kind::find(group, version, resource) else {
        return Target::NoRoute;
    };
    let namespaced = kind.info().namespaced;
    // A namespaced kind's objects are only addressed within their namespace, a cluster-scoped
    // kind's never within one.
    if (namespace.is_some() && !namespaced) || (namespace.is_none() && namespaced && name.is_some())
    {
        return Target::NoRoute;
    }
    Target::Resource {
        kind,
        namespace: namespace.map(str::to_string),
        name: name.map(str::to_string),
        watch_path,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(kind: Kind, ns: Option<&str>, name: Option<&str>, watch_path: bool) -> Target {
        Target::Resource {
            kind,
            namespace: ns.map(Into::into),
            name: name.map(Into::into),
            watch_path,
        }
    }

    #[test]
    fn paths_resolve_as_the_apiserver_routes_them() {
        assert_eq!(
            resolve("/api/v1/services"),
            res(Kind::Service, None, None, false)
        );
        assert_eq!(
            resolve("/api/v1/namespaces/default/services/web"),
            res(Kind::Service, Some("default"), Some("web"), false)
        );
        assert_eq!(
            resolve("/api/v1/namespaces/default"),
            res(Kind::Namespace, None, Some("default"), false)
        );
        assert_eq!(
            resolve("/api/v1/nodes/node-a"),
            res(Kind::Node, None, Some("node-a"), false)
        );
        assert_eq!(
            resolve("/apis/discovery.k8s.io/v1/endpointslices"),
            res(Kind::EndpointSlice, None, None, false)
        );
        assert_eq!(
            resolve("/apis/networking.k8s.io/v1/servicecidrs"),
            res(Kind::ServiceCidr, None, None, false)
        );
        assert_eq!(
            resolve("/api/v1/watch/namespaces/d/pods"),
            res(Kind::Pod, Some("d"), None, true)
        );
        assert_eq!(
            resolve("/apis/events.k8s.io/v1/namespaces/default/events"),
            Target::Events {
                api: EventsApi::Events,
                namespace: Some("default".into()),
                name: None
            }
        );
        assert_eq!(resolve("/apis"), Target::GroupList);
        assert_eq!(
            resolve("/apis/discovery.k8s.io/v1"),
            Target::ResourceList("discovery.k8s.io")
        );
        assert_eq!(resolve("/version"), Target::Version);
    }

    #[test]
    fn unknown_paths_are_told_apart() {
        assert_eq!(
            resolve("/api/v1/services/web"),
            Target::NoRoute,
            "namespaced item without namespace"
        );
        assert_eq!(resolve("/api/v1/namespaces/d/nodes"), Target::NoRoute);
        assert_eq!(resolve("/api/v1/foobars"), Target::NoRoute);
        assert_eq!(
            resolve("/api/v1/namespaces/d/services/web/status"),
            Target::NoRoute
        );
        assert_eq!(resolve("/apis/apps/v1/deployments"), Target::NotFound);
        assert_eq!(
            resolve("/apis/discovery.k8s.io/v1/services"),
            Target::NoRoute
        );
        assert_eq!(resolve("/healthz"), Target::NotFound);
        assert_eq!(resolve("/api/v1/%zz"), Target::NotFound);
    }
}
