//! The cluster around the Services: Namespaces, Nodes as kubelet and node IPAM leave them, Pods
//! as kubelet reports them running and ready, and the default ServiceCIDR.

use super::{labels, namespaced_meta};
use crate::scenario::{IpFamily, Protocol, Scenario};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, HostIP, Namespace, NamespaceSpec, NamespaceStatus, Node, NodeAddress,
    NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo, Pod, PodCondition, PodIP, PodSpec,
    PodStatus,
};
use k8s_openapi::api::networking::v1::{ServiceCIDR, ServiceCIDRSpec, ServiceCIDRStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use std::collections::BTreeSet;
use std::net::IpAddr;

/// The name of the container standing for a pod's echo servers.
pub const POD_CONTAINER: &str = "echo";

/// The cluster's families, primary first: a dual-stack kpct cluster is IPv4-primary, and
/// kubelet (`--node-ip IPv4,IPv6`), node IPAM and the pods' CNI order every per-family value
/// that way.
pub(super) fn cluster_families(s: &Scenario) -> Vec<IpFamily> {
    let cidr = &s.topology.cluster_cidr;
    let primary = cidr.primary_family();
    [primary, primary.other()]
        .into_iter()
        .filter(|f| cidr.has(*f))
        .collect()
}

/// `default`, `kube-system` and every namespace a pod or Service is in, as the API server
/// stores a created Namespace: the `kubernetes.io/metadata.name` label (`SetDefaults_Namespace`),
/// the `kubernetes` finalizer and phase Active (pkg/registry/core/namespace `PrepareForCreate`).
pub(super) fn namespaces(s: &Scenario) -> Vec<Namespace> {
    let names: BTreeSet<&str> = ["default", "kube-system"]
        .into_iter()
        .chain(s.topology.pods.iter().map(|p| p.namespace.as_str()))
        .chain(s.services.iter().map(|svc| svc.namespace.as_str()))
        .chain(s.endpoint_slices.iter().map(|sl| sl.namespace.as_str()))
        .collect();
    names
        .into_iter()
        .map(|name| Namespace {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some(labels([("kubernetes.io/metadata.name", name)])),
                ..ObjectMeta::default()
            },
            spec: Some(NamespaceSpec {
                finalizers: Some(vec!["kubernetes".to_owned()]),
            }),
            status: Some(NamespaceStatus {
                phase: Some("Active".to_owned()),
                ..NamespaceStatus::default()
            }),
        })
        .collect()
}

/// The architecture as Go (and so kubelet's `kubernetes.io/arch` label) names it.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// Each node as kubelet registers it and node IPAM completes it:
/// - labels `kubernetes.io/hostname`, `kubernetes.io/os`, `kubernetes.io/arch` (kubelet's
///   `initialNode`, pkg/kubelet/kubelet_node_status.go);
/// - `spec.podCIDRs` per family, primary first, and `spec.podCIDR` their first (the range
///   allocator, pkg/controller/nodeipam/ipam/range_allocator.go);
/// - `status.addresses`: one InternalIP per family in `--node-ip` order, then the Hostname
///   (pkg/kubelet/nodestatus `NodeAddress`). The node's `secondaryIPs` are other addresses on
///   its interface, not node IPs: kube-proxy must take the primary one;
/// - the conditions kubelet posts for a healthy node, Ready among them.
pub(super) fn nodes(s: &Scenario) -> Vec<Node> {
    let families = cluster_families(s);
    s.topology
        .nodes
        .iter()
        .map(|n| {
            let pod_cidrs: Vec<String> = families
                .iter()
                .filter_map(|f| n.pod_cidr.of(*f))
                .map(|c| c.to_string())
                .collect();
            let addresses = families
                .iter()
                .filter_map(|f| n.ip.of(*f))
                .map(|ip| NodeAddress {
                    type_: "InternalIP".to_owned(),
                    address: ip.to_string(),
                })
                .chain(std::iter::once(NodeAddress {
                    type_: "Hostname".to_owned(),
                    address: n.name.clone(),
                }))
                .collect();
            Node {
                metadata: ObjectMeta {
                    name: Some(n.name.clone()),
                    labels: Some(labels([
                        ("kubernetes.io/arch", go_arch()),
                        ("kubernetes.io/hostname", &n.name),
                        ("kubernetes.io/os", "linux"),
                    ])),
                    ..ObjectMeta::default()
                },
                spec: Some(NodeSpec {
                    pod_cidr: pod_cidrs.first().cloned(),
                    pod_cidrs: Some(pod_cidrs),
                    ..NodeSpec::default()
                }),
                status: Some(NodeStatus {
                    addresses: Some(addresses),
                    conditions: Some(node_conditions()),
                    node_info: Some(NodeSystemInfo {
                        architecture: go_arch().to_owned(),
                        operating_system: "linux".to_owned(),
                        ..NodeSystemInfo::default()
                    }),
                    ..NodeStatus::default()
                }),
            }
        })
        .collect()
}

