//! Drops decided at their verdict (`kpct::probe::drop_verdicts`), against the real kernel: hand-written
//! netfilter rules on a proxier-less topology, so which packet meets which verdict is known.
//! Every shot is fired twice — decided at the verdict, and waited out — and must be observed the
//! same; only the first may end early, and only where a DROP met the probe's own packet with no
//! answer on its way.

mod common;

use kpct::backends::Backends;
use kpct::observe::observe_probe;
use kpct::probe::{self, DropDecision, Patience, Shot};
use kpct::scenario::{self, Scenario};
use kpct::topology::Topology;
use std::time::Duration;

const SCENARIO: &str = concat!(
    crate::two_nodes!(),
    r#"  pods:
    - name: a1
      node: node-a
      ip: 10.244.1.10
    - name: b1
      node: node-b
      ip: 10.244.2.10
      ports:
        - { containerPort: 8080, protocol: TCP }
        - { containerPort: 5353, protocol: UDP }
  external: { ip: 192.168.1.100 }
probes:
  - { name: tcp, from: { pod: a1 }, to: { ip: 10.244.2.10, dport: 8080 } }
  - { name: udp, from: { pod: a1 }, to: { ip: 10.244.2.10, dport: 5353 }, protocol: UDP }
  - { name: tcp-twice, from: { pod: a1 }, to: { ip: 10.244.2.10, dport: 8080 }, repeat: 2 }
"#
);

const TIMEOUT: Duration = Duration::from_millis(1500);

/// One rule set on one node, and what every shot of `probe` must show under it.
struct Case {
    node: &'static str,
    /// `(program, arguments)` run in the node's namespace before the probe.
    rules: &'static [(&'static str, &'static [&'static str])],
    probe: &'static str,
}

/// The shots of `case`'s probe, decided at the verdict and waited out, in one topology.
async fn fire_both_ways(case: &Case) -> (Vec<Shot>, Vec<Shot>) {
    let s: Scenario = scenario::parse(SCENARIO, "drop-verdicts.yaml").unwrap();
    let topo = Topology::build(&s).await.unwrap();
    let _servers = Backends::start(&topo, &s.topology.pods).unwrap();
    let node = topo.node(case.node).unwrap();
    for (program, args) in case.rules {
        kpct::programming::tools::run(&node.netns, program, args, None)
            .unwrap_or_else(|e| panic!("{program} {args:?}: {e}"));
    }
    let index = s.probes.iter().position(|p| p.name == case.probe).unwrap();
    let plan = probe::plan(&s, &topo, index).unwrap();
    let at_verdict = probe::fire(&topo, &plan, TIMEOUT).unwrap();
    let waited = probe::fire(
        &topo,
        &plan,
        Patience {
            timeout: TIMEOUT,
            drops: DropDecision::AtTimeout,
        },
    )
    .unwrap();
    // Observed alike, whichever way the shots ended.
    let observed = |shots: &[Shot]| format!("{:?}", observe_probe(&plan, shots, &[], false));
    assert_eq!(observed(&at_verdict), observed(&waited), "{}", case.probe);
    assert!(waited.iter().all(|s| s.dropped_at.is_none()));
    (at_verdict, waited)
}

