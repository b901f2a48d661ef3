//! IPVS in a node namespace of a built topology, driven with the stock tools (ipvsadm, ip):
//! proves the kernel's IPVS dataplane works in the suite's topology before any proxier is
//! involved. Needs IP_VS: run through `ci/test.sh`, which boots a kernel with it when needed.

mod common;

use common::udp_socket;
use kpct::capture::{Capture, Flow};
use kpct::kernel_features::require_ipvs;
use kpct::topology::Topology;
use kpct::Scenario;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

const SCENARIO: &str = concat!(
    crate::two_nodes!(),
    r#"  pods:
    - { name: a1, node: node-a, ip: 10.244.1.10 }
    - { name: b1, node: node-b, ip: 10.244.2.10 }
"#
);

const VIP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);
const WAIT: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_ipvs_virtual_server_in_a_node_netns_translates_real_packets() {
    require_ipvs();
    let scenario: Scenario = serde_yaml_ng::from_str(SCENARIO).unwrap();
    let topo = Topology::build(&scenario).await.unwrap();
    let node_a = topo.node("node-a").unwrap();
    let (a1, b1) = (topo.pod("a1").unwrap(), topo.pod("b1").unwrap());

    // What kube-proxy's IPVS mode does for one ClusterIP, by hand: VIP on a dummy device,
    // a virtual server and a masquerading real server.
    let ns = &node_a.netns;
    ns.exec("ip", &["link", "add", "kube-ipvs0", "type", "dummy"])
        .unwrap();
    ns.exec("ip", &["addr", "add", "10.96.0.10/32", "dev", "kube-ipvs0"])
        .unwrap();
    ns.exec("ipvsadm", &["-A", "-u", "10.96.0.10:53", "-s", "rr"])
        .unwrap();
    ns.exec(
        "ipvsadm",
        &[
            "-a",
            "-u",
            "10.96.0.10:53",
            "-r",
            "10.244.2.10:5353",
            "-m",
            "-w",
            "1",
        ],
    )
    .unwrap();
    let listed = {
        let _quiet = ipvs_genl::hold_service_changes();
        ns.exec("ipvsadm", &["-Sn"]).unwrap()
    };
    assert_eq!(
        listed,
        "-A -u 10.96.0.10:53 -s rr\n-a -u 10.96.0.10:53 -r 10.244.2.10:5353 -m -w 1\n"
    );

    let node_b = topo.node("node-b").unwrap();
    let mut at_b1 = Capture::open(&node_b.netns, &b1.host_veth).unwrap();
    let (a1_ip, b1_ip) = (a1.ip.unwrap(), b1.ip.unwrap());
    let server = udp_socket(&b1.netns, SocketAddrV4::new(b1_ip, 5353), WAIT);
    let client = udp_socket(&a1.netns, SocketAddrV4::new(a1_ip, 40000), WAIT);

    client
        .send_to(b"query", SocketAddrV4::new(VIP, 53))
        .unwrap();
    let dnat = Flow {
        protocol: 17,
        src: a1_ip.into(),
        sport: 40000,
        dst: b1_ip.into(),
        dport: 5353,
    };
    let seen = at_b1.wait_for(WAIT, |f| {
        f.flow()
            .is_some_and(|fl| fl.protocol == 17 && fl.dport == 5353)
    });
    assert_eq!(
        seen.unwrap().and_then(|f| f.flow()),
        Some(dnat),
        "IPVS rewrote the destination to the real server and kept the pod source"
    );

    let mut buf = [0u8; 64];
    let (n, from) = server.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"query");
    server.send_to(b"answer", from).unwrap();
    let (n, from) = client.recv_from(&mut buf).expect("the reply came back");
    assert_eq!(
        (&buf[..n], from),
        (&b"answer"[..], SocketAddrV4::new(VIP, 53).into()),
        "the reply is reverse-translated to come from the virtual service"
    );
}

/// A probe reaches web-1 and web-2; a later step removes web-1. The probe's SYN leaves an IPVS
/// entry (SYN_RECV, 60 s) that kube-proxy's graceful termination counts, so a step within 60 s
/// of the probe would keep web-1 at weight 0 and one after would delete it. kpct waits such
/// entries out (run/drain.rs): the step must show the same either way, web-1 gone.
const DRAINED: &str = r#"
name: drained
topology:
  underlay: 192.168.1.0/24
  clusterCIDR: 10.244.0.0/16
  serviceCIDR: 10.96.0.0/12
  nodes:
    - {name: node-a, ip: 192.168.1.10, podCIDR: 10.244.1.0/24}
  pods:
    - {name: client, node: node-a, ip: 10.244.1.10}
    - {name: web-1, node: node-a, ip: 10.244.1.21, ports: [{name: http, containerPort: 8080}]}
    - {name: web-2, node: node-a, ip: 10.244.1.22, ports: [{name: http, containerPort: 8080}]}
services:
  - name: web
    spec:
      clusterIP: 10.96.0.10
      ports: [{name: http, port: 80, targetPort: 8080}]
endpointSlices:
  - service: web
    ports: [{name: http, port: 8080}]
    endpoints: [{addresses: [10.244.1.21]}, {addresses: [10.244.1.22]}]
probes:
  - name: both
    from: {pod: client}
    to: {service: web, port: http}
    repeat: 2
    expect: {reaches: [web-1, web-2]}
steps:
  - name: pause
    waitSeconds: PAUSE
    apply:
      endpointSlices:
        - service: web
          ports: [{name: http, port: 8080}]
          endpoints: [{addresses: [10.244.1.21]}, {addresses: [10.244.1.22]}]
  - name: scale-down
    waitSeconds: LAST
    apply:
      endpointSlices:
        - service: web
          ports: [{name: http, port: 8080}]
          endpoints: [{addresses: [10.244.1.22]}]
    probes:
      - name: after
        from: {pod: client}
        to: {service: web, port: http}
        repeat: 2
        expect: {reaches: [web-2]}
"#;

#[test]
fn needs_ipvs_a_step_shows_the_same_whether_earlier_probe_connections_expired_or_not() {
    require_ipvs();
    let run = |pause: u32, last: u32| {
        let yaml = DRAINED
            .replace("PAUSE", &pause.to_string())
            .replace("LAST", &last.to_string());
        let scenario = kpct::scenario::parse(&yaml, "drained.yaml").unwrap();
        let proxier = kpct::builtin("kube-proxy-ipvs").unwrap();
        let run = tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(kpct::run_scenario(
                &scenario,
                proxier.as_ref(),
                kpct::probe::probe_timeout(),
            ))
            .unwrap();
        assert!(run.violations.is_empty(), "{:#?}", run.violations);
        run.observation
    };
    // At once, in separate namespaces: right after the probe, its SYN_RECV entries still count
    // for web-1; 65 s later, past IPVS's 60 s SYN_RECV timeout, they are gone before the step
    // that removes web-1 syncs.
    let (soon, late) = std::thread::scope(|s| {
        let soon = s.spawn(|| run(0, 0));
        let late = s.spawn(|| run(60, 5));
        (soon.join().unwrap(), late.join().unwrap())
    });
    assert_eq!(
        soon.steps[1].nodes[0].ipvs_real_servers, 1,
        "web-1 must be gone once the probe's connections expired: {:#?}",
        soon.steps[1].nodes
    );
    let yaml = |o: &kpct::ScenarioObservation| serde_yaml_ng::to_string(o).unwrap();
    assert_eq!(yaml(&soon), yaml(&late));
}
