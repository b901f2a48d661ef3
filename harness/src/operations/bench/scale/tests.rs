use super::*;
use std::collections::{BTreeMap, BTreeSet};

#[test]
fn synthetic_cluster_has_n_services_with_distinct_spread_endpoints() {
    let s = scale_scenario(1000, 10, 3, 10).expect("builds");
    crate::scenario::validate(&s).expect("the synthetic scenario is valid");
    assert_eq!(s.services.len(), 1000);
    assert_eq!(s.topology.pods.len(), 31);
    let ips: BTreeSet<&str> = s
        .services
        .iter()
        .map(|svc| svc.spec.cluster_ip.as_deref().unwrap())
        .collect();
    assert_eq!(ips.len(), 1000, "ClusterIPs are unique");
    let node_ports: BTreeSet<u16> = s
        .services
        .iter()
        .map(|svc| svc.spec.ports[0].node_port.unwrap())
        .collect();
    assert_eq!(node_ports.len(), 1000, "NodePorts are unique");
    assert!(node_ports.iter().all(|p| (30000..=32767).contains(p)));
    let pod_ips: BTreeMap<std::net::IpAddr, &str> = s
        .topology
        .pods
        .iter()
        .map(|p| (std::net::IpAddr::V4(p.ip.v4.unwrap()), p.node.as_str()))
        .collect();
    assert_eq!(pod_ips.len(), 31, "pod IPs are unique");

    let cluster = crate::scenario::cluster_state(&s);
    assert_eq!(cluster.service_ports.len(), 1000);
    for sp in &cluster.service_ports {
        assert_eq!(sp.endpoints.len(), 10, "{}", sp.name);
        let distinct: BTreeSet<(std::net::IpAddr, u16)> =
            sp.endpoints.iter().map(|e| (e.ip, e.port)).collect();
        assert_eq!(distinct.len(), 10, "{}: endpoints are distinct", sp.name);
        let nodes: BTreeSet<&str> = sp
            .endpoints
            .iter()
            .map(|e| e.node_name.as_deref().unwrap())
            .collect();
        assert_eq!(nodes.len(), 3, "{}: endpoints on every node", sp.name);
        for e in &sp.endpoints {
            assert_eq!(e.port, TARGET_PORT);
            assert_eq!(pod_ips.get(&e.ip), e.node_name.as_deref().as_ref());
            assert!(e.ready && e.serving && !e.terminating);
        }
    }
    // Proxiers write services in service-port order: index order.
    let names: Vec<&str> = cluster
        .service_ports
        .iter()
        .map(|sp| sp.name.as_str())
        .collect();
    assert_eq!(names.first(), Some(&"svc-0000"));
    assert_eq!(names.last(), Some(&"svc-0999"));
    assert!(s
        .topology
        .pods
        .iter()
        .all(|p| p.name == CLIENT_POD || p.ports[0].container_port == TARGET_PORT));
}

#[test]
fn synthetic_cluster_limits() {
    assert!(
        scale_scenario(10, 31, 3, 10).is_err(),
        "more endpoints than pods"
    );
    assert!(
        scale_scenario(2769, 1, 1, 1).is_err(),
        "more services than NodePorts"
    );
    assert!(scale_scenario(0, 1, 1, 1).is_err());
    assert!(scale_scenario(2768, 1, 1, 1).is_ok());
}

#[test]
fn probe_targets_are_first_middle_last_without_repeats() {
    assert_eq!(
        probe_targets(1000),
        vec![("first", 0), ("middle", 500), ("last", 999)]
    );
    assert_eq!(
        probe_targets(10),
        vec![("first", 0), ("middle", 5), ("last", 9)]
    );
    assert_eq!(probe_targets(2), vec![("first", 0), ("middle", 1)]);
    assert_eq!(probe_targets(1), vec![("first", 0)]);
    assert!(probe_targets(0).is_empty());
}

#[test]
fn both_builtins_program_the_synthetic_cluster() {
    let s = scale_scenario(100, 10, 3, 10).unwrap();
    let cluster = crate::scenario::cluster_state(&s);
    let ctx = crate::scenario::node_context(&s, "node-0").unwrap();
    let ipvs = crate::proxier::builtin("kube-proxy-ipvs")
        .unwrap()
        .program(&cluster, &ctx)
        .unwrap();
    let c = Counts::of(&ipvs);
    // A ClusterIP and one NodePort virtual server per node-local address (node IP, cni0,
    // flannel.1) per service, 10 destinations each.
    assert_eq!(c.ipvs_services, 400);
    assert_eq!(c.ipvs_destinations, 4000);
    assert_eq!(c.addresses, 100);
    let iptables = crate::proxier::builtin("kube-proxy-iptables")
        .unwrap()
        .program(&cluster, &ctx)
        .unwrap();
    let c = Counts::of(&iptables);
    assert_eq!(c.ipvs_services, 0);
    // KUBE-SVC-, KUBE-EXT- and 10 KUBE-SEP- chains per service, at least.
    assert!(c.iptables_chains >= 1200, "{c:?}");
}

#[test]
fn answers_name_the_pod() {
    assert_eq!(
        answer_pod("client=10.244.0.250:4711 pod=pod-1-2\n"),
        Some("pod-1-2")
    );
    assert_eq!(answer_pod("garbage"), None);
    assert_eq!(answer_pod("pod="), None);
}

#[test]
fn table_aligns_columns() {
    let t = table(
        &["proxier", "n"],
        &[
            vec!["a".into(), "1000".into()],
            vec!["long-name".into(), "1".into()],
        ],
    );
    assert_eq!(
        t,
        "  proxier       n\n  a          1000\n  long-name     1\n"
    );
}
