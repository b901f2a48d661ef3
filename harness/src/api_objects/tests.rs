//! The tricky parts of [`super::cluster_objects`], each against what the real controller or
//! API server does.

use super::*;
use k8s_openapi::api::core::v1::{EndpointAddress, EndpointSubset};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

fn objects(yaml: &str) -> ClusterObjects {
    let s = crate::scenario::parse(yaml, "t.yaml").unwrap_or_else(|e| panic!("{e}"));
    cluster_objects(&s)
}

const SINGLE: &str = r#"
topology:
  underlay: 192.168.1.0/24
  clusterCIDR: 10.244.0.0/16
  serviceCIDR: 10.96.0.0/12
  nodes:
    - {name: node-a, ip: 192.168.1.10, podCIDR: 10.244.1.0/24, secondaryIPs: [192.168.1.20]}
    - {name: node-b, ip: 192.168.1.11, podCIDR: 10.244.2.0/24}
  pods:
    - {name: client, node: node-a, ip: 10.244.1.10}
    - {name: web-a, node: node-a, ip: 10.244.1.20, labels: {app: web}, ports: [{name: http, containerPort: 8080}]}
    - {name: web-b, node: node-b, ip: 10.244.2.20, labels: {app: web}, ports: [{name: http, containerPort: 8081}]}
    - {name: web-noport, node: node-b, ip: 10.244.2.21, labels: {app: web}, ports: [{name: other, containerPort: 8080}]}
"#;

const DUAL: &str = r#"
topology:
  underlay: 192.168.1.0/24,fd00:192:168:1::/64
  clusterCIDR: 10.244.0.0/16,fd00:10:244::/56
  serviceCIDR: 10.96.0.0/12,fd00:10:96::/112
  nodes:
    - {name: node-b, ips: [192.168.1.11, "fd00:192:168:1::11"], podCIDRs: [10.244.2.0/24, "fd00:10:244:2::/64"]}
    - {name: node-a, ips: [192.168.1.10, "fd00:192:168:1::10"], podCIDRs: [10.244.1.0/24, "fd00:10:244:1::/64"]}
  pods:
    - {name: web-1, namespace: shop, node: node-a, ips: [10.244.1.10, "fd00:10:244:1::10"], labels: {app: web}}
"#;

fn with_services(topology: &str, services: &str) -> String {
    format!("{topology}services:\n{services}")
}

/// A slice as (addressType, ports, endpoint addresses).
type SliceSummary = (String, Vec<(String, i32)>, Vec<String>);

/// The slices of one Service.
fn slices_of(o: &ClusterObjects, service: &str) -> Vec<SliceSummary> {
    o.endpoint_slices
        .iter()
        .filter(|sl| sl.metadata.labels.as_ref().unwrap()[LABEL_SERVICE_NAME] == service)
        .map(|sl| {
            (
                sl.address_type.clone(),
                sl.ports
                    .iter()
                    .flatten()
                    .map(|p| (p.name.clone().unwrap(), p.port.unwrap()))
                    .collect(),
                sl.endpoints
                    .iter()
                    .flatten()
                    .flat_map(|ep| ep.addresses.clone())
                    .collect(),
            )
        })
        .collect()
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn service<'a>(o: &'a ClusterObjects, name: &str) -> &'a k8s_openapi::api::core::v1::ServiceSpec {
    o.services
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some(name))
        .and_then(|s| s.spec.as_ref())
        .unwrap()
}

