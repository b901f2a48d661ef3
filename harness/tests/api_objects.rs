//! The Kubernetes objects kpct serves to real proxiers (`kpct::api_objects`) hold exactly the
//! cluster kpct's built-in proxiers program from: for every library scenario and every state
//! of its steps, a test-only oracle reads the objects back the way kube-proxy does and must
//! arrive at `scenario::cluster_state` of that state.
//!
//! The oracle follows kube-proxy v1.37:
//! - which objects it sees: its Service informer skips Services labelled
//!   `service.kubernetes.io/service-proxy-name` and headless ones (field selector
//!   `spec.clusterIP!=None`); its EndpointSlice informer skips slices labelled
//!   `service.kubernetes.io/headless` (cmd/kube-proxy/app/server.go);
//! - Services: `serviceToServiceMap` and `newBaseServiceInfo` (pkg/proxy/servicechangetracker.go,
//!   pkg/proxy/serviceport.go), per IP family: `ShouldSkipService`, `GetClusterIPByFamily`,
//!   addresses and source ranges of the family (a zero-length source range meaning "any"),
//!   VIP-mode ingress only, `ExternalPolicyLocal`, `InternalPolicyLocal`, `NeedsHealthCheck`;
//! - EndpointSlices: `EndpointSliceUpdate` (slices of the proxier's address type only) and
//!   `EndpointSliceCache` (pkg/proxy/endpointslicecache.go): service by the
//!   `kubernetes.io/service-name` label, ports joined by name and protocol, ports with a nil name
//!   or no number ignored, an endpoint's first address, nil conditions read as ready/serving
//!   true and terminating false, one endpoint per `IP:port` (a non-terminating one replacing
//!   an earlier one);
//! - its flags: `--cluster-cidr` and the other options from the scenario, and its node IP's
//!   family first (dual-stack when the nodes have InternalIPs of both families).
//!
//! What is not kube-proxy state is compared in kpct's order: nodes by name (kube-proxy has no
//! node list), endpoints by IP then port (kube-proxy sorts their `IP:port` text, which no
//! proxier's programming depends on).

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kpct::api_objects::{
    cluster_objects, ClusterObjects, ENDPOINTSLICE_CONTROLLER, LABEL_HEADLESS, LABEL_MANAGED_BY,
    LABEL_SERVICE_NAME, LABEL_SERVICE_PROXY_NAME,
};
use kpct::scenario::cluster::{ClusterState, EndpointInfo, NodeInfo, ServicePortInfo};
use kpct::scenario::{self, DualCidr, IpCidr, IpFamily, Protocol, ProxierOptions, ServiceType};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// What kube-proxy is started with besides its kubeconfig: flags, not API objects.
struct Flags<'a> {
    cluster_cidr: &'a DualCidr,
    options: &'a ProxierOptions,
}

fn family_name(f: IpFamily) -> String {
    f.to_string()
}

fn parse<T: serde::de::DeserializeOwned>(text: &str) -> T {
    serde_json::from_value(Value::String(text.to_owned()))
        .unwrap_or_else(|e| panic!("`{text}`: {e}"))
}

fn ip(text: &str) -> IpAddr {
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("`{text}`: {e}"))
}

fn has_label(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, key: &str) -> bool {
    meta.labels.as_ref().is_some_and(|l| l.contains_key(key))
}

/// kube-proxy's view of `objects`: one state per family its node has, primary first, the
/// second nested as `ipv6` (kpct's document shape).
fn proxier_view(objects: &ClusterObjects, flags: &Flags<'_>) -> ClusterState {
    let node = objects.nodes.first().expect("a cluster has nodes");
    let mut families: Vec<IpFamily> = Vec::new();
    for address in internal_ips(node) {
        let f = IpFamily::of(address);
        if !families.contains(&f) {
            families.push(f);
        }
    }
    let mut states: Vec<ClusterState> = families
        .iter()
        .map(|f| family_view(objects, flags, *f))
        .collect();
    let mut primary = states.remove(0);
    primary.ipv6 = states.pop().map(Box::new);
    primary
}

