//! EndpointSlices and Endpoints: what the EndpointSlice controller (pkg/controller/endpointslice
//! with its reconciler, k8s.io/endpointslice reconciler.go and utils.go) and the endpoints
//! controller (pkg/controller/endpoint) publish for a Service with a selector, and the
//! scenario's explicit slices as a user's hand-made ones.

use super::cluster::protocol;
use super::services::Stored;
use super::{
    namespaced_meta, ENDPOINTSLICE_CONTROLLER, ENDPOINTS_CONTROLLER, LABEL_ENDPOINTS_MANAGED_BY,
    LABEL_HEADLESS, LABEL_MANAGED_BY, LABEL_SERVICE_NAME, SCENARIO_MANAGER,
};
use crate::scenario::model::{self, Protocol};
use crate::scenario::{node_of_pod_ip, selected_pods, target_port, IpFamily, Scenario};
use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort as CoreEndpointPort, EndpointSubset, Endpoints, ObjectReference,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// The controller's `--max-endpoints-per-slice` default (pkg/controller/endpointslice/config).
pub const MAX_ENDPOINTS_PER_SLICE: usize = 100;

/// One port of a pod's endpoint for a Service: the Service port's name (`""` when unnamed),
/// the number it resolves to on the pod, and the protocol (`getEndpointPorts`).
type PortKey = (String, u16, Protocol);