fn verdicts(shots: &[Shot]) -> Vec<String> {
    shots
        .iter()
        .map(|s| {
            s.dropped_at
                .as_ref()
                .map_or("waited".into(), |d| d.to_string())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_iptables_drop_ends_the_shot_at_its_verdict() {
    let (shots, _) = fire_both_ways(&Case {
        node: "node-a",
        rules: &[(
            "iptables",
            &[
                "-A", "FORWARD", "-p", "tcp", "--dport", "8080", "-j", "DROP",
            ],
        )],
        probe: "tcp",
    })
    .await;
    assert_eq!(
        verdicts(&shots),
        ["dropped on node-a in filter:FORWARD (rule handle 2)"]
    );
    assert!(shots[0].answer.is_none() && shots[0].delivered.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_repetition_is_decided_on_its_own_and_udp_too() {
    let (shots, _) = fire_both_ways(&Case {
        node: "node-a",
        rules: &[(
            "iptables",
            &[
                "-A", "FORWARD", "-p", "tcp", "--dport", "8080", "-j", "DROP",
            ],
        )],
        probe: "tcp-twice",
    })
    .await;
    assert_eq!(verdicts(&shots).len(), 2);
    assert!(shots.iter().all(|s| s.dropped_at.is_some()), "{shots:?}");
    let (shots, _) = fire_both_ways(&Case {
        node: "node-a",
        rules: &[(
            "iptables",
            &[
                "-A", "FORWARD", "-p", "udp", "--dport", "5353", "-j", "DROP",
            ],
        )],
        probe: "udp",
    })
    .await;
    assert_eq!(
        verdicts(&shots),
        ["dropped on node-a in filter:FORWARD (rule handle 2)"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_on_the_far_node_and_a_policy_drop_count_too() {
    // After node-a forwarded it over VXLAN, on node-b.
    let (shots, _) = fire_both_ways(&Case {
        node: "node-b",
        rules: &[("iptables", &["-P", "FORWARD", "DROP"])],
        probe: "tcp",
    })
    .await;
    assert_eq!(
        verdicts(&shots),
        ["dropped on node-b in filter:FORWARD (policy)"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_nftables_drop_counts_as_much_as_an_iptables_one() {
    let (shots, _) = fire_both_ways(&Case {
        node: "node-a",
        rules: &[(
            "nft",
            &["add table inet proxy; \
                 add chain inet proxy forwarding { type filter hook forward priority 0; }; \
                 add rule inet proxy forwarding tcp dport 8080 drop"],
        )],
        probe: "tcp",
    })
    .await;
    assert_eq!(
        verdicts(&shots),
        ["dropped on node-a in proxy:forwarding (rule handle 2)"]
    );
}

/// A verdict map's `drop` element, as nftables mode's `no-endpoint-services` drops a Service
/// with no usable endpoint: decided at the verdict; its `goto` to a rejecting chain is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verdict_map_drop_counts_and_its_reject_is_waited_for() {
    let (shots, _) = fire_both_ways(&Case {
        node: "node-a",
        rules: &[(
            "nft",
            &["add table inet proxy; \
                 add chain inet proxy forwarding { type filter hook forward priority 0; }; \
                 add map inet proxy no-endpoints { type inet_service : verdict; elements = { 8080 : drop }; }; \
                 add rule inet proxy forwarding tcp dport vmap @no-endpoints"],
        )],
        probe: "tcp",
    })
    .await;
    assert_eq!(
        verdicts(&shots),
        ["dropped on node-a in proxy:forwarding (rule handle 3)"]
    );
    let (shots, _) = fire_both_ways(&Case {
        node: "node-a",
        rules: &[(
            "nft",
            &["add table inet proxy; \
                 add chain inet proxy forwarding { type filter hook forward priority 0; }; \
                 add chain inet proxy reject-chain; \
                 add rule inet proxy reject-chain reject; \
                 add map inet proxy no-endpoints { type inet_service : verdict; elements = { 8080 : goto reject-chain }; }; \
                 add rule inet proxy forwarding tcp dport vmap @no-endpoints"],
        )],
        probe: "tcp",
    })
    .await;
    assert_eq!(verdicts(&shots), ["waited"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reject_is_waited_for_its_answer_though_it_shows_as_a_drop() {
    for (with, answer) in [
        ("tcp-reset", "Reset"),
        ("icmp-port-unreachable", "Unreachable"),
    ] {
        let rules: &'static [(&str, &[&str])] = match with {
            "tcp-reset" => &[(
                "iptables",
                &[
                    "-A",
                    "FORWARD",
                    "-p",
                    "tcp",
                    "--dport",
                    "8080",
                    "-j",
                    "REJECT",
                    "--reject-with",
                    "tcp-reset",
                ],
            )],
            _ => &[(
                "iptables",
                &[
                    "-A", "FORWARD", "-p", "tcp", "--dport", "8080", "-j", "REJECT",
                ],
            )],
        };
        let (shots, _) = fire_both_ways(&Case {
            node: "node-a",
            rules,
            probe: "tcp",
        })
        .await;
        assert_eq!(verdicts(&shots), ["waited"], "{with}");
        assert!(
            format!("{:?}", shots[0].answer).starts_with(&format!("Some({answer}")),
            "{with}: {shots:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_answer_does_not_end_the_shot_early() {
    // The SYN reaches b1; its SYN-ACK is dropped on the way back. The pod retransmits it, so
    // only the timeout may say none comes.
    let (shots, _) = fire_both_ways(&Case {
        node: "node-a",
        rules: &[(
            "iptables",
            &[
                "-A", "FORWARD", "-p", "tcp", "--sport", "8080", "-j", "DROP",
            ],
        )],
        probe: "tcp",
    })
    .await;
    assert_eq!(verdicts(&shots), ["waited"]);
    assert!(shots[0].delivered.is_some() && shots[0].answer.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_verdict_table_lives_only_as_long_as_its_watch() {
    let s: Scenario = scenario::parse(SCENARIO, "drop-verdicts.yaml").unwrap();
    let topo = Topology::build(&s).await.unwrap();
    let tables = |topo: &Topology| {
        topo.nodes()
            .iter()
            .map(|n| kpct::netfilter::tables::nft_tables(&n.netns).unwrap())
            .collect::<Vec<_>>()
    };
    assert!(tables(&topo).iter().all(Vec::is_empty));
    let watch = kpct::probe::drop_verdicts::VerdictWatch::open(&topo).unwrap();
    let held = vec![(
        kpct::netfilter::verdict_table::FAMILY,
        kpct::netfilter::verdict_table::TABLE.to_string(),
    )];
    assert_eq!(tables(&topo), vec![held.clone(), held]);
    // What the suite reads as a node's nftables state (evidence, convergence) leaves it out.
    for node in topo.nodes() {
        assert!(kpct::programming::nft::list_tables(&node.netns)
            .unwrap()
            .is_empty());
    }
    watch.close().unwrap();
    assert!(tables(&topo).iter().all(Vec::is_empty));
    // Dropped without closing (as when a shot fails): the kernel removes the table it owns
    // with its socket.
    let watch = kpct::probe::drop_verdicts::VerdictWatch::open(&topo).unwrap();
    assert!(tables(&topo).iter().all(|t| !t.is_empty()));
    drop(watch);
    assert!(tables(&topo).iter().all(Vec::is_empty));
}