fn internal_ips(node: &Node) -> Vec<IpAddr> {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
        .filter(|a| a.type_ == "InternalIP")
        .map(|a| ip(&a.address))
        .collect()
}

fn family_view(objects: &ClusterObjects, flags: &Flags<'_>, family: IpFamily) -> ClusterState {
    let service_cidr = objects
        .service_cidrs
        .iter()
        .flat_map(|sc| {
            sc.spec
                .as_ref()
                .and_then(|s| s.cidrs.clone())
                .unwrap_or_default()
        })
        .map(|c| parse::<IpCidr>(&c))
        .find(|c| c.family() == family)
        .expect("a ServiceCIDR of the family");
    let mut nodes: Vec<NodeInfo> = objects
        .nodes
        .iter()
        .map(|n| NodeInfo {
            name: n.metadata.name.clone().unwrap(),
            // nodeutil.GetNodeHostIPs: the first InternalIP of the family.
            ip: internal_ips(n)
                .into_iter()
                .find(|a| IpFamily::of(*a) == family)
                .expect("an InternalIP of the family"),
            pod_cidr: n
                .spec
                .as_ref()
                .and_then(|s| s.pod_cidrs.clone())
                .unwrap_or_default()
                .iter()
                .map(|c| parse::<IpCidr>(c))
                .find(|c| c.family() == family)
                .expect("a podCIDR of the family"),
        })
        .collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    let endpoints = endpoints_map(&objects.endpoint_slices, family);
    let mut service_ports: Vec<ServicePortInfo> = objects
        .services
        .iter()
        .filter(|svc| !has_label(&svc.metadata, LABEL_SERVICE_PROXY_NAME))
        .flat_map(|svc| service_ports(svc, family, &endpoints))
        .collect();
    service_ports.sort_by(|a, b| {
        (&a.namespace, &a.name, &a.port_name, a.protocol, a.port).cmp(&(
            &b.namespace,
            &b.name,
            &b.port_name,
            b.protocol,
            b.port,
        ))
    });
    ClusterState {
        ip_family: family,
        cluster_cidr: flags
            .cluster_cidr
            .of(family)
            .expect("--cluster-cidr of the family"),
        service_cidr,
        nodes,
        service_ports,
        options: flags.options.clone(),
        ipv6: None,
        idle: false,
    }
}

/// `ServicePortName`: namespace, service, port name, protocol.
type PortName = (String, String, String, Protocol);

/// `EndpointSliceCache.endpointInfoByServicePort` over every slice of `family`'s address type,
/// keyed by `IP:port` as kube-proxy's endpoint set is.
fn endpoints_map(
    slices: &[EndpointSlice],
    family: IpFamily,
) -> BTreeMap<PortName, BTreeMap<(IpAddr, u16), EndpointInfo>> {
    let mut map: BTreeMap<PortName, BTreeMap<(IpAddr, u16), EndpointInfo>> = BTreeMap::new();
    for slice in slices {
        if slice.address_type != family_name(family) || has_label(&slice.metadata, LABEL_HEADLESS) {
            continue;
        }
        let Some(service) = slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_SERVICE_NAME))
            .filter(|n| !n.is_empty())
        else {
            continue;
        };
        let namespace = slice.metadata.namespace.clone().unwrap();
        for port in slice.ports.iter().flatten() {
            let (Some(name), Some(number)) = (&port.name, port.port) else {
                continue;
            };
            if number == 0 {
                continue;
            }
            let protocol: Protocol = parse(port.protocol.as_deref().expect("defaulted protocol"));
            let set = map
                .entry((namespace.clone(), service.clone(), name.clone(), protocol))
                .or_default();
            for ep in slice.endpoints.iter().flatten() {
                let Some(first) = ep.addresses.first() else {
                    continue;
                };
                let c = ep.conditions.clone().unwrap_or_default();
                let info = EndpointInfo {
                    ip: ip(first),
                    port: u16::try_from(number).unwrap(),
                    node_name: ep.node_name.clone(),
                    ready: c.ready.unwrap_or(true),
                    serving: c.serving.unwrap_or(true),
                    terminating: c.terminating.unwrap_or(false),
                };
                let key = (info.ip, info.port);
                if !set.contains_key(&key) || !info.terminating {
                    set.insert(key, info);
                }
            }
        }
    }
    map
}

