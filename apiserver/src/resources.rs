//! The kinds the server stores, named as the API names them (taken from `k8s-openapi`'s
//! `Resource` constants, never retyped), and the fields each lets a field selector use.

use crate::ClusterObjects;
use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::{Endpoints, Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{NetworkPolicy, ServiceCIDR};
use k8s_openapi::Resource;
use serde_json::Value;
use std::any::TypeId;

/// A stored kind. The declaration order is the publication order of creations and changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Kind {
    Namespace,
    Node,
    ServiceCidr,
    Pod,
    Service,
    EndpointSlice,
    Endpoints,
    NetworkPolicy,
}

/// What the API says about one kind.
pub(crate) struct KindInfo {
    pub group: &'static str,
    pub version: &'static str,
    pub api_version: &'static str,
    pub kind: &'static str,
    /// The plural resource name of the URL.
    pub resource: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
}

fn info_of<T: Resource + 'static>(short_names: &'static [&'static str]) -> KindInfo {
    KindInfo {
        group: T::GROUP,
        version: T::VERSION,
        api_version: T::API_VERSION,
        kind: T::KIND,
        resource: T::URL_PATH_SEGMENT,
        namespaced: TypeId::of::<T::Scope>() == TypeId::of::<k8s_openapi::NamespaceResourceScope>(),
        short_names,
    }
}

impl Kind {
    pub(crate) const ALL: [Kind; 8] = [
        Kind::Namespace,
        Kind::Node,
        Kind::ServiceCidr,
        Kind::Pod,
        Kind::Service,
        Kind::EndpointSlice,
        Kind::Endpoints,
        Kind::NetworkPolicy,
    ];

    pub(crate) fn info(self) -> KindInfo {
        match self {
            Kind::Namespace => info_of::<Namespace>(&["ns"]),
            Kind::Node => info_of::<Node>(&["no"]),
            Kind::ServiceCidr => info_of::<ServiceCIDR>(&[]),
            Kind::Pod => info_of::<Pod>(&["po"]),
            Kind::Service => info_of::<Service>(&["svc"]),
            Kind::EndpointSlice => info_of::<EndpointSlice>(&[]),
            Kind::Endpoints => info_of::<Endpoints>(&["ep"]),
            Kind::NetworkPolicy => info_of::<NetworkPolicy>(&["netpol"]),
        }
    }

