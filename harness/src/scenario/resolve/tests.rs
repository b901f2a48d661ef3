use super::*;
use crate::scenario::model::*;
use crate::scenario::IpCidr;
use std::collections::BTreeMap;

/// An address of whichever type the caller needs.
fn ip<T: std::str::FromStr>(s: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    s.parse().unwrap()
}

fn cidr(s: &str) -> Ipv4Cidr {
    s.parse().unwrap()
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn pod(name: &str, node: &str, addr: &str, app: &str, ports: Vec<ContainerPort>) -> Pod {
    Pod {
        name: name.into(),
        namespace: "default".into(),
        node: node.into(),
        ip: DualIp::v4(ip(addr)),
        labels: labels(&[("app", app)]),
        ports,
    }
}

fn cport(name: &str, port: u16, protocol: Protocol) -> ContainerPort {
    ContainerPort {
        name: Some(name.into()),
        container_port: port,
        protocol,
    }
}

fn sport(name: Option<&str>, port: u16, target: Option<TargetPort>) -> ServicePort {
    ServicePort {
        name: name.map(Into::into),
        protocol: Protocol::Tcp,
        port,
        target_port: target,
        node_port: None,
    }
}

fn service(name: &str, cluster_ip: &str, app: &str, ports: Vec<ServicePort>) -> Service {
    Service {
        name: name.into(),
        namespace: "default".into(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        spec: ServiceSpec {
            type_: ServiceType::ClusterIP,
            cluster_ip: Some(cluster_ip.into()),
            cluster_ips: vec![],
            ip_families: vec![],
            ip_family_policy: None,
            selector: Some(labels(&[("app", app)])),
            ports,
            external_ips: vec![],
            external_traffic_policy: None,
            internal_traffic_policy: None,
            load_balancer_source_ranges: vec![],
            session_affinity: SessionAffinity::None,
            session_affinity_config: None,
            health_check_node_port: None,
        },
        status: ServiceStatus::default(),
    }
}

fn scenario(pods: Vec<Pod>, services: Vec<Service>) -> Scenario {
    Scenario {
        name: "t".into(),
        description: String::new(),
        topology: Topology {
            underlay: DualCidr::v4(cidr("192.168.1.0/24")),
            cluster_cidr: DualCidr::v4(cidr("10.244.0.0/16")),
            service_cidr: DualCidr::v4(cidr("10.96.0.0/12")),
            service_node_port_range: crate::scenario::PortRange::DEFAULT_NODE_PORTS,
            nodes: vec![
                Node {
                    name: "node-a".into(),
                    ip: DualIp::v4(ip("192.168.1.10")),
                    secondary_ips: Vec::new(),
                    existing_ipvs: String::new(),
                    pod_cidr: DualCidr::v4(cidr("10.244.1.0/24")),
                },
                Node {
                    name: "node-b".into(),
                    ip: DualIp::v4(ip("192.168.1.11")),
                    secondary_ips: Vec::new(),
                    existing_ipvs: String::new(),
                    pod_cidr: DualCidr::v4(cidr("10.244.2.0/24")),
                },
            ],
            pods,
            external: None,
        },
        services,
        endpoint_slices: vec![],
        proxier: ProxierOptions::default(),
        probes: vec![],
        steps: vec![],
    }
}

fn web_pods() -> Vec<Pod> {
    vec![
        pod(
            "web-2",
            "node-b",
            "10.244.2.20",
            "web",
            vec![cport("http", 8080, Protocol::Tcp)],
        ),
        pod(
            "web-1",
            "node-a",
            "10.244.1.10",
            "web",
            vec![cport("http", 9090, Protocol::Tcp)],
        ),
        // Same name, other protocol: FindPort matches name and protocol, so this one is
        // skipped for a TCP service port.
        pod(
            "web-udp",
            "node-a",
            "10.244.1.11",
            "web",
            vec![cport("http", 7070, Protocol::Udp)],
        ),
        pod("other", "node-a", "10.244.1.12", "other", vec![]),
    ]
}

fn endpoint(addr: &str, conditions: EndpointConditions) -> Endpoint {
    Endpoint {
        addresses: vec![ip(addr)],
        conditions,
        node_name: None,
    }
}

fn addrs(sp: &ServicePortInfo) -> Vec<(IpAddr, u16)> {
    sp.endpoints.iter().map(|e| (e.ip, e.port)).collect()
}

#[test]
fn named_target_port_resolves_per_pod_and_skips_pods_without_it() {
    let svc = service(
        "web",
        "10.96.0.10",
        "web",
        vec![sport(None, 80, Some(TargetPort::Name("http".into())))],
    );
    let state = cluster_state(&scenario(web_pods(), vec![svc]));
    let sp = &state.service_ports[0];
    assert_eq!(
        addrs(sp),
        vec![(ip("10.244.1.10"), 9090), (ip("10.244.2.20"), 8080)]
    );
    assert_eq!(sp.endpoints[0].node_name.as_deref(), Some("node-a"));
    assert!(sp
        .endpoints
        .iter()
        .all(|e| e.ready && e.serving && !e.terminating));
}

#[test]
fn numeric_and_default_target_ports_apply_to_every_selected_pod() {
    let svc = service(
        "web",
        "10.96.0.10",
        "web",
        vec![
            sport(Some("a"), 80, Some(TargetPort::Number(8080))),
            sport(Some("b"), 81, None),
        ],
    );
    let state = cluster_state(&scenario(web_pods(), vec![svc]));
    let ports: Vec<u16> = state.service_ports[0]
        .endpoints
        .iter()
        .map(|e| e.port)
        .collect();
    assert_eq!(ports, vec![8080, 8080, 8080]);
    let ports: Vec<u16> = state.service_ports[1]
        .endpoints
        .iter()
        .map(|e| e.port)
        .collect();
    assert_eq!(ports, vec![81, 81, 81]);
}

#[test]
fn endpoint_slice_ports_match_service_ports_by_name_and_protocol() {
    let svc = service(
        "web",
        "10.96.0.10",
        "web",
        vec![
            sport(Some("http"), 80, None),
            sport(Some("metrics"), 9100, None),
        ],
    );
    let mut s = scenario(web_pods(), vec![svc]);
    s.endpoint_slices = vec![EndpointSlice {
        labels: Default::default(),
        address_type: IpFamily::Ipv4,
        service: "web".into(),
        namespace: "default".into(),
        // Numbers deliberately differ from the service ports: only names join them.
        ports: vec![
            EndpointPort {
                name: Some("metrics".into()),
                port: 1234,
                protocol: Protocol::Tcp,
            },
            EndpointPort {
                name: Some("http".into()),
                port: 5678,
                protocol: Protocol::Tcp,
            },
            EndpointPort {
                name: Some("http".into()),
                port: 4321,
                protocol: Protocol::Udp,
            },
        ],
        endpoints: vec![endpoint("10.244.2.20", EndpointConditions::default())],
    }];
    let state = cluster_state(&s);
    assert_eq!(state.service_ports[0].port_name, "http");
    assert_eq!(
        addrs(&state.service_ports[0]),
        vec![(ip("10.244.2.20"), 5678)]
    );
    assert_eq!(state.service_ports[1].port_name, "metrics");
    assert_eq!(
        addrs(&state.service_ports[1]),
        vec![(ip("10.244.2.20"), 1234)]
    );
    // The selector is ignored once slices are given, and nodeName comes from the pod.
    assert_eq!(
        state.service_ports[0].endpoints[0].node_name.as_deref(),
        Some("node-b")
    );
}

/// Each missing condition defaults on its own, as kube-proxy reads it: ready and serving
/// true, terminating false; none is derived from another.
#[test]
fn condition_defaults_are_kube_proxys() {
    let c = |ready, serving, terminating| EndpointConditions {
        ready,
        serving,
        terminating,
    };
    assert_eq!(conditions(&c(None, None, None)), (true, true, false));
    // Terminating alone: still ready and serving (kpct used to read it as neither).
    assert_eq!(conditions(&c(None, None, Some(true))), (true, true, true));
    assert_eq!(
        conditions(&c(None, Some(true), Some(true))),
        (true, true, true)
    );
    // Not ready alone: still serving (kpct used to make serving follow ready).
    assert_eq!(
        conditions(&c(Some(false), None, None)),
        (false, true, false)
    );
    assert_eq!(
        conditions(&c(Some(true), None, Some(true))),
        (true, true, true)
    );
    assert_eq!(
        conditions(&c(Some(false), Some(false), Some(true))),
        (false, false, true)
    );
}

/// A zero-length source range allows any source of its family: kube-proxy clears that
/// family's list (`IsZeroCIDR`), and the other family keeps its ranges.
#[test]
fn a_zero_length_source_range_clears_its_familys_ranges() {
    let s = crate::scenario::parse(
        &DUAL_STACK.replace(
            "loadBalancerSourceRanges: [10.0.0.0/8, \"fd00::/8\"]",
            "loadBalancerSourceRanges: [10.0.0.0/8, 0.0.0.0/0, \"fd00::/8\"]",
        ),
        "any4.yaml",
    )
    .unwrap();
    let v4 = cluster_state(&s);
    let v6 = v4.ipv6.as_deref().unwrap();
    assert_eq!(v4.service_ports[0].load_balancer_source_ranges, []);
    assert_eq!(
        v6.service_ports[0].load_balancer_source_ranges,
        [ip::<IpCidr>("fd00::/8")]
    );
    let s = crate::scenario::parse(&DUAL_STACK.replace("\"fd00::/8\"", "\"::/0\""), "any6.yaml")
        .unwrap();
    let v4 = cluster_state(&s);
    assert_eq!(
        v4.service_ports[0].load_balancer_source_ranges,
        [ip::<IpCidr>("10.0.0.0/8")]
    );
    assert_eq!(
        v4.ipv6.as_deref().unwrap().service_ports[0].load_balancer_source_ranges,
        []
    );
}

#[test]
fn terminating_endpoint_from_slice() {
    let svc = service("web", "10.96.0.10", "web", vec![sport(None, 80, None)]);
    let mut s = scenario(web_pods(), vec![svc]);
    s.endpoint_slices = vec![EndpointSlice {
        labels: Default::default(),
        address_type: IpFamily::Ipv4,
        service: "web".into(),
        namespace: "default".into(),
        ports: vec![EndpointPort {
            name: None,
            port: 8080,
            protocol: Protocol::Tcp,
        }],
        endpoints: vec![endpoint(
            "10.244.1.10",
            EndpointConditions {
                ready: Some(false),
                serving: Some(true),
                terminating: Some(true),
            },
        )],
    }];
    let ep = &cluster_state(&s).service_ports[0].endpoints[0];
    assert_eq!((ep.ready, ep.serving, ep.terminating), (false, true, true));
}

#[test]
fn external_policy_local_only_when_externally_accessible() {
    let mut cluster_ip = service("a", "10.96.0.1", "web", vec![sport(None, 80, None)]);
    cluster_ip.spec.external_traffic_policy = Some(TrafficPolicy::Local);
    let mut with_external_ip = cluster_ip.clone();
    with_external_ip.name = "b".into();
    with_external_ip.spec.cluster_ip = Some("10.96.0.2".into());
    with_external_ip.spec.external_ips = vec![ip("192.168.1.200")];
    let mut node_port = cluster_ip.clone();
    node_port.name = "c".into();
    node_port.spec.cluster_ip = Some("10.96.0.3".into());
    node_port.spec.type_ = ServiceType::NodePort;
    node_port.spec.ports[0].node_port = Some(30080);
    let state = cluster_state(&scenario(
        web_pods(),
        vec![node_port, with_external_ip, cluster_ip],
    ));
    let local: Vec<(&str, bool)> = state
        .service_ports
        .iter()
        .map(|sp| (sp.name.as_str(), sp.external_policy_local))
        .collect();
    assert_eq!(local, vec![("a", false), ("b", true), ("c", true)]);
    assert_eq!(state.service_ports[2].node_port, Some(30080));
}

#[test]
fn health_check_node_port_only_for_local_load_balancers() {
    let mut lb = service("lb", "10.96.0.1", "web", vec![sport(None, 80, None)]);
    lb.spec.type_ = ServiceType::LoadBalancer;
    lb.spec.ports[0].node_port = Some(30080);
    lb.spec.health_check_node_port = Some(30999);
    let mut cluster_policy = lb.clone();
    cluster_policy.name = "lb2".into();
    cluster_policy.spec.cluster_ip = Some("10.96.0.2".into());
    lb.spec.external_traffic_policy = Some(TrafficPolicy::Local);
    let state = cluster_state(&scenario(vec![], vec![lb, cluster_policy]));
    assert_eq!(state.service_ports[0].health_check_node_port, Some(30999));
    assert_eq!(state.service_ports[1].health_check_node_port, None);
}

#[test]
fn load_balancer_vips_exclude_ip_mode_proxy() {
    let mut lb = service("lb", "10.96.0.1", "web", vec![sport(None, 80, None)]);
    lb.spec.type_ = ServiceType::LoadBalancer;
    lb.spec.ports[0].node_port = Some(30080);
    lb.status.load_balancer.ingress = vec![
        LoadBalancerIngress {
            ip: ip("192.168.1.200"),
            ip_mode: None,
        },
        LoadBalancerIngress {
            ip: ip("192.168.1.201"),
            ip_mode: Some(IpMode::Proxy),
        },
        LoadBalancerIngress {
            ip: ip("192.168.1.202"),
            ip_mode: Some(IpMode::VIP),
        },
    ];
    let state = cluster_state(&scenario(vec![], vec![lb]));
    assert_eq!(
        state.service_ports[0].load_balancer_vips,
        vec![ip::<IpAddr>("192.168.1.200"), ip("192.168.1.202")]
    );
}

/// kube-proxy never sees a headless Service or one labelled for another proxy (its Service
/// informer's selectors), and `ShouldSkipService` refuses ExternalName ones.
#[test]
fn headless_external_name_and_other_proxies_services_are_skipped() {
    let headless = service("headless", "None", "web", vec![sport(None, 80, None)]);
    let mut external_name = service("ext", "10.96.0.9", "web", vec![sport(None, 80, None)]);
    external_name.spec.type_ = ServiceType::ExternalName;
    let kept = service("kept", "10.96.0.10", "web", vec![sport(None, 80, None)]);
    let mut other = service("other", "10.96.0.11", "web", vec![sport(None, 80, None)]);
    // Any value, the empty one too.
    other.labels.insert(
        crate::scenario::LABEL_SERVICE_PROXY_NAME.into(),
        String::new(),
    );
    let mut labelled = kept.clone();
    labelled.name = "labelled".into();
    labelled.spec.cluster_ip = Some("10.96.0.12".into());
    labelled.labels.insert("team".into(), "shop".into());
    let state = cluster_state(&scenario(
        web_pods(),
        vec![headless, external_name, kept, other, labelled],
    ));
    let names: Vec<&str> = state
        .service_ports
        .iter()
        .map(|sp| sp.name.as_str())
        .collect();
    assert_eq!(names, vec!["kept", "labelled"]);
}

#[test]
fn session_affinity_timeout_defaults_to_10800() {
    let mut default = service("a", "10.96.0.1", "web", vec![sport(None, 80, None)]);
    default.spec.session_affinity = SessionAffinity::ClientIP;
    let mut configured = default.clone();
    configured.name = "b".into();
    configured.spec.cluster_ip = Some("10.96.0.2".into());
    configured.spec.session_affinity_config = Some(SessionAffinityConfig {
        client_ip: ClientIpConfig {
            timeout_seconds: 60,
        },
    });
    let none = service("c", "10.96.0.3", "web", vec![sport(None, 80, None)]);
    let state = cluster_state(&scenario(vec![], vec![default, configured, none]));
    let timeouts: Vec<Option<u32>> = state
        .service_ports
        .iter()
        .map(|sp| sp.session_affinity_timeout_seconds)
        .collect();
    assert_eq!(timeouts, vec![Some(10800), Some(60), None]);
}

#[test]
fn service_ports_ordered_by_namespace_name_port_name_and_endpoints_by_ip_then_port() {
    let mut z = service("z", "10.96.0.1", "web", vec![sport(None, 80, None)]);
    z.namespace = "alpha".into();
    let b = service(
        "b",
        "10.96.0.2",
        "web",
        vec![sport(Some("web"), 80, None), sport(Some("admin"), 81, None)],
    );
    let a = service("a", "10.96.0.3", "web", vec![sport(Some("x"), 80, None)]);
    let mut s = scenario(web_pods(), vec![b, a, z]);
    s.endpoint_slices = vec![EndpointSlice {
        labels: Default::default(),
        address_type: IpFamily::Ipv4,
        service: "a".into(),
        namespace: "default".into(),
        ports: vec![
            EndpointPort {
                name: Some("x".into()),
                port: 9000,
                protocol: Protocol::Tcp,
            },
            EndpointPort {
                name: Some("x".into()),
                port: 8000,
                protocol: Protocol::Tcp,
            },
        ],
        endpoints: vec![
            endpoint("10.244.2.20", EndpointConditions::default()),
            endpoint("10.244.1.10", EndpointConditions::default()),
            endpoint("10.244.1.10", EndpointConditions::default()),
        ],
    }];
    let state = cluster_state(&s);
    let order: Vec<String> = state
        .service_ports
        .iter()
        .map(ServicePortInfo::service_port_name)
        .collect();
    assert_eq!(
        order,
        vec!["alpha/z", "default/a:x", "default/b:admin", "default/b:web"]
    );
    assert_eq!(
        addrs(&state.service_ports[1]),
        vec![
            (ip("10.244.1.10"), 8000),
            (ip("10.244.1.10"), 9000),
            (ip("10.244.2.20"), 8000),
            (ip("10.244.2.20"), 9000),
        ]
    );
}

#[test]
fn node_context_lists_eth0_vtep_and_bridge_addresses() {
    let s = scenario(vec![], vec![]);
    let ctx = node_context(&s, "node-b").unwrap();
    assert_eq!(ctx.node_ip, ip::<IpAddr>("192.168.1.11"));
    assert_eq!(
        ctx.local_addresses,
        vec![
            ip::<IpAddr>("10.244.2.0"),
            ip("10.244.2.1"),
            ip("192.168.1.11")
        ]
    );
    assert!(node_context(&s, "node-z").is_none());
}

const DUAL_STACK: &str = r#"
topology:
  underlay: 192.168.1.0/24,fd00:192:168:1::/64
  clusterCIDR: 10.244.0.0/16,fd00:10:244::/56
  serviceCIDR: 10.96.0.0/12,fd00:10:96::/112
  nodes:
    - { name: node-a, ips: [192.168.1.10, "fd00:192:168:1::10"], podCIDRs: [10.244.1.0/24, "fd00:10:244:1::/64"] }
  pods:
    - { name: web-1, node: node-a, ips: [10.244.1.10, "fd00:10:244:1::10"], labels: { app: web } }
services:
  - name: both
    spec:
      type: LoadBalancer
      ipFamilyPolicy: RequireDualStack
      clusterIPs: [10.96.0.10, "fd00:10:96::a"]
      selector: { app: web }
      externalIPs: [192.168.1.50, "fd00:192:168:1::50"]
      loadBalancerSourceRanges: [10.0.0.0/8, "fd00::/8"]
      ports: [{ port: 80, targetPort: 8080, nodePort: 30080 }]
    status:
      loadBalancer:
        ingress: [{ ip: 192.168.1.200 }, { ip: "fd00:192:168:1::200" }, { ip: "fd00:192:168:1::201", ipMode: Proxy }]
  - name: only6
    spec:
      ipFamilies: [IPv6]
      clusterIP: "fd00:10:96::b"
      ports: [{ name: http, port: 80 }]
endpointSlices:
  - service: only6
    ports: [{ name: http, port: 8080 }]
    endpoints: [{ addresses: [10.244.1.10] }]
  - service: only6
    addressType: IPv6
    ports: [{ name: http, port: 9090 }]
    endpoints: [{ addresses: ["fd00:10:244:1::10"] }]
"#;

/// Each family's proxier sees the Services with a ClusterIP of its family, with their
/// addresses, source ranges and endpoints of that family only (newBaseServiceInfo,
/// serviceToServiceMap, EndpointSliceUpdate).
#[test]
fn each_family_sees_only_its_own_addresses() {
    let s = crate::scenario::parse(DUAL_STACK, "dual.yaml").unwrap();
    let v4 = cluster_state(&s);
    let v6 = v4
        .ipv6
        .as_deref()
        .expect("a dual-stack cluster has an IPv6 state");
    assert_eq!(
        (v4.ip_family, v6.ip_family),
        (IpFamily::Ipv4, IpFamily::Ipv6)
    );
    assert!(v6.ipv6.is_none());
    let names = |c: &ClusterState| -> Vec<String> {
        c.service_ports.iter().map(|sp| sp.name.clone()).collect()
    };
    assert_eq!(
        names(&v4),
        ["both"],
        "the IPv6-only Service is not the IPv4 proxier's"
    );
    assert_eq!(names(v6), ["both", "only6"]);
    let (b4, b6) = (&v4.service_ports[0], &v6.service_ports[0]);
    assert_eq!(b4.cluster_ip, Some(ip("10.96.0.10")));
    assert_eq!(b6.cluster_ip, Some(ip("fd00:10:96::a")));
    assert_eq!(b4.external_ips, [ip::<IpAddr>("192.168.1.50")]);
    assert_eq!(b6.external_ips, [ip::<IpAddr>("fd00:192:168:1::50")]);
    assert_eq!(b4.load_balancer_vips, [ip::<IpAddr>("192.168.1.200")]);
    assert_eq!(
        b6.load_balancer_vips,
        [ip::<IpAddr>("fd00:192:168:1::200")],
        "ipMode Proxy is left out in either family"
    );
    assert_eq!(b4.load_balancer_source_ranges, [ip::<IpCidr>("10.0.0.0/8")]);
    assert_eq!(b6.load_balancer_source_ranges, [ip::<IpCidr>("fd00::/8")]);
    assert_eq!(b4.endpoints[0].ip, ip::<IpAddr>("10.244.1.10"));
    assert_eq!(b6.endpoints[0].ip, ip::<IpAddr>("fd00:10:244:1::10"));
    let only6 = &v6.service_ports[1];
    assert_eq!(
        only6
            .endpoints
            .iter()
            .map(|e| (e.ip, e.port))
            .collect::<Vec<_>>(),
        [(ip::<IpAddr>("fd00:10:244:1::10"), 9090)],
        "only the slice of the IPv6 address type"
    );
    let node6 = node_context(&s, "node-a").unwrap().ipv6.unwrap();
    assert_eq!(node6.node_ip, ip::<IpAddr>("fd00:192:168:1::10"));
    assert_eq!(
        node6.local_addresses,
        ["fd00:10:244:1::", "fd00:10:244:1::1", "fd00:192:168:1::10"].map(ip::<IpAddr>)
    );
    let ipv4_only = crate::scenario::parse(
        &DUAL_STACK
            .replace(",fd00:192:168:1::/64", "")
            .replace(",fd00:10:244::/56", "")
            .replace(",fd00:10:96::/112", ""),
        "v4.yaml",
    );
    assert!(ipv4_only.is_err(), "IPv6 values need their ranges");
}