/// `serviceToServiceMap` + `newBaseServiceInfo` for one Service, with each port's endpoints.
fn service_ports(
    svc: &Service,
    family: IpFamily,
    endpoints: &BTreeMap<PortName, BTreeMap<(IpAddr, u16), EndpointInfo>>,
) -> Vec<ServicePortInfo> {
    let spec = svc.spec.as_ref().expect("spec");
    let type_: ServiceType = parse(spec.type_.as_deref().unwrap_or("ClusterIP"));
    // ShouldSkipService; the informer's `spec.clusterIP!=None` field selector.
    let cluster_ip = spec.cluster_ip.as_deref().unwrap_or("");
    if cluster_ip.is_empty() || cluster_ip == "None" || type_ == ServiceType::ExternalName {
        return Vec::new();
    }
    // GetClusterIPByFamily.
    let families = spec.ip_families.clone().unwrap_or_default();
    let by_family = if families.is_empty() {
        (IpFamily::of(ip(cluster_ip)) == family).then(|| cluster_ip.to_owned())
    } else {
        families
            .iter()
            .position(|f| *f == family_name(family))
            .and_then(|idx| spec.cluster_ips.as_ref()?.get(idx).cloned())
    };
    let Some(cluster_ip) = by_family else {
        return Vec::new();
    };
    let externally_accessible = matches!(type_, ServiceType::NodePort | ServiceType::LoadBalancer)
        || (type_ == ServiceType::ClusterIP
            && spec.external_ips.as_ref().is_some_and(|e| !e.is_empty()));
    let external_policy_local =
        externally_accessible && spec.external_traffic_policy.as_deref() == Some("Local");
    let internal_policy_local = spec.internal_traffic_policy.as_deref() == Some("Local");
    let sticky = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
        let seconds = spec
            .session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds)
            .expect("the API server guarantees a timeout under ClientIP affinity");
        u32::try_from(seconds).unwrap()
    });
    let external_ips: Vec<IpAddr> = spec
        .external_ips
        .iter()
        .flatten()
        .map(|a| ip(a))
        .filter(|a| IpFamily::of(*a) == family)
        .collect();
    let mut source_ranges: Vec<IpCidr> = spec
        .load_balancer_source_ranges
        .iter()
        .flatten()
        .map(|c| parse::<IpCidr>(c.trim()))
        .filter(|c| c.family() == family)
        .collect();
    if source_ranges.iter().any(IpCidr::is_zero) {
        source_ranges.clear();
    }
    let load_balancer_vips: Vec<IpAddr> = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter(|ing| ing.ip_mode.as_deref().is_none_or(|m| m == "VIP"))
        .filter_map(|ing| ing.ip.as_deref().map(ip))
        .filter(|a| IpFamily::of(*a) == family)
        .collect();
    let needs_health_check = type_ == ServiceType::LoadBalancer && external_policy_local;
    let namespace = svc.metadata.namespace.clone().unwrap();
    let name = svc.metadata.name.clone().unwrap();
    spec.ports
        .iter()
        .flatten()
        .map(|port| {
            let port_name = port.name.clone().unwrap_or_default();
            let protocol: Protocol = parse(port.protocol.as_deref().expect("defaulted protocol"));
            let key = (namespace.clone(), name.clone(), port_name.clone(), protocol);
            ServicePortInfo {
                headless_label: false,
                listed: Vec::new(),
                namespace: namespace.clone(),
                name: name.clone(),
                port_name,
                type_,
                protocol,
                cluster_ip: Some(ip(&cluster_ip)),
                port: u16::try_from(port.port).unwrap(),
                node_port: port
                    .node_port
                    .filter(|n| *n != 0)
                    .map(|n| u16::try_from(n).unwrap()),
                external_ips: external_ips.clone(),
                load_balancer_vips: load_balancer_vips.clone(),
                load_balancer_source_ranges: source_ranges.clone(),
                external_policy_local,
                internal_policy_local,
                session_affinity_timeout_seconds: sticky,
                health_check_node_port: spec
                    .health_check_node_port
                    .filter(|p| needs_health_check && *p != 0)
                    .map(|p| u16::try_from(p).unwrap()),
                endpoints: endpoints
                    .get(&key)
                    .map(|set| set.values().cloned().collect())
                    .unwrap_or_default(),
            }
        })
        .collect()
}