    /// The kind served at `group`/`version` under the plural name `resource`.
    pub(crate) fn find(group: &str, version: &str, resource: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| {
            let i = k.info();
            i.group == group && i.version == version && i.resource == resource
        })
    }

    /// The object a BOOKMARK event carries: an empty object of the kind (the cacher's
    /// `newFunc()`, apiserver pkg/storage/cacher/cacher.go), to which the RV is added.
    pub(crate) fn empty_object(self) -> Value {
        let value = match self {
            Kind::Namespace => serde_json::to_value(Namespace::default()),
            Kind::Node => serde_json::to_value(Node::default()),
            Kind::ServiceCidr => serde_json::to_value(ServiceCIDR::default()),
            Kind::Pod => serde_json::to_value(Pod::default()),
            Kind::Service => serde_json::to_value(Service::default()),
            Kind::EndpointSlice => serde_json::to_value(EndpointSlice::default()),
            Kind::Endpoints => serde_json::to_value(Endpoints::default()),
            Kind::NetworkPolicy => serde_json::to_value(NetworkPolicy::default()),
        };
        value.unwrap_or_else(|_| serde_json::json!({"metadata": {}}))
    }

    /// Checks a field selector's field as the kind's field label conversion does
    /// (kubernetes pkg/apis/core/v1/conversion.go; others fall back to
    /// runtime.DefaultMetaV1FieldSelectorConversion). Returns the canonical field.
    pub(crate) fn convert_field_label(self, label: &str) -> Result<&'static str, String> {
        let unsupported = || format!("field label not supported: {label}");
        let allowed: &[&'static str] = match self {
            Kind::Pod => {
                if label == "spec.host" {
                    return Ok("spec.nodeName");
                }
                &[
                    "metadata.name",
                    "metadata.namespace",
                    "spec.nodeName",
                    "spec.restartPolicy",
                    "spec.schedulerName",
                    "spec.serviceAccountName",
                    "spec.hostNetwork",
                    "status.phase",
                    "status.podIP",
                    "status.podIPs",
                    "status.nominatedNodeName",
                ]
            }
            Kind::Node => &["metadata.name", "spec.unschedulable"],
            Kind::Namespace => &["status.phase", "metadata.name"],
            Kind::Service => &[
                "metadata.namespace",
                "metadata.name",
                "spec.clusterIP",
                "spec.type",
            ],
            Kind::ServiceCidr | Kind::EndpointSlice | Kind::Endpoints | Kind::NetworkPolicy => {
                return match label {
                    "metadata.name" => Ok("metadata.name"),
                    "metadata.namespace" => Ok("metadata.namespace"),
                    _ => Err(format!(
                        "{label:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
                    )),
                };
            }
        };
        allowed
            .iter()
            .copied()
            .find(|a| *a == label)
            .ok_or_else(unsupported)
    }

    /// The value of a selectable field of `obj` ("" when the object has no such field), as
    /// the kind's `GetAttrs` computes it (e.g. kubernetes pkg/registry/core/pod/strategy.go
    /// ToSelectableFields, core/service/strategy.go SelectableFields).
    pub(crate) fn field_value(self, obj: &Value, field: &str) -> String {
        let text = |path: &[&str]| -> String {
            path.iter()
                .try_fold(obj, |v, p| v.get(p))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let flag = |path: &[&str]| -> String {
            let set = path
                .iter()
                .try_fold(obj, |v, p| v.get(p))
                .and_then(Value::as_bool)
                .unwrap_or(false);
            set.to_string()
        };
        match field {
            "metadata.name" => return text(&["metadata", "name"]),
            // Cluster-scoped kinds have no such field (generic.ObjectMetaFieldsSet).
            "metadata.namespace" if self.info().namespaced => {
                return text(&["metadata", "namespace"])
            }
            _ => {}
        }
        match (self, field) {
            (Kind::Service, "spec.clusterIP") => text(&["spec", "clusterIP"]),
            (Kind::Service, "spec.type") => text(&["spec", "type"]),
            (Kind::Node, "spec.unschedulable") => flag(&["spec", "unschedulable"]),
            (Kind::Namespace, "status.phase") => text(&["status", "phase"]),
            (Kind::Pod, "spec.nodeName") => text(&["spec", "nodeName"]),
            (Kind::Pod, "spec.restartPolicy") => text(&["spec", "restartPolicy"]),
            (Kind::Pod, "spec.schedulerName") => text(&["spec", "schedulerName"]),
            (Kind::Pod, "spec.serviceAccountName") => text(&["spec", "serviceAccountName"]),
            (Kind::Pod, "spec.hostNetwork") => flag(&["spec", "hostNetwork"]),
            (Kind::Pod, "status.phase") => text(&["status", "phase"]),
            (Kind::Pod, "status.nominatedNodeName") => text(&["status", "nominatedNodeName"]),
            (Kind::Pod, "status.podIP") => obj
                .pointer("/status/podIPs/0/ip")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            _ => String::new(),
        }
    }

    /// Whether a change of `old` to `new` (both without server metadata) bumps
    /// `metadata.generation`, and whether the kind has one at all: the registry strategies
    /// set it only for Pods (spec), EndpointSlices (anything but metadata, or labels) and
    /// NetworkPolicies (spec) among these kinds (kubernetes pkg/registry/*/strategy.go).
    /// Services have none there, whatever their spec does.
    pub(crate) fn generation_bump(self, old: &Value, new: &Value) -> Option<bool> {
        let differs = |key: &str| old.get(key) != new.get(key);
        match self {
            Kind::Pod | Kind::NetworkPolicy => Some(differs("spec")),
            Kind::EndpointSlice => {
                let strip = |v: &Value| {
                    let mut v = v.clone();
                    if let Some(map) = v.as_object_mut() {
                        map.remove("metadata");
                    }
                    v
                };
                Some(
                    strip(old) != strip(new)
                        || old.pointer("/metadata/labels") != new.pointer("/metadata/labels"),
                )
            }
            _ => None,
        }
    }
}