/// A named targetPort resolves per pod, and the controller groups endpoints by their resolved
/// ports: one slice per port number, and one without ports for the pod that lacks the name
/// (`getEndpointPorts` skips the port, the pod is still an endpoint of an empty port set).
#[test]
fn named_target_ports_split_pods_into_slices() {
    let o = objects(&with_services(
        SINGLE,
        "  - name: web\n    spec: {clusterIP: 10.96.0.10, selector: {app: web}, ports: [{name: http, port: 80, targetPort: http}]}\n",
    ));
    let mut slices = slices_of(&o, "web");
    slices.sort();
    assert_eq!(
        slices,
        [
            ("IPv4".into(), vec![], strings(&["10.244.2.21"])),
            (
                "IPv4".into(),
                vec![("http".into(), 8080)],
                strings(&["10.244.1.20"])
            ),
            (
                "IPv4".into(),
                vec![("http".into(), 8081)],
                strings(&["10.244.2.20"])
            ),
        ]
    );
    let web = &o
        .endpoint_slices
        .iter()
        .find(|sl| sl.ports.as_ref().unwrap().first().and_then(|p| p.port) == Some(8080))
        .unwrap();
    assert!(web.metadata.name.as_ref().unwrap().starts_with("web-"));
    assert_eq!(web.metadata.name.as_ref().unwrap().len(), "web-".len() + 5);
    assert_eq!(
        web.endpoints.as_ref().unwrap()[0],
        Endpoint {
            addresses: strings(&["10.244.1.20"]),
            conditions: Some(EndpointConditions {
                ready: Some(true),
                serving: Some(true),
                terminating: Some(false),
            }),
            node_name: Some("node-a".into()),
            target_ref: Some(k8s_openapi::api::core::v1::ObjectReference {
                kind: Some("Pod".into()),
                namespace: Some("default".into()),
                name: Some("web-a".into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    );
    assert_eq!(
        web.metadata.labels.as_ref().unwrap(),
        &labels([
            (LABEL_MANAGED_BY, ENDPOINTSLICE_CONTROLLER),
            (LABEL_SERVICE_NAME, "web"),
        ])
    );
    // The endpoints controller repacks the same resolution into subsets per port set, and
    // leaves out the pod on which no port resolves.
    let eps = &o.endpoints[0];
    let subset = |ip: &str, pod: &str, node: &str, port: i32| EndpointSubset {
        addresses: Some(vec![EndpointAddress {
            ip: ip.into(),
            node_name: Some(node.into()),
            target_ref: Some(k8s_openapi::api::core::v1::ObjectReference {
                kind: Some("Pod".into()),
                namespace: Some("default".into()),
                name: Some(pod.into()),
                ..Default::default()
            }),
            hostname: None,
        }]),
        not_ready_addresses: None,
        ports: Some(vec![k8s_openapi::api::core::v1::EndpointPort {
            name: Some("http".into()),
            port,
            protocol: Some("TCP".into()),
            app_protocol: None,
        }]),
    };
    assert_eq!(
        eps.subsets.as_ref().unwrap(),
        &[
            subset("10.244.1.20", "web-a", "node-a", 8080),
            subset("10.244.2.20", "web-b", "node-b", 8081),
        ]
    );
    assert_eq!(
        eps.metadata.labels.as_ref().unwrap(),
        &labels([(LABEL_ENDPOINTS_MANAGED_BY, ENDPOINTS_CONTROLLER)])
    );
}

/// Pods offering the same ports share a subset in Endpoints; a port only some pods resolve
/// gets a subset of its own (`RepackSubsets` groups ports by the addresses serving them).
#[test]
fn endpoints_repack_ports_by_the_addresses_serving_them() {
    let topology = SINGLE.replace(
        "ports: [{name: http, containerPort: 8081}]",
        "ports: [{name: http, containerPort: 8080}, {name: admin, containerPort: 9000}]",
    );
    let o = objects(&with_services(
        &topology,
        "  - name: web\n    spec: {clusterIP: 10.96.0.10, selector: {app: web}, ports: [{name: http, port: 80, targetPort: http}, {name: admin, port: 90, targetPort: admin}]}\n",
    ));
    type SubsetSummary = (Vec<String>, Vec<(String, i32)>);
    let subsets: Vec<SubsetSummary> = o.endpoints[0]
        .subsets
        .iter()
        .flatten()
        .map(|ss| {
            (
                ss.addresses
                    .iter()
                    .flatten()
                    .map(|a| a.ip.clone())
                    .collect(),
                ss.ports
                    .iter()
                    .flatten()
                    .map(|p| (p.name.clone().unwrap(), p.port))
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        subsets,
        [
            (strings(&["10.244.2.20"]), vec![("admin".into(), 9000)]),
            (
                strings(&["10.244.1.20", "10.244.2.20"]),
                vec![("http".into(), 8080)]
            ),
        ]
    );
}

/// A dual-stack Service gets a slice per family with each pod's address of that family; a
/// single-stack one only its family's; the Endpoints object carries the primary family only.
#[test]
fn dual_stack_services_get_a_slice_per_family() {
    let o = objects(&with_services(
        DUAL,
        r#"  - name: both
    namespace: shop
    spec: {ipFamilyPolicy: PreferDualStack, ipFamilies: [IPv6], clusterIPs: ["fd00:10:96::a", 10.96.0.10], selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}
  - name: six
    namespace: shop
    spec: {clusterIP: "fd00:10:96::b", selector: {app: web}, ports: [{port: 80}]}
"#,
    ));
    let spec = service(&o, "both");
    assert_eq!(spec.ip_families, Some(strings(&["IPv6", "IPv4"])));
    assert_eq!(spec.ip_family_policy.as_deref(), Some("PreferDualStack"));
    assert_eq!(spec.cluster_ip.as_deref(), Some("fd00:10:96::a"));
    assert_eq!(
        spec.cluster_ips,
        Some(strings(&["fd00:10:96::a", "10.96.0.10"]))
    );
    let mut both = slices_of(&o, "both");
    both.sort();
    assert_eq!(
        both,
        [
            (
                "IPv4".into(),
                vec![(String::new(), 8080)],
                strings(&["10.244.1.10"])
            ),
            (
                "IPv6".into(),
                vec![(String::new(), 8080)],
                strings(&["fd00:10:244:1::10"])
            ),
        ]
    );
    // ipFamilies inferred from the one IPv6 ClusterIP, SingleStack by default.
    let six = service(&o, "six");
    assert_eq!(six.ip_families, Some(strings(&["IPv6"])));
    assert_eq!(six.ip_family_policy.as_deref(), Some("SingleStack"));
    assert_eq!(
        slices_of(&o, "six"),
        [(
            "IPv6".into(),
            vec![(String::new(), 80)],
            strings(&["fd00:10:244:1::10"])
        )]
    );
    let primary: Vec<&str> = o
        .endpoints
        .iter()
        .flat_map(|e| e.subsets.iter().flatten())
        .flat_map(|ss| ss.addresses.iter().flatten())
        .map(|a| a.ip.as_str())
        .collect();
    assert_eq!(primary, ["fd00:10:244:1::10", "fd00:10:244:1::10"]);
    // The unnamed port is unnamed in Endpoints (a Go string with omitempty) and "" in a slice.
    let port = &o.endpoints[0].subsets.as_ref().unwrap()[0]
        .ports
        .as_ref()
        .unwrap()[0];
    assert_eq!(port.name, None);
    let namespaces: Vec<&str> = o
        .namespaces
        .iter()
        .map(|n| n.metadata.name.as_deref().unwrap())
        .collect();
    assert_eq!(namespaces, ["default", "kube-system", "shop"]);
    assert_eq!(
        o.service_cidrs[0].spec.as_ref().unwrap().cidrs,
        Some(strings(&["10.96.0.0/12", "fd00:10:96::/112"]))
    );
}

/// A selector without pods still gets one empty placeholder slice per family.
#[test]
fn a_selector_without_pods_gets_an_empty_slice_per_family() {
    let o = objects(&with_services(
        DUAL,
        "  - name: none\n    spec: {ipFamilyPolicy: RequireDualStack, clusterIPs: [10.96.0.10, \"fd00:10:96::a\"], selector: {app: nothing}, ports: [{port: 80}]}\n",
    ));
    assert_eq!(
        slices_of(&o, "none"),
        [
            ("IPv4".into(), vec![], vec![]),
            ("IPv6".into(), vec![], vec![])
        ]
    );
    assert_eq!(o.endpoints.len(), 1);
    assert_eq!(o.endpoints[0].subsets, None);
}

/// The controller fills slices up to 100 endpoints and starts another.
#[test]
fn slices_hold_at_most_100_endpoints() {
    let pods: String = (0..150)
        .map(|i| {
            format!(
                "    - {{name: p{i}, node: node-a, ip: 10.244.1.{}, labels: {{app: many}}}}\n",
                i + 100
            )
        })
        .collect();
    let topology = format!("{SINGLE}{pods}").replace("  pods:\n", "  pods:\n");
    let o = objects(&with_services(
        &topology,
        "  - name: many\n    spec: {clusterIP: 10.96.0.10, selector: {app: many}, ports: [{port: 80}]}\n",
    ));
    let sizes: Vec<usize> = slices_of(&o, "many").iter().map(|s| s.2.len()).collect();
    assert_eq!(sizes, [100, 50]);
}

/// Explicit slices are kept as written: unset conditions stay unset (the API server defaults
/// none), nodeName defaults to the owning pod's node, ports get the API's name and protocol
/// defaults; the Service loses its selector, so no controller slice or Endpoints object
/// stands beside them.
#[test]
fn explicit_slices_are_kept_as_written() {
    let yaml = format!(
        "{}endpointSlices:\n{}",
        with_services(
            SINGLE,
            "  - name: web\n    spec: {clusterIP: 10.96.0.10, selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}\n",
        ),
        r#"  - service: web
    ports: [{port: 8080}]
    endpoints:
      - addresses: [10.244.1.20]
        conditions: {terminating: true}
      - addresses: [10.244.2.20]
        nodeName: node-b
"#
    );
    let o = objects(&yaml);
    assert_eq!(o.endpoint_slices.len(), 1);
    let sl = &o.endpoint_slices[0];
    assert_eq!(sl.metadata.name.as_deref(), Some("web-0"));
    assert_eq!(
        sl.metadata.labels.as_ref().unwrap(),
        &labels([
            (LABEL_MANAGED_BY, SCENARIO_MANAGER),
            (LABEL_SERVICE_NAME, "web")
        ])
    );
    assert_eq!(
        sl.ports,
        Some(vec![EndpointPort {
            name: Some(String::new()),
            port: Some(8080),
            protocol: Some("TCP".into()),
            app_protocol: None,
        }])
    );
    let eps = sl.endpoints.as_ref().unwrap();
    assert_eq!(
        eps[0].conditions,
        Some(EndpointConditions {
            ready: None,
            serving: None,
            terminating: Some(true),
        })
    );
    assert_eq!(eps[0].node_name.as_deref(), Some("node-a"));
    assert_eq!(eps[0].target_ref, None);
    assert_eq!(eps[1].conditions, Some(EndpointConditions::default()));
    assert_eq!(eps[1].node_name.as_deref(), Some("node-b"), "as written");
    assert_eq!(service(&o, "web").selector, None);
    assert!(o.endpoints.is_empty());
}

/// What `SetDefaults_Service` fills in.
#[test]
fn service_defaults() {
    let o = objects(&with_services(
        SINGLE,
        r#"  - name: plain
    spec: {clusterIP: 10.96.0.10, selector: {app: web}, externalTrafficPolicy: Local, ports: [{port: 80}]}
  - name: ext
    spec: {clusterIP: 10.96.0.11, externalIPs: [192.168.1.200], ports: [{port: 80, protocol: UDP}]}
  - name: en
    spec: {type: ExternalName, selector: {app: web}, ports: [{port: 80}]}
  - name: np
    spec: {type: NodePort, clusterIP: 10.96.0.12, sessionAffinity: ClientIP, ports: [{port: 80, targetPort: 8080, nodePort: 30080}]}
  - name: lb
    spec:
      type: LoadBalancer
      clusterIP: 10.96.0.13
      selector: {app: web}
      externalTrafficPolicy: Local
      healthCheckNodePort: 30999
      internalTrafficPolicy: Local
      sessionAffinity: ClientIP
      sessionAffinityConfig: {clientIP: {timeoutSeconds: 60}}
      loadBalancerSourceRanges: [10.0.0.0/8]
      ports: [{name: http, port: 80, targetPort: http, nodePort: 30081}]
    status:
      loadBalancer:
        ingress: [{ip: 192.168.1.201}, {ip: 192.168.1.202, ipMode: Proxy}]
"#,
    ));
    let plain = service(&o, "plain");
    assert_eq!(plain.type_.as_deref(), Some("ClusterIP"));
    assert_eq!(
        plain.external_traffic_policy, None,
        "not externally accessible: the API server allows no externalTrafficPolicy"
    );
    assert_eq!(plain.internal_traffic_policy.as_deref(), Some("Cluster"));
    assert_eq!(plain.session_affinity.as_deref(), Some("None"));
    assert_eq!(plain.session_affinity_config, None);
    assert_eq!(plain.ip_families, Some(strings(&["IPv4"])));
    assert_eq!(plain.ip_family_policy.as_deref(), Some("SingleStack"));
    assert_eq!(plain.allocate_load_balancer_node_ports, None);
    let port = &plain.ports.as_ref().unwrap()[0];
    assert_eq!(
        port.target_port,
        Some(IntOrString::Int(80)),
        "targetPort defaults to port"
    );
    assert_eq!(port.protocol.as_deref(), Some("TCP"));
    assert_eq!(port.name, None);

    let ext = service(&o, "ext");
    assert_eq!(ext.external_traffic_policy.as_deref(), Some("Cluster"));
    assert_eq!(ext.external_ips, Some(strings(&["192.168.1.200"])));
    assert_eq!(
        ext.ports.as_ref().unwrap()[0].protocol.as_deref(),
        Some("UDP")
    );
    assert_eq!(ext.selector, None);

    let en = service(&o, "en");
    assert_eq!(en.type_.as_deref(), Some("ExternalName"));
    assert_eq!((&en.cluster_ip, &en.cluster_ips), (&None, &None));
    assert_eq!((&en.ip_families, &en.ip_family_policy), (&None, &None));
    assert_eq!(en.internal_traffic_policy, None);
    assert_eq!(en.external_traffic_policy, None);

    let np = service(&o, "np");
    assert_eq!(np.external_traffic_policy.as_deref(), Some("Cluster"));
    assert_eq!(
        np.session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds),
        Some(10800)
    );
    assert_eq!(np.ports.as_ref().unwrap()[0].node_port, Some(30080));
    assert_eq!(
        np.ports.as_ref().unwrap()[0].target_port,
        Some(IntOrString::Int(8080))
    );

    let lb = service(&o, "lb");
    assert_eq!(lb.external_traffic_policy.as_deref(), Some("Local"));
    assert_eq!(lb.internal_traffic_policy.as_deref(), Some("Local"));
    assert_eq!(lb.health_check_node_port, Some(30999));
    assert_eq!(lb.allocate_load_balancer_node_ports, Some(true));
    assert_eq!(
        lb.load_balancer_source_ranges,
        Some(strings(&["10.0.0.0/8"]))
    );
    assert_eq!(
        lb.session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds),
        Some(60)
    );
    assert_eq!(
        lb.ports.as_ref().unwrap()[0].target_port,
        Some(IntOrString::String("http".into()))
    );
    let lb_status = o
        .services
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some("lb"))
        .and_then(|s| s.status.as_ref())
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|s| s.ingress.as_ref())
        .unwrap();
    let modes: Vec<(Option<&str>, Option<&str>)> = lb_status
        .iter()
        .map(|i| (i.ip.as_deref(), i.ip_mode.as_deref()))
        .collect();
    assert_eq!(
        modes,
        [
            (Some("192.168.1.201"), Some("VIP")),
            (Some("192.168.1.202"), Some("Proxy"))
        ]
    );
    // Only Services with a selector get controller slices and Endpoints, and not ExternalName
    // ones.
    let served: Vec<&str> = o
        .endpoints
        .iter()
        .map(|e| e.metadata.name.as_deref().unwrap())
        .collect();
    assert_eq!(served, ["lb", "plain"]);
}

/// A headless Service keeps `clusterIP: None`, and the controllers label its slices and
/// Endpoints headless; without a selector, its policy defaults to RequireDualStack and it gets
/// both families even on a single-stack cluster (`initIPFamilyFields`' special case).
#[test]
fn headless_services() {
    let o = objects(&with_services(
        SINGLE,
        r#"  - name: db
    spec: {clusterIP: None, selector: {app: web}, ports: [{name: http, port: 80, targetPort: http}]}
  - name: bare
    spec: {clusterIP: None, ports: [{port: 80}]}
"#,
    ));
    let db = service(&o, "db");
    assert_eq!(db.cluster_ip.as_deref(), Some("None"));
    assert_eq!(db.cluster_ips, Some(strings(&["None"])));
    assert_eq!(db.ip_families, Some(strings(&["IPv4"])));
    assert_eq!(db.ip_family_policy.as_deref(), Some("SingleStack"));
    for sl in o.endpoint_slices.iter() {
        assert_eq!(
            sl.metadata.labels.as_ref().unwrap().get(LABEL_HEADLESS),
            Some(&String::new())
        );
    }
    assert_eq!(slices_of(&o, "db").len(), 3);
    assert_eq!(
        o.endpoints[0]
            .metadata
            .labels
            .as_ref()
            .unwrap()
            .get(LABEL_HEADLESS),
        Some(&String::new())
    );
    let bare = service(&o, "bare");
    assert_eq!(bare.ip_families, Some(strings(&["IPv4", "IPv6"])));
    assert_eq!(bare.ip_family_policy.as_deref(), Some("RequireDualStack"));
    assert!(
        slices_of(&o, "bare").is_empty(),
        "no selector, no controller slices"
    );
}

/// A Service's labels and annotations are stored as written; the EndpointSlice controller
/// copies its labels onto its slices except the reserved ones (`setEndpointSliceLabels`:
/// `kubernetes.io/service-name`, `endpointslice.kubernetes.io/managed-by` and
/// `service.kubernetes.io/headless` are the controller's), so a Service left to another proxy
/// has slices saying so too; the endpoints controller copies every label.
#[test]
fn service_labels_and_annotations() {
    let o = objects(&with_services(
        SINGLE,
        r#"  - name: web
    labels:
      service.kubernetes.io/service-proxy-name: other-proxy
      team: shop
      kubernetes.io/service-name: not-web
      service.kubernetes.io/headless: ""
    annotations: {example.com/owner: "Shop team <shop@example.com>"}
    spec: {clusterIP: 10.96.0.10, selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}
  - name: plain
    spec: {clusterIP: 10.96.0.11, selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}
"#,
    ));
    let meta = |name: &str| {
        &o.services
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(name))
            .unwrap()
            .metadata
    };
    let web = meta("web");
    assert_eq!(
        web.labels.as_ref().unwrap(),
        &labels([
            (LABEL_HEADLESS, ""),
            (LABEL_SERVICE_NAME, "not-web"),
            (LABEL_SERVICE_PROXY_NAME, "other-proxy"),
            ("team", "shop"),
        ])
    );
    assert_eq!(
        web.annotations.as_ref().unwrap(),
        &labels([("example.com/owner", "Shop team <shop@example.com>")])
    );
    assert_eq!(
        (&meta("plain").labels, &meta("plain").annotations),
        (&None, &None)
    );
    let slice_labels = |service: &str| {
        o.endpoint_slices
            .iter()
            .find(|sl| {
                sl.metadata
                    .name
                    .as_deref()
                    .unwrap()
                    .starts_with(&format!("{service}-"))
            })
            .unwrap()
            .metadata
            .labels
            .clone()
            .unwrap()
    };
    assert_eq!(
        slice_labels("web"),
        labels([
            (LABEL_MANAGED_BY, ENDPOINTSLICE_CONTROLLER),
            (LABEL_SERVICE_NAME, "web"),
            (LABEL_SERVICE_PROXY_NAME, "other-proxy"),
            ("team", "shop"),
        ]),
        "the Service's own labels, not its reserved ones"
    );
    assert_eq!(
        slice_labels("plain"),
        labels([
            (LABEL_MANAGED_BY, ENDPOINTSLICE_CONTROLLER),
            (LABEL_SERVICE_NAME, "plain"),
        ])
    );
    let endpoints = o
        .endpoints
        .iter()
        .find(|e| e.metadata.name.as_deref() == Some("web"))
        .unwrap();
    assert_eq!(
        endpoints.metadata.labels.as_ref().unwrap(),
        &labels([
            (LABEL_ENDPOINTS_MANAGED_BY, ENDPOINTS_CONTROLLER),
            (LABEL_SERVICE_NAME, "not-web"),
            (LABEL_SERVICE_PROXY_NAME, "other-proxy"),
            ("team", "shop"),
        ]),
        "every label, the headless one only on a headless Service"
    );
}

/// Nodes as kubelet registers them: one InternalIP per family, primary first, then the
/// Hostname; secondary addresses are not node IPs; podCIDR is the first podCIDRs.
#[test]
fn node_addresses_and_pod_cidrs() {
    let o = objects(SINGLE);
    let node_a = &o.nodes[0];
    assert_eq!(node_a.metadata.name.as_deref(), Some("node-a"));
    let addresses: Vec<(&str, &str)> = node_a
        .status
        .as_ref()
        .unwrap()
        .addresses
        .iter()
        .flatten()
        .map(|a| (a.type_.as_str(), a.address.as_str()))
        .collect();
    assert_eq!(
        addresses,
        [("InternalIP", "192.168.1.10"), ("Hostname", "node-a")],
        "secondaryIPs are no InternalIPs"
    );

    let o = objects(DUAL);
    let names: Vec<&str> = o
        .nodes
        .iter()
        .map(|n| n.metadata.name.as_deref().unwrap())
        .collect();
    assert_eq!(names, ["node-a", "node-b"], "sorted by name");
    let node_a = &o.nodes[0];
    let status = node_a.status.as_ref().unwrap();
    let addresses: Vec<(&str, &str)> = status
        .addresses
        .iter()
        .flatten()
        .map(|a| (a.type_.as_str(), a.address.as_str()))
        .collect();
    assert_eq!(
        addresses,
        [
            ("InternalIP", "192.168.1.10"),
            ("InternalIP", "fd00:192:168:1::10"),
            ("Hostname", "node-a")
        ]
    );
    let spec = node_a.spec.as_ref().unwrap();
    assert_eq!(spec.pod_cidr.as_deref(), Some("10.244.1.0/24"));
    assert_eq!(
        spec.pod_cidrs,
        Some(strings(&["10.244.1.0/24", "fd00:10:244:1::/64"]))
    );
    let ready = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "True");
    let labels = node_a.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["kubernetes.io/hostname"], "node-a");
    assert_eq!(labels["kubernetes.io/os"], "linux");

    let pod = &o.pods[0];
    assert_eq!(
        pod.spec.as_ref().unwrap().node_name.as_deref(),
        Some("node-a")
    );
    let status = pod.status.as_ref().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert_eq!(status.pod_ip.as_deref(), Some("10.244.1.10"));
    let pod_ips: Vec<&str> = status
        .pod_ips
        .iter()
        .flatten()
        .map(|p| p.ip.as_str())
        .collect();
    assert_eq!(pod_ips, ["10.244.1.10", "fd00:10:244:1::10"]);
    let host_ips: Vec<&str> = status
        .host_ips
        .iter()
        .flatten()
        .map(|p| p.ip.as_str())
        .collect();
    assert_eq!(host_ips, ["192.168.1.10", "fd00:192:168:1::10"]);
    assert!(status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True"));
}

/// The same state gives the same objects, slice names included; changing a slice's endpoints
/// keeps its name (the controller updates a slice in place).
#[test]
fn names_are_stable() {
    let one = with_services(
        SINGLE,
        "  - name: web\n    spec: {clusterIP: 10.96.0.10, selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}\n",
    );
    let fewer = one.replace(
        "labels: {app: web}, ports: [{name: http, containerPort: 8081}]",
        "ports: [{name: http, containerPort: 8081}]",
    );
    assert_ne!(one, fewer);
    let (a, b) = (objects(&one), objects(&fewer));
    assert_eq!(a, objects(&one));
    assert_ne!(a.endpoint_slices, b.endpoint_slices);
    assert_eq!(
        a.endpoint_slices[0].metadata.name,
        b.endpoint_slices[0].metadata.name
    );
}