/// The controller's slices for every Service with a selector, then the scenario's explicit
/// slices.
pub(super) fn endpoint_slices(s: &Scenario, stored: &[Stored<'_>]) -> Vec<EndpointSlice> {
    let mut out: Vec<EndpointSlice> = stored
        .iter()
        .filter(|st| st.controller_managed())
        .flat_map(|st| controller_slices(s, st))
        .collect();
    out.extend(explicit_slices(s));
    out
}

/// The pods a Service's selector matches, as the controllers list them (`selected_pods`).
fn pods_of<'a>(s: &'a Scenario, st: &Stored<'_>) -> Vec<&'a model::Pod> {
    if !st.controller_managed() {
        return Vec::new();
    }
    selected_pods(s, st.svc)
}

/// The ports of `pod`'s endpoint: each Service port whose target resolves on the pod, in the
/// Service's order; a named targetPort the pod does not have leaves that port out
/// (`getEndpointPorts`, `FindPort`).
fn pod_ports(svc: &model::Service, pod: &model::Pod) -> Vec<PortKey> {
    svc.spec
        .ports
        .iter()
        .filter_map(|port| {
            let number = target_port(pod, port)?;
            Some((port.name.clone().unwrap_or_default(), number, port.protocol))
        })
        .collect()
}

fn pod_ref(pod: &model::Pod) -> ObjectReference {
    ObjectReference {
        kind: Some("Pod".to_owned()),
        namespace: Some(pod.namespace.clone()),
        name: Some(pod.name.clone()),
        ..ObjectReference::default()
    }
}

/// A stand-in for the 5 random characters of a generated name (`utilrand.String`, from the same
/// alphabet), derived from `identity`.
fn name_suffix(identity: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    Sha256::digest(identity.as_bytes())
        .iter()
        .take(5)
        .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
        .collect()
}

/// What `reconcileByAddressType` holds for a Service with a selector, per family of the
/// Service (`getAddressTypesForService`: its `ipFamilies`):
/// - every selected pod (running, with an IP: `ShouldPodBeInEndpoints`) with an address of
///   the family is an endpoint (`podToEndpoint`): that address, ready/serving true and
///   terminating false (kpct's pods are all ready and none is being deleted), its node, a
///   `targetRef` to the pod;
/// - endpoints are grouped by their set of ports (`NewPortMapKey`): a named targetPort
///   resolving to different numbers on different pods splits them into different slices;
///   at most 100 endpoints a slice;
/// - a family with no endpoint still gets one empty placeholder slice.
///
/// Slices are named `<service>-<suffix>`, the suffix derived from the slice's identity
/// (family, ports, place), so a slice keeps its name while its endpoints change, as the
/// controller updates a slice in place; endpoints are sorted by address (the controller's
/// order is a set's).
fn controller_slices(s: &Scenario, st: &Stored<'_>) -> Vec<EndpointSlice> {
    let svc = st.svc;
    let pods = pods_of(s, st);
    let mut out = Vec::new();
    for &family in &st.families {
        let mut groups: BTreeMap<Vec<PortKey>, Vec<(IpAddr, Endpoint)>> = BTreeMap::new();
        for pod in &pods {
            let ports = pod_ports(svc, pod);
            let group = groups.entry(ports).or_default();
            let Some(ip) = pod.ip.of(family) else {
                continue;
            };
            let ready = true;
            let serving = true;
            let terminating = false;
            group.push((
                ip,
                Endpoint {
                    addresses: vec![ip.to_string()],
                    conditions: Some(EndpointConditions {
                        ready: Some(ready),
                        serving: Some(serving),
                        terminating: Some(terminating),
                    }),
                    node_name: Some(pod.node.clone()),
                    target_ref: Some(pod_ref(pod)),
                    ..Endpoint::default()
                },
            ));
        }
        let before = out.len();
        for (ports, mut endpoints) in groups {
            endpoints.sort_by_key(|(ip, _)| *ip);
            for (chunk, part) in endpoints.chunks(MAX_ENDPOINTS_PER_SLICE).enumerate() {
                let identity = format!("{family}/{ports:?}/{chunk}");
                out.push(controller_slice(
                    st,
                    family,
                    &identity,
                    &ports,
                    part.iter().map(|(_, ep)| ep.clone()).collect(),
                ));
            }
        }
        if out.len() == before {
            // "When no endpoint slices would usually exist, we need to add a placeholder."
            out.push(controller_slice(
                st,
                family,
                &format!("{family}/placeholder"),
                &[],
                vec![],
            ));
        }
    }
    out
}

fn controller_slice(
    st: &Stored<'_>,
    family: IpFamily,
    identity: &str,
    ports: &[PortKey],
    endpoints: Vec<Endpoint>,
) -> EndpointSlice {
    let svc = st.svc;
    // `setEndpointSliceLabels`: the Service's labels but the reserved ones, the headless
    // label for a Service without a ClusterIP, the service name and the managing controller.
    let mut labels: BTreeMap<String, String> = st
        .labels()
        .into_iter()
        .filter(|(k, _)| {
            ![LABEL_SERVICE_NAME, LABEL_MANAGED_BY, LABEL_HEADLESS].contains(&k.as_str())
        })
        .collect();
    if st.headless() {
        labels.insert(LABEL_HEADLESS.to_owned(), String::new());
    }
    labels.insert(LABEL_SERVICE_NAME.to_owned(), svc.name.clone());
    labels.insert(
        LABEL_MANAGED_BY.to_owned(),
        ENDPOINTSLICE_CONTROLLER.to_owned(),
    );
    let name = format!(
        "{}-{}",
        svc.name,
        name_suffix(&format!("{}/{}/{identity}", svc.namespace, svc.name))
    );
    EndpointSlice {
        metadata: namespaced_meta(&svc.namespace, &name, labels),
        address_type: family.to_string(),
        endpoints: Some(endpoints),
        ports: Some(
            ports
                .iter()
                .map(|(name, port, proto)| EndpointPort {
                    name: Some(name.clone()),
                    port: Some(i32::from(*port)),
                    protocol: Some(protocol(*proto)),
                    app_protocol: None,
                })
                .collect(),
        ),
    }
}

/// The scenario's explicit slices, as a user creates them by hand and the API server stores
/// them: named `<service>-<index>` (the slice's place among its Service's, in file order),
/// labelled with the Service's name and a manager that is not the controller (which then
/// leaves them alone), each port's name defaulting to `""` and protocol to TCP
/// (discovery/v1 `SetDefaults_EndpointPort`), each endpoint's conditions exactly as written
/// (the API server defaults none) and its `nodeName` as written or else the node of the pod
/// owning its address (the scenario's own default).
fn explicit_slices(s: &Scenario) -> Vec<EndpointSlice> {
    let mut index: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    s.endpoint_slices
        .iter()
        .map(|sl| {
            let place = index
                .entry((sl.namespace.as_str(), sl.service.as_str()))
                .or_default();
            let name = format!("{}-{place}", sl.service);
            *place += 1;
            let mut labels = super::labels([
                (LABEL_SERVICE_NAME, sl.service.as_str()),
                (LABEL_MANAGED_BY, SCENARIO_MANAGER),
            ]);
            labels.extend(sl.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
            EndpointSlice {
                metadata: namespaced_meta(&sl.namespace, &name, labels),
                address_type: sl.address_type.to_string(),
                endpoints: Some(
                    sl.endpoints
                        .iter()
                        .map(|ep| Endpoint {
                            addresses: ep.addresses.iter().map(IpAddr::to_string).collect(),
                            conditions: Some(EndpointConditions {
                                ready: ep.conditions.ready,
                                serving: ep.conditions.serving,
                                terminating: ep.conditions.terminating,
                            }),
                            node_name: ep.node_name.clone().or_else(|| {
                                ep.addresses.first().and_then(|ip| node_of_pod_ip(s, *ip))
                            }),
                            ..Endpoint::default()
                        })
                        .collect(),
                ),
                ports: Some(
                    sl.ports
                        .iter()
                        .map(|p| EndpointPort {
                            name: Some(p.name.clone().unwrap_or_default()),
                            port: Some(i32::from(p.port)),
                            protocol: Some(protocol(p.protocol)),
                            app_protocol: None,
                        })
                        .collect(),
                ),
            }
        })
        .collect()
}

/// What the endpoints controller (`syncService`) publishes for each Service with a selector
/// (none for ExternalName or selectorless Services, so none for those with explicit slices):
/// the selected pods' addresses of the Service's primary family only
/// (`podToEndpointAddressForService`), ready ones in `addresses` and others in
/// `notReadyAddresses` (kpct's pods are all ready), each with the ports that resolve on it,
/// repacked into subsets (`RepackSubsets`); labelled like the Service, plus the headless label
/// where it has no ClusterIP and the controller's managed-by.
pub(super) fn endpoints(s: &Scenario, stored: &[Stored<'_>]) -> Vec<Endpoints> {
    stored
        .iter()
        .filter(|st| st.controller_managed())
        .map(|st| {
            let svc = st.svc;
            let family = st.families.first().copied().unwrap_or_default();
            let mut served = Vec::new();
            for pod in pods_of(s, st) {
                let Some(ip) = pod.ip.of(family) else {
                    continue;
                };
                let address = EndpointAddress {
                    ip: ip.to_string(),
                    node_name: Some(pod.node.clone()),
                    target_ref: Some(pod_ref(pod)),
                    hostname: None,
                };
                let ready = true;
                // A headless Service may have no ports: its addresses are published alone.
                let ports: Vec<Option<PortKey>> = if svc.spec.ports.is_empty() && st.headless() {
                    vec![None]
                } else {
                    pod_ports(svc, pod).into_iter().map(Some).collect()
                };
                for port in ports {
                    served.push(Served {
                        port,
                        key: (ip.to_string(), pod.name.clone()),
                        address: address.clone(),
                        ready,
                    });
                }
            }
            let subsets = repack(served);
            let mut labels = st.labels();
            if st.headless() {
                labels.insert(LABEL_HEADLESS.to_owned(), String::new());
            } else {
                labels.remove(LABEL_HEADLESS);
            }
            labels.insert(
                LABEL_ENDPOINTS_MANAGED_BY.to_owned(),
                ENDPOINTS_CONTROLLER.to_owned(),
            );
            Endpoints {
                metadata: namespaced_meta(&svc.namespace, &svc.name, labels),
                subsets: (!subsets.is_empty()).then_some(subsets),
            }
        })
        .collect()
}

/// One address serving one port (`None`: the "no ports" sentinel of a headless Service
/// without ports), before repacking.
struct Served {
    port: Option<PortKey>,
    /// What tells addresses apart (`addressKey`: IP and pod, the pod's name standing for its
    /// uid), and orders them as `LessEndpointAddress` does: by IP text first.
    key: (String, String),
    address: EndpointAddress,
    ready: bool,
}

/// The addresses serving one port, each with its readiness.
type AddressSet = BTreeMap<(String, String), (EndpointAddress, bool)>;

/// Which addresses serve a port, and how ready: what ports of one subset share.
type AddressIdentity = Vec<((String, String), bool)>;

/// `RepackSubsets` (pkg/api/v1/endpoints/util.go): the addresses serving each port (an address
/// not ready for a port if any of its entries is not), then one subset per distinct set of
/// addresses with every port it serves. The controller orders ports and subsets by object hash;
/// here they go by content.
fn repack(served: Vec<Served>) -> Vec<EndpointSubset> {
    let mut by_port: BTreeMap<Option<PortKey>, AddressSet> = BTreeMap::new();
    for entry in served {
        let (_, ready) = by_port
            .entry(entry.port)
            .or_default()
            .entry(entry.key)
            .or_insert((entry.address, entry.ready));
        *ready &= entry.ready;
    }
    let mut by_addresses: BTreeMap<AddressIdentity, (AddressSet, Vec<PortKey>)> = BTreeMap::new();
    for (port, addresses) in by_port {
        let identity = addresses
            .iter()
            .map(|(key, (_, ready))| (key.clone(), *ready))
            .collect();
        let group = by_addresses
            .entry(identity)
            .or_insert_with(|| (addresses, Vec::new()));
        group.1.extend(port);
    }
    let mut subsets: Vec<EndpointSubset> = by_addresses
        .into_values()
        .map(|(addresses, ports)| {
            let pick = |want: bool| {
                let list: Vec<EndpointAddress> = addresses
                    .values()
                    .filter(|(_, ready)| *ready == want)
                    .map(|(a, _)| a.clone())
                    .collect();
                (!list.is_empty()).then_some(list)
            };
            let ports: Vec<CoreEndpointPort> = ports
                .into_iter()
                .map(|(name, port, proto)| CoreEndpointPort {
                    name: (!name.is_empty()).then_some(name),
                    port: i32::from(port),
                    protocol: Some(protocol(proto)),
                    app_protocol: None,
                })
                .collect();
            EndpointSubset {
                addresses: pick(true),
                not_ready_addresses: pick(false),
                ports: (!ports.is_empty()).then_some(ports),
            }
        })
        .collect();
    subsets.sort_by_key(|ss| {
        ss.ports.as_ref().map(|ports| {
            ports
                .iter()
                .map(|p| (p.name.clone(), p.port, p.protocol.clone()))
                .collect::<Vec<_>>()
        })
    });
    subsets
}