/// `resource` or `resource.group`.
pub(crate) fn qualified(resource: &str, group: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

/// The objects of a cluster state as JSON, per kind in publication order; each named (and
/// namespaced if its kind is), none twice.
pub(crate) fn objects_by_kind(objects: &ClusterObjects) -> Result<Vec<(Kind, Vec<Value>)>> {
    fn values<T: serde::Serialize>(items: &[T]) -> Result<Vec<Value>> {
        items
            .iter()
            .map(|item| serde_json::to_value(item).context("serializing an object"))
            .collect()
    }
    let all = vec![
        (Kind::Namespace, values(&objects.namespaces)?),
        (Kind::Node, values(&objects.nodes)?),
        (Kind::ServiceCidr, values(&objects.service_cidrs)?),
        (Kind::Pod, values(&objects.pods)?),
        (Kind::Service, values(&objects.services)?),
        (Kind::EndpointSlice, values(&objects.endpoint_slices)?),
        (Kind::Endpoints, values(&objects.endpoints)?),
        (Kind::NetworkPolicy, values(&objects.network_policies)?),
    ];
    for (kind, items) in &all {
        let mut seen = std::collections::BTreeSet::new();
        for item in items {
            let key = object_key(*kind, item)?;
            if !seen.insert(key.clone()) {
                bail!("two {} objects named {key}", kind.info().kind);
            }
        }
    }
    Ok(all)
}

/// The storage key of an object: `namespace/name` for namespaced kinds, `name` otherwise
/// (the part of etcd's `/registry/<resource>/…` key that orders lists and continue tokens).
pub(crate) fn object_key(kind: Kind, obj: &Value) -> Result<String> {
    let field = |f: &str| {
        obj.pointer(&format!("/metadata/{f}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let name = field("name");
    if name.is_empty() {
        bail!("a {} without metadata.name", kind.info().kind);
    }
    if kind.info().namespaced {
        let namespace = field("namespace");
        if namespace.is_empty() {
            bail!("{} {name} without metadata.namespace", kind.info().kind);
        }
        Ok(format!("{namespace}/{name}"))
    } else {
        Ok(name.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_come_from_the_api_definitions() {
        let svc = Kind::Service.info();
        assert_eq!(
            (svc.group, svc.version, svc.resource, svc.kind),
            ("", "v1", "services", "Service")
        );
        assert!(svc.namespaced);
        let cidr = Kind::ServiceCidr.info();
        assert_eq!(
            (cidr.group, cidr.resource),
            ("networking.k8s.io", "servicecidrs")
        );
        assert!(!cidr.namespaced);
        assert_eq!(
            qualified("endpointslices", "discovery.k8s.io"),
            "endpointslices.discovery.k8s.io"
        );
        assert_eq!(
            Kind::find("discovery.k8s.io", "v1", "endpointslices"),
            Some(Kind::EndpointSlice)
        );
        assert_eq!(Kind::find("", "v1", "endpointslices"), None);
    }

    #[test]
    fn field_labels_and_values_follow_each_kind() {
        assert_eq!(
            Kind::Service.convert_field_label("spec.clusterIP"),
            Ok("spec.clusterIP")
        );
        assert!(Kind::Service.convert_field_label("spec.ports").is_err());
        assert!(Kind::Node
            .convert_field_label("metadata.namespace")
            .is_err());
        assert_eq!(
            Kind::Pod.convert_field_label("spec.host"),
            Ok("spec.nodeName")
        );
        let err = Kind::EndpointSlice
            .convert_field_label("spec.x")
            .unwrap_err();
        assert!(err.contains("is not a known field selector"), "{err}");
        let svc =
            json!({"metadata": {"name": "a", "namespace": "ns"}, "spec": {"clusterIP": "None"}});
        assert_eq!(Kind::Service.field_value(&svc, "spec.clusterIP"), "None");
        assert_eq!(Kind::Service.field_value(&svc, "spec.type"), "");
        let node = json!({"metadata": {"name": "n"}});
        assert_eq!(Kind::Node.field_value(&node, "spec.unschedulable"), "false");
        assert_eq!(Kind::Node.field_value(&node, "metadata.namespace"), "");
    }

    #[test]
    fn keys_need_names_and_namespaces() {
        assert_eq!(
            object_key(
                Kind::Service,
                &json!({"metadata": {"name": "a", "namespace": "b"}})
            )
            .unwrap(),
            "b/a"
        );
        assert_eq!(
            object_key(Kind::Node, &json!({"metadata": {"name": "n"}})).unwrap(),
            "n"
        );
        assert!(object_key(Kind::Service, &json!({"metadata": {"name": "a"}})).is_err());
        assert!(object_key(Kind::Node, &json!({"metadata": {}})).is_err());
    }
}