/// What kubelet's condition setters post for a healthy node (pkg/kubelet/nodestatus
/// setters.go: `MemoryPressureCondition`, `DiskPressureCondition`, `PIDPressureCondition`,
/// `ReadyCondition`), in its order.
fn node_conditions() -> Vec<NodeCondition> {
    let condition = |type_: &str, status: &str, reason: &str, message: &str| NodeCondition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message.to_owned()),
        ..NodeCondition::default()
    };
    vec![
        condition(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        condition(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
        ),
        condition(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        ),
        condition(
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
        ),
    ]
}

/// Each pod as kubelet reports it once its containers run and are ready: `spec.nodeName`, one
/// container with the pod's ports (protocol defaulted to TCP, `SetDefaults_ContainerPort`),
/// phase Running, `podIPs` per family in the node's family order with `podIP` their first
/// (kubelet `sortPodIPs`), `hostIPs` likewise from the node's InternalIPs, and every pod
/// condition True (kubelet's status manager; PodScheduled from the scheduler). qosClass
/// BestEffort, as the API server computes it for a pod without resources.
pub(super) fn pods(s: &Scenario) -> Vec<Pod> {
    let families = cluster_families(s);
    s.topology
        .pods
        .iter()
        .map(|p| {
            let pod_ips: Vec<IpAddr> = families.iter().filter_map(|f| p.ip.of(*f)).collect();
            let host_ips: Vec<IpAddr> = s
                .topology
                .nodes
                .iter()
                .find(|n| n.name == p.node)
                .map(|n| families.iter().filter_map(|f| n.ip.of(*f)).collect())
                .unwrap_or_default();
            let ports: Vec<ContainerPort> = p
                .ports
                .iter()
                .map(|port| ContainerPort {
                    name: port.name.clone(),
                    container_port: i32::from(port.container_port),
                    protocol: Some(protocol(port.protocol)),
                    ..ContainerPort::default()
                })
                .collect();
            Pod {
                metadata: namespaced_meta(&p.namespace, &p.name, p.labels.clone()),
                spec: Some(PodSpec {
                    node_name: Some(p.node.clone()),
                    containers: vec![Container {
                        name: POD_CONTAINER.to_owned(),
                        image: Some("kpct/echo".to_owned()),
                        ports: (!ports.is_empty()).then_some(ports),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
                status: Some(PodStatus {
                    phase: Some("Running".to_owned()),
                    conditions: Some(
                        [
                            "PodReadyToStartContainers",
                            "Initialized",
                            "Ready",
                            "ContainersReady",
                            "PodScheduled",
                        ]
                        .into_iter()
                        .map(|type_| PodCondition {
                            type_: type_.to_owned(),
                            status: "True".to_owned(),
                            ..PodCondition::default()
                        })
                        .collect(),
                    ),
                    host_ip: host_ips.first().map(IpAddr::to_string),
                    host_ips: Some(
                        host_ips
                            .iter()
                            .map(|ip| HostIP { ip: ip.to_string() })
                            .collect(),
                    ),
                    pod_ip: pod_ips.first().map(IpAddr::to_string),
                    pod_ips: Some(
                        pod_ips
                            .iter()
                            .map(|ip| PodIP { ip: ip.to_string() })
                            .collect(),
                    ),
                    qos_class: Some("BestEffort".to_owned()),
                    ..PodStatus::default()
                }),
            }
        })
        .collect()
}

/// A protocol as the API spells it.
pub(super) fn protocol(p: Protocol) -> String {
    p.upper().to_owned()
}

/// The default ServiceCIDR `kubernetes` with the API server's `--service-cluster-ip-range`
/// ranges, primary first (pkg/controlplane/controller/defaultservicecidr), Ready as that
/// controller marks it, with the finalizer the servicecidrs controller adds
/// (pkg/controller/servicecidrs). The condition's transition time stands at the Unix epoch.
pub(super) fn service_cidr(s: &Scenario) -> ServiceCIDR {
    let ranges = &s.topology.service_cidr;
    let primary = ranges.primary_family();
    let cidrs = [primary, primary.other()]
        .into_iter()
        .filter_map(|f| ranges.of(f))
        .map(|c| c.to_string())
        .collect();
    ServiceCIDR {
        metadata: ObjectMeta {
            name: Some("kubernetes".to_owned()),
            finalizers: Some(vec!["networking.k8s.io/service-cidr-finalizer".to_owned()]),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceCIDRSpec { cidrs: Some(cidrs) }),
        status: Some(ServiceCIDRStatus {
            conditions: Some(vec![Condition {
                type_: "Ready".to_owned(),
                status: "True".to_owned(),
                message: "Kubernetes default Service CIDR is ready".to_owned(),
                reason: String::new(),
                last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
                observed_generation: None,
            }]),
        }),
    }
}
