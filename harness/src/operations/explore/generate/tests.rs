use super::*;

/// 10,000 seeds (each with a case of its own number) each give a case that validates as a
/// scenario file does (its YAML read back through `kpct validate`'s parser), and the same seed
/// and case give the same bytes. On both cores: the validator takes most of the time.
#[test]
fn ten_thousand_seeds_give_valid_cases_and_the_same_bytes_again() {
    let g = Generator::default();
    let problems: Vec<String> = std::thread::scope(|scope| {
        let halves: Vec<_> = (0..2u64)
            .map(|half| {
                let g = &g;
                scope.spawn(move || {
                    let mut problems = Vec::new();
                    for seed in (half..10_000).step_by(2) {
                        let s = g.case(seed, seed);
                        let text = serde_yaml_ng::to_string(&s).unwrap();
                        let again = serde_yaml_ng::to_string(&g.case(seed, seed)).unwrap();
                        if text != again {
                            problems.push(format!("seed {seed}: another case the second time"));
                        }
                        if let Err(e) = crate::scenario::parse(&text, &format!("seed-{seed}.yaml"))
                        {
                            problems.push(format!("seed {seed}: {e}\n{text}"));
                        }
                    }
                    problems
                })
            })
            .collect();
        halves.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    assert!(
        problems.is_empty(),
        "{} of 10,000 cases are not valid:\n{}",
        problems.len(),
        problems[..problems.len().min(3)].join("\n\n")
    );
}

/// The weights change what is made: with no UDP weight, no case has a UDP port; with only
/// IPv6-only clusters, every case is one.
#[test]
fn weights_shape_the_cases() {
    let w = Weights::with(&[
        "protocol.udp=0".into(),
        "family.ipv4=0".into(),
        "family.dual=0".into(),
    ])
    .unwrap();
    let g = Generator::new(w);
    for case in 0..200 {
        let s = g.case(5, case);
        assert!(!s.topology.cluster_cidr.has(crate::scenario::IpFamily::Ipv4));
        let udp = s
            .services
            .iter()
            .flat_map(|svc| svc.spec.ports.iter())
            .any(|p| p.protocol == Protocol::Udp);
        assert!(!udp, "case {case} has a UDP port");
    }
}

/// The generator reaches what the release differences and harness limits need, from the
/// default weights: kept UDP flows, long names, the headless label, duplicate endpoints,
/// health-check probes, steps of every kind.
#[test]
fn the_default_weights_reach_every_part_of_the_format() {
    let g = Generator::default();
    let cases: Vec<Scenario> = (0..2_000).map(|c| g.case(1, c)).collect();
    let any = |what: &str, f: &dyn Fn(&Scenario) -> bool| {
        assert!(cases.iter().any(f), "no case has {what}");
    };
    let probes = |s: &Scenario| -> Vec<Probe> {
        s.probes
            .iter()
            .chain(s.steps.iter().flat_map(|st| st.probes.iter()))
            .cloned()
            .collect()
    };
    any("a kept UDP flow continued", &|s| {
        probes(s)
            .iter()
            .any(|p| p.keep.is_some() && p.protocol == Protocol::Udp)
            && probes(s).iter().any(|p| p.continues.is_some())
    });
    any("a 63-character namespace", &|s| {
        s.services.iter().any(|svc| svc.namespace.len() == 63)
    });
    any("a Service labelled headless", &|s| {
        s.services
            .iter()
            .any(|svc| svc.labels.contains_key(crate::scenario::LABEL_HEADLESS))
    });
    any("an address twice in a slice", &|s| {
        s.endpoint_slices.iter().any(|sl| {
            let mut ips: Vec<_> = sl
                .endpoints
                .iter()
                .flat_map(|e| e.addresses.clone())
                .collect();
            let n = ips.len();
            ips.sort();
            ips.dedup();
            ips.len() < n
        })
    });
    any("a health-check probe", &|s| {
        probes(s)
            .iter()
            .any(|p| p.to.via == Some(crate::scenario::Via::HealthCheckNodePort))
    });
    for (what, f) in [
        (
            "a deleted pod",
            (|st: &crate::scenario::Step| !st.delete.pods.is_empty()) as fn(&_) -> bool,
        ),
        ("a created pod", |st| !st.apply.pods.is_empty()),
        ("a changed Service", |st| !st.apply.services.is_empty()),
        ("a deleted Service", |st| !st.delete.services.is_empty()),
        ("changed slices", |st| !st.apply.endpoint_slices.is_empty()),
        ("a wait", |st| st.wait_seconds > 0),
        ("a restart", |st| st.restart_proxier),
    ] {
        any(what, &|s| s.steps.iter().any(f));
    }
}