/// Every leaf where `a` and `b` differ, as `path: expected …, got …`.
fn diff(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let null = Value::Null;
                diff(
                    &format!("{path}.{k}"),
                    x.get(k).unwrap_or(&null),
                    y.get(k).unwrap_or(&null),
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                diff(&format!("{path}[{i}]"), p, q, out);
            }
        }
        _ if a != b => out.push(format!("{path}: expected {a}, got {b}")),
        _ => {}
    }
}

/// kpct's ClusterState with the node list in name order, as the oracle builds it.
fn comparable(mut state: ClusterState) -> ClusterState {
    state.nodes.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(v6) = state.ipv6.take() {
        state.ipv6 = Some(Box::new(comparable(*v6)));
    }
    state
}

/// The differences between what kube-proxy would read from the objects of `state` and kpct's
/// ClusterState of it.
fn differences(state: &scenario::Scenario, objects: &ClusterObjects) -> Vec<String> {
    let flags = Flags {
        cluster_cidr: &state.topology.cluster_cidr,
        options: &state.proxier,
    };
    let expected = serde_json::to_value(comparable(scenario::cluster_state(state))).unwrap();
    let got = serde_json::to_value(proxier_view(objects, &flags)).unwrap();
    let mut out = Vec::new();
    diff("cluster", &expected, &got, &mut out);
    out
}

fn library() -> Vec<PathBuf> {
    let pattern = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(scenario::BUNDLED);
    scenario::files(&[pattern.display().to_string()]).unwrap()
}

/// Every state of every library scenario: (file, step label, state).
fn every_state() -> Vec<(String, String, scenario::Scenario)> {
    let mut out = Vec::new();
    for file in library() {
        let s = scenario::load(&file).unwrap_or_else(|e| panic!("{e}"));
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        out.push((
            name.clone(),
            "initial".to_owned(),
            scenario::state_at(&s, None).scenario,
        ));
        for (k, step) in s.steps.iter().enumerate() {
            out.push((
                name.clone(),
                format!("after step {}", scenario::step_name(step, k)),
                scenario::state_at(&s, Some(k)).scenario,
            ));
        }
    }
    out
}

