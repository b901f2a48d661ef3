//! Mutation tests: deliberately broken programming must make the relevant expectation fail with
//! a clear message. They prove the checks can fail; a suite whose checks cannot fail proves
//! nothing.

mod common;

use common::{drop_postrouting_masquerade, Mutated};
use kpct::caps::require_ipvs;
use kpct::probe::probe_timeout;
use kpct::proxier::{builtin, Proxier};
use kpct::scenario;

const SCENARIO: &str = r#"
topology:
  underlay: 192.168.1.0/24
  clusterCIDR: 10.244.0.0/16
  nodes:
    - { name: node-a, ip: 192.168.1.10, podCIDR: 10.244.1.0/24 }
    - { name: node-b, ip: 192.168.1.11, podCIDR: 10.244.2.0/24 }
  pods:
    - name: web-1
      node: node-b
      ip: 10.244.2.10
      labels: { app: web }
      ports: [{ name: http, containerPort: 8080 }]
  external: { ip: 192.168.1.100 }
services:
  - name: web
    spec:
      type: NodePort
      clusterIP: 10.96.0.10
      selector: { app: web }
      ports: [{ name: http, port: 80, targetPort: http, nodePort: 30080 }]
probes:
  - name: external-to-nodeport
    from: { external: true }
    to: { service: web, port: http, via: nodePort, node: node-a }
    expect: { reaches: [web-1], source: masqueraded, reply: true }
"#;

async fn violations(proxier: &dyn Proxier) -> Vec<String> {
    let s = scenario::parse(SCENARIO, "mutation.yaml").unwrap();
    kpct::run::run_scenario(&s, proxier, probe_timeout())
        .await
        .unwrap()
        .violations
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn needs_ipvs_removing_the_postrouting_masquerade_rule_is_caught() {
    require_ipvs();
    let intact = builtin("kube-proxy-ipvs").unwrap();
    assert_eq!(
        violations(intact.as_ref()).await,
        Vec::<String>::new(),
        "the intact programming conforms"
    );

    let broken = Mutated {
        name: "kube-proxy-ipvs",
        inner: "kube-proxy-ipvs",
        mutate: drop_postrouting_masquerade,
    };
    let found = violations(&broken).await;
    assert!(
        found
            .iter()
            .any(|v| v.contains("probe `external-to-nodeport`")
                && v.contains("expected source Masqueraded")),
        "the missing MASQUERADE shows up as a source-masquerade violation, got: {found:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_the_postrouting_masquerade_rule_is_caught_in_iptables_mode_too() {
    let intact = builtin("kube-proxy-iptables").unwrap();
    assert_eq!(
        violations(intact.as_ref()).await,
        Vec::<String>::new(),
        "the intact programming conforms"
    );
    let broken = Mutated {
        name: "kube-proxy-iptables",
        inner: "kube-proxy-iptables",
        mutate: drop_postrouting_masquerade,
    };
    let found = violations(&broken).await;
    assert!(
        found
            .iter()
            .any(|v| v.contains("expected source Masqueraded")),
        "got: {found:#?}"
    );
}