#[test]
fn every_scenario_state_reads_back_as_its_cluster_state() {
    let states = every_state();
    assert!(states.len() > 107, "{} states", states.len());
    let mut failures = Vec::new();
    let mut endpoints_seen = 0;
    for (file, step, state) in &states {
        let objects = cluster_objects(state);
        endpoints_seen += scenario::cluster_state(state)
            .families()
            .flat_map(|c| &c.service_ports)
            .map(|sp| sp.endpoints.len())
            .sum::<usize>();
        for d in differences(state, &objects) {
            failures.push(format!("{file} ({step}): {d}"));
        }
    }
    assert!(
        endpoints_seen > 100,
        "the comparison saw {endpoints_seen} endpoints"
    );
    assert!(
        failures.is_empty(),
        "{} difference(s) between kube-proxy's reading of the objects and kpct's ClusterState \
         (expected = kpct, got = objects):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Where kube-proxy's reading is easy to get wrong, kpct's ClusterState agrees with it too:
/// conditions left out of an explicit slice (a missing `ready` or `serving` is true, a
/// missing `terminating` false, each on its own: `EndpointSliceCache.addEndpoints`) and a
/// zero-length source range, which clears its family's ranges ("allow any", `IsZeroCIDR` in
/// `newBaseServiceInfo`) and leaves the other family's alone.
#[test]
fn defaulted_conditions_and_allow_any_ranges_read_back_as_the_cluster_state() {
    const YAML: &str = r#"
topology:
  underlay: 192.168.1.0/24,fd00:192:168:1::/64
  clusterCIDR: 10.244.0.0/16,fd00:10:244::/56
  serviceCIDR: 10.96.0.0/12,fd00:10:96::/112
  nodes:
    - { name: node-a, ips: [192.168.1.10, "fd00:192:168:1::10"], podCIDRs: [10.244.1.0/24, "fd00:10:244:1::/64"] }
  pods:
    - { name: a, node: node-a, ips: [10.244.1.10, "fd00:10:244:1::10"] }
    - { name: b, node: node-a, ips: [10.244.1.11, "fd00:10:244:1::11"] }
    - { name: c, node: node-a, ips: [10.244.1.12, "fd00:10:244:1::12"] }
services:
  - name: lb
    spec:
      type: LoadBalancer
      ipFamilyPolicy: RequireDualStack
      clusterIPs: [10.96.0.10, "fd00:10:96::a"]
      loadBalancerSourceRanges: [10.0.0.0/8, 0.0.0.0/0, "fd00::/8"]
      ports: [{ port: 80, targetPort: 8080, nodePort: 30080 }]
    status:
      loadBalancer:
        ingress: [{ ip: 192.168.1.200 }, { ip: "fd00:192:168:1::200" }]
endpointSlices:
  - service: lb
    ports: [{ port: 8080 }]
    endpoints:
      - { addresses: [10.244.1.10], conditions: { terminating: true } }
      - { addresses: [10.244.1.11], conditions: { ready: false } }
      - { addresses: [10.244.1.12], conditions: { serving: false, terminating: true } }
"#;
    let state = scenario::parse(YAML, "defaults.yaml").unwrap_or_else(|e| panic!("{e}"));
    let cluster = scenario::cluster_state(&state);
    let conditions: Vec<(bool, bool, bool)> = cluster.service_ports[0]
        .endpoints
        .iter()
        .map(|e| (e.ready, e.serving, e.terminating))
        .collect();
    assert_eq!(
        conditions,
        [
            (true, true, true),
            (false, true, false),
            (true, false, true)
        ]
    );
    assert_eq!(cluster.service_ports[0].load_balancer_source_ranges, []);
    assert_eq!(
        cluster.ipv6.as_ref().unwrap().service_ports[0].load_balancer_source_ranges,
        [parse::<IpCidr>("fd00::/8")]
    );
    assert_eq!(
        differences(&state, &cluster_objects(&state)),
        Vec::<String>::new()
    );
}

/// The oracle is no tautology: slices whose named targetPort was resolved once for every pod
/// (on the first one) instead of per pod are noticed and located.
#[test]
fn a_broken_object_is_noticed() {
    let file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/clusterip-named-targetport.yaml");
    let s = scenario::load(&file).unwrap();
    let mut objects = cluster_objects(&s);
    assert_eq!(differences(&s, &objects), Vec::<String>::new());
    let mut broken = 0;
    for slice in &mut objects.endpoint_slices {
        for port in slice.ports.iter_mut().flatten() {
            if port.port == Some(8081) {
                port.port = Some(8080);
                broken += 1;
            }
        }
    }
    assert_eq!(broken, 1);
    assert_eq!(
        differences(&s, &objects),
        ["cluster.servicePorts[0].endpoints[1].port: expected 8081, got 8080"],
    );
}

/// What the endpoints controller publishes agrees with the controller's slices of the
/// Service's primary family: the same ready addresses with the same ports.
#[test]
fn endpoints_mirror_the_primary_family_slices() {
    for (file, step, state) in every_state() {
        let objects = cluster_objects(&state);
        for eps in &objects.endpoints {
            let ns = eps.metadata.namespace.clone().unwrap();
            let name = eps.metadata.name.clone().unwrap();
            let svc = objects
                .services
                .iter()
                .find(|s| {
                    s.metadata.namespace == Some(ns.clone())
                        && s.metadata.name == Some(name.clone())
                })
                .unwrap();
            let primary = svc.spec.as_ref().unwrap().ip_families.as_ref().unwrap()[0].clone();
            let from_endpoints: BTreeSet<(String, String, i32, String)> = eps
                .subsets
                .iter()
                .flatten()
                .flat_map(|ss| {
                    let ports = ss.ports.clone().unwrap_or_default();
                    ss.addresses.iter().flatten().flat_map(move |a| {
                        ports.clone().into_iter().map(move |p| {
                            (
                                a.ip.clone(),
                                p.name.unwrap_or_default(),
                                p.port,
                                p.protocol.unwrap(),
                            )
                        })
                    })
                })
                .collect();
            let from_slices: BTreeSet<(String, String, i32, String)> = objects
                .endpoint_slices
                .iter()
                .filter(|sl| {
                    sl.metadata.namespace == Some(ns.clone())
                        && sl.address_type == primary
                        && sl.metadata.labels.as_ref().unwrap()[LABEL_SERVICE_NAME] == name
                        && sl.metadata.labels.as_ref().unwrap()[LABEL_MANAGED_BY]
                            == ENDPOINTSLICE_CONTROLLER
                })
                .flat_map(|sl| {
                    let ports = sl.ports.clone().unwrap_or_default();
                    sl.endpoints
                        .clone()
                        .unwrap_or_default()
                        .into_iter()
                        .flat_map(move |ep| {
                            let ports = ports.clone();
                            ep.addresses.into_iter().take(1).flat_map(move |a| {
                                ports.clone().into_iter().map(move |p| {
                                    (
                                        a.clone(),
                                        p.name.unwrap(),
                                        p.port.unwrap(),
                                        p.protocol.unwrap(),
                                    )
                                })
                            })
                        })
                })
                .collect();
            assert_eq!(from_endpoints, from_slices, "{file} ({step}): {ns}/{name}");
        }
    }
}

/// Same state, same objects; and every object survives a JSON round trip through its
/// k8s-openapi type (what the API server sends is what a client reads).
#[test]
fn objects_are_deterministic_and_serializable() {
    for (file, step, state) in every_state() {
        let objects = cluster_objects(&state);
        assert_eq!(objects, cluster_objects(&state.clone()), "{file} ({step})");
        fn round_trip<T>(items: &[T], what: &str)
        where
            T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
        {
            for item in items {
                let json = serde_json::to_string(item).unwrap();
                let back: T =
                    serde_json::from_str(&json).unwrap_or_else(|e| panic!("{what}: {e}: {json}"));
                assert_eq!(&back, item, "{what}");
            }
        }
        round_trip(&objects.namespaces, "namespace");
        round_trip(&objects.nodes, "node");
        round_trip(&objects.pods, "pod");
        round_trip(&objects.services, "service");
        round_trip(&objects.endpoint_slices, "endpointslice");
        round_trip(&objects.endpoints, "endpoints");
        round_trip(&objects.service_cidrs, "servicecidr");
        let names: BTreeSet<(Option<String>, Option<String>)> = objects
            .endpoint_slices
            .iter()
            .map(|sl| (sl.metadata.namespace.clone(), sl.metadata.name.clone()))
            .collect();
        assert_eq!(
            names.len(),
            objects.endpoint_slices.len(),
            "{file} ({step}): slice names are unique"
        );
    }
}
