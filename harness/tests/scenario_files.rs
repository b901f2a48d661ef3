//! Scenario files: every file shipped in `scenarios/` loads, validates and resolves; every
//! malformed fixture in `tests/fixtures/bad/` fails with exactly the message an operator sees.

mod common;

use kpct::scenario::{self, ScenarioError};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    files
}

fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios")
}

/// The library: `scenarios/*.yaml`.
fn library_files() -> Vec<PathBuf> {
    yaml_files(&scenarios_dir())
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn every_scenario_file_loads_validates_and_resolves() {
    let files = library_files();
    assert!(!files.is_empty(), "no scenario files found");
    for file in files {
        let s = scenario::load(&file).unwrap_or_else(|e| panic!("{e}"));
        let state = scenario::cluster_state(&s);
        assert_eq!(state.nodes.len(), s.topology.nodes.len());
        for node in &s.topology.nodes {
            assert!(scenario::node_context(&s, &node.name).is_some());
        }
    }
}

/// Every library file keeps the library's rules (`kpct validate` checks the same): a header
/// comment, a description, name = file name, and the `sctp-` / `ipvs-existing-` prefixes that
/// send a scenario to a kernel that has what it needs (tests/scenarios.rs).
#[test]
fn every_scenario_file_keeps_the_library_rules() {
    for file in library_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let s =
            scenario::parse(&text, &file.display().to_string()).unwrap_or_else(|e| panic!("{e}"));
        let problems = scenario::conventions(&file, &text, &s);
        assert!(problems.is_empty(), "{problems:#?}");
    }
}

/// `kpct validate` as a user runs it: the library passes; a broken file and a misnamed one
/// give every problem at once, with exit status 1.
#[test]
fn kpct_validate_reports_every_problem_of_every_file() {
    let kpct = |args: &[&str]| common::kpct(&[&["validate"], args].concat());
    let library = kpct(&[]);
    assert!(library.status.success(), "{library:?}");
    assert_eq!(
        String::from_utf8_lossy(&library.stdout),
        format!(
            "{} scenario file(s), no problems\n",
            yaml_files(&scenarios_dir()).len()
        )
    );

    let dir = std::env::temp_dir().join(format!("kpct-validate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let misnamed = dir.join("misnamed.yaml");
    let library_text = std::fs::read_to_string(scenarios_dir().join("clusterip-udp.yaml")).unwrap();
    let body: String = library_text
        .lines()
        .skip_while(|l| l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&misnamed, body).unwrap();
    let bad = kpct(&[
        "harness/tests/fixtures/bad/unknown-node.yaml",
        misnamed.to_str().unwrap(),
    ]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(bad.status.code(), Some(1), "{bad:?}");
    let out = String::from_utf8_lossy(&bad.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    for wanted in [
        "unknown-node.yaml:14:7: topology.pods[0].node: unknown node `node-c`",
        "misnamed.yaml:1:1: the file must start with a comment saying what it checks and where that is specified",
        "misnamed.yaml:1:1: name: name `clusterip-udp` differs from the file name `misnamed`",
    ] {
        assert!(lines.iter().any(|l| l.contains(wanted)), "{wanted}: {out}");
    }
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("kpct: 3 problem(s) in 2 scenario file(s)"),
        "{bad:?}"
    );
}

/// A FIFO would block the read forever, `/dev/zero` never ends, a huge file would be held in
/// memory: each is refused at once with what it is, and the good file beside them still loads.
#[test]
fn kpct_validate_refuses_what_is_not_a_small_regular_file() {
    let dir = std::env::temp_dir().join(format!("kpct-hostile-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("fifo.yaml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let zero = dir.join("zero.yaml");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let huge = dir.join("huge.yaml");
    std::fs::write(&huge, "#".repeat(2 << 20)).unwrap();
    let good = scenarios_dir().join("clusterip-udp.yaml");
    let out = common::kpct(&[
        "validate",
        fifo.to_str().unwrap(),
        zero.to_str().unwrap(),
        huge.to_str().unwrap(),
        good.to_str().unwrap(),
    ]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    for wanted in [
        "fifo.yaml: cannot read scenario file: is not a regular file but a FIFO",
        "zero.yaml: cannot read scenario file: is not a regular file but a character device",
        "huge.yaml: cannot read scenario file: is 2097152 bytes, more than the 1048576 bytes a scenario may have",
    ] {
        assert!(text.contains(wanted), "{wanted}: {text}");
    }
    assert!(!text.contains("clusterip-udp"), "{text}");
}

/// The README's review step works as written: a pending snapshot beside the goldens is listed by
/// `cargo insta pending-snapshots` (which `cargo insta review` walks through).
#[test]
fn cargo_insta_lists_a_pending_scenario_snapshot() {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../snapshots");
    assert!(golden
        .join("clusterip-udp@kube-proxy-iptables.snap")
        .exists());
    let name = format!("kpct-review-check-{}@nobody.snap.new", std::process::id());
    let pending = golden.join(&name);
    std::fs::write(
        &pending,
        "---\nsource: harness/tests/scenarios.rs\ndescription: review check\n---\nnothing\n",
    )
    .unwrap();
    let out = std::process::Command::new("cargo")
        .args(["insta", "pending-snapshots"])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output();
    std::fs::remove_file(&pending).unwrap();
    let out = out.expect("cargo runs (cargo-insta comes from ci/install-deps.sh)");
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        listed.contains(&name.replace(".snap.new", "")),
        "`cargo insta pending-snapshots` did not list {name}: {listed}"
    );
}

#[test]
fn the_soak_scenario_loads() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/soak/external-nodeport.yaml");
    let s = scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.probes.len(), 30);
    assert!(s.probes.iter().all(|p| p.repeat == 160));
}

#[test]
fn clusterip_cross_node_resolves_to_the_node_b_pods() {
    let s = scenario::load(&scenarios_dir().join("clusterip-cross-node.yaml")).unwrap();
    let state = scenario::cluster_state(&s);
    assert_eq!(state.service_ports.len(), 1);
    let sp = &state.service_ports[0];
    assert_eq!(sp.service_port_name(), "default/web");
    assert_eq!((sp.cluster_ip, sp.port), (Some(ip("10.96.0.10")), 80));
    let eps: Vec<(IpAddr, u16, Option<&str>)> = sp
        .endpoints
        .iter()
        .map(|e| (e.ip, e.port, e.node_name.as_deref()))
        .collect();
    assert_eq!(
        eps,
        vec![
            (ip("10.244.2.10"), 8080, Some("node-b")),
            (ip("10.244.2.11"), 8080, Some("node-b")),
        ]
    );
}

#[test]
fn rke2_ipvs_node_matches_the_walkthrough() {
    let s = scenario::load(&scenarios_dir().join("rke2-ipvs-node.yaml")).unwrap();
    let state = scenario::cluster_state(&s);
    let sp = &state.service_ports[0];
    assert_eq!(sp.cluster_ip, Some(ip("10.96.123.45")));
    assert_eq!((sp.port, sp.node_port), (80, Some(30080)));
    assert!(!sp.external_policy_local);
    let eps: Vec<(IpAddr, u16)> = sp.endpoints.iter().map(|e| (e.ip, e.port)).collect();
    assert_eq!(
        eps,
        vec![(ip("10.244.1.10"), 8080), (ip("10.244.1.11"), 8080)]
    );
    let node = scenario::node_context(&s, "node-a").unwrap();
    assert_eq!(
        node.local_addresses,
        vec![ip("10.244.1.0"), ip("10.244.1.1"), ip("192.168.1.10")]
    );
}

/// The exact text `load` reports for each malformed fixture, one line per problem.
const BAD: &[(&str, &str)] = &[
    (
        "names.yaml",
        "tests/fixtures/bad/names.yaml:3:1: name: scenario name `../../../escaped` is not a DNS label (1-63 characters: lower-case letters, digits and '-', starting and ending with a letter or digit)\n\
         tests/fixtures/bad/names.yaml:11:14: topology.external.name: external client name `Client` is not a DNS label (1-63 characters: lower-case letters, digits and '-', starting and ending with a letter or digit)\n\
         tests/fixtures/bad/names.yaml:19:5: probes[0].name: probe name `red\\u{1b}[31m` is not a DNS label (1-63 characters: lower-case letters, digits and '-', starting and ending with a letter or digit)",
    ),
    (
        "metadata.yaml",
        "tests/fixtures/bad/metadata.yaml:8:61: topology.pods[0].labels.app: label value `web server` of `app`: a label value must be empty or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue', 'my_value', '12345')\n\
         tests/fixtures/bad/metadata.yaml:12:7: services[0].labels.Example.com/team: label key `Example.com/team`: prefix part must be a lowercase RFC 1123 subdomain (lower-case alphanumerics, '-' and '.', starting and ending with an alphanumeric, e.g. 'example.com')\n\
         tests/fixtures/bad/metadata.yaml:14:7: services[0].labels.tier: label value `-front` of `tier`: a label value must be empty or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue', 'my_value', '12345')\n\
         tests/fixtures/bad/metadata.yaml:16:7: services[0].annotations.example.com/a/b: annotation key `example.com/a/b`: a qualified name is a name with an optional DNS subdomain prefix and one '/' (e.g. 'example.com/MyName')",
    ),
    (
        "step-pods-and-waits.yaml",
        "tests/fixtures/bad/step-pods-and-waits.yaml:18:12: probes[0].from.pod: unknown pod `web-2`\n\
         tests/fixtures/bad/step-pods-and-waits.yaml:22:5: steps[0].waitSeconds: waitSeconds 61 is more than 60 s: a step waits real time, and a scenario should run in seconds (set the timeout being waited out shorter instead)\n\
         tests/fixtures/bad/step-pods-and-waits.yaml:25:12: steps[0].apply.pods[0].name: pod `web-1` already exists at this step (in namespace default): a pod is not replaced; delete it first, in this step or an earlier one\n\
         tests/fixtures/bad/step-pods-and-waits.yaml:26:39: steps[0].apply.pods[1].ip: pod IP 10.244.1.10 is already used by topology.pods[0]\n\
         tests/fixtures/bad/step-pods-and-waits.yaml:27:25: steps[0].apply.pods[2].node: unknown node `node-z`\n\
         tests/fixtures/bad/step-pods-and-waits.yaml:28:12: steps[0].apply.pods[3].name: duplicate pod name `web-3` (also apply.pods[2] of this step)",
    ),
    (
        "limits.yaml",
        "tests/fixtures/bad/limits.yaml:20:5: probes[0].repeat: repeat 45000 is more than 1000 shots (each may wait the probe timeout)",
    ),
    (
        "existing-ipvs.yaml",
        "tests/fixtures/bad/existing-ipvs.yaml:9:7: topology.nodes[0].existingIPVS: line 1: \
         destination for service TCP 192.168.1.50:8080, which no earlier -A line defines: \
         `-a -t 192.168.1.50:8080 -r 10.244.1.30:8080 -m -w 1`",
    ),
    (
        "dual-stack.yaml",
        "tests/fixtures/bad/dual-stack.yaml:10:27: topology.nodes[0].ip[1]: node IP fd00:1::10 is IPv6, and the underlay has no IPv6 range (write `underlay: IPv4-CIDR,IPv6-CIDR`)\n\
         tests/fixtures/bad/dual-stack.yaml:11:33: topology.nodes[0].podCIDR[1]: podCIDR fd00:99::/64 is not inside clusterCIDR fd00:10:244::/56\n\
         tests/fixtures/bad/dual-stack.yaml:13:7: topology.nodes[1].ip: node `node-b` has no IPv6 address, and the cluster has IPv6 pods (its IPv6 proxier needs the node's address): write one address per family in `ips`\n\
         tests/fixtures/bad/dual-stack.yaml:14:7: topology.nodes[1].podCIDR: node `node-b` has no IPv6 podCIDR, and the cluster is dual-stack (clusterCIDR fd00:10:244::/56): write `podCIDRs: [IPv4-CIDR, IPv6-CIDR]`, as node IPAM allocates one of each\n\
         tests/fixtures/bad/dual-stack.yaml:16:7: topology.nodes[2].ip: node `node-c` has no IPv6 address, and the cluster has IPv6 pods (its IPv6 proxier needs the node's address): write one address per family in `ips`\n\
         tests/fixtures/bad/dual-stack.yaml:19:33: topology.pods[0].ip: pod `a1` has no IPv6 address, and node `node-a` is dual-stack (podCIDR fd00:99::/64): write `ips: [IPv4, IPv6]`, as a dual-stack CNI gives each pod one of each\n\
         tests/fixtures/bad/dual-stack.yaml:20:52: topology.pods[1].ip[1]: pod IP fd00:10:244:3::1 is the gateway of fd00:10:244:3::/64 (the node's cni0 bridge)\n\
         tests/fixtures/bad/dual-stack.yaml:22:5: topology.external.ips: the second value must be IPv6, of the other family: `192.168.1.101` is not an IPv6 address",
    ),
    (
        "ipv6-only.yaml",
        "tests/fixtures/bad/ipv6-only.yaml:3:1: topology.serviceCIDR: serviceCIDR 10.96.0.0/12 has an IPv4 range, and the cluster has no IPv4 pods (clusterCIDR fd00:10:244::/56): write a serviceCIDR of the cluster's families\n\
         tests/fixtures/bad/ipv6-only.yaml:8:22: topology.nodes[1].ip: node IP 192.168.1.11 is IPv4, and the underlay has no IPv4 range (write `underlay: IPv4-CIDR,IPv6-CIDR`)\n\
         tests/fixtures/bad/ipv6-only.yaml:8:22: topology.nodes[1].ip: node `node-b` has no IPv6 address, and the cluster has IPv6 pods (its IPv6 proxier needs the node's address): write one address per family in `ips`\n\
         tests/fixtures/bad/ipv6-only.yaml:10:32: topology.pods[0].ip: pod IP 10.244.1.10 is IPv4, and node `node-a` has no IPv4 podCIDR\n\
         tests/fixtures/bad/ipv6-only.yaml:10:32: topology.pods[0].ip: pod `a1` has no IPv6 address, and node `node-a` has IPv6 pods only (podCIDR fd00:10:244:1::/64)\n\
         tests/fixtures/bad/ipv6-only.yaml:15:7: services[0].spec.clusterIP: IPv6 is not configured on this cluster (topology.serviceCIDR has no IPv6 range)\n\
         tests/fixtures/bad/ipv6-only.yaml:18:5: endpointSlices[0].addressType: the cluster has no IPv4 range (topology.clusterCIDR): no proxier reads an IPv4 slice (addressType is IPv4 unless written: write `addressType: IPv6`)\n\
         tests/fixtures/bad/ipv6-only.yaml:21:21: endpointSlices[0].endpoints[0].addresses[0]: fd00:10:244:2::10 must be a valid IPv4 address (the slice's addressType)\n\
         tests/fixtures/bad/ipv6-only.yaml:25:10: probes[0].to.ip: pod `b1` has no IPv4 address to send an IPv4 probe from",
    ),
    (
        "secondary-ips.yaml",
        "tests/fixtures/bad/secondary-ips.yaml:9:36: topology.nodes[0].secondaryIPs[1]: node IP 192.168.1.11 is already used by topology.nodes[1].ip\n\
         tests/fixtures/bad/secondary-ips.yaml:9:50: topology.nodes[0].secondaryIPs[2]: node IP 10.0.0.1 is outside the underlay 192.168.1.0/24\n\
         tests/fixtures/bad/secondary-ips.yaml:13:22: topology.nodes[1].secondaryIPs[0]: secondary IP fd00:1::20 is IPv6, and node `node-b` has no IPv6 `ip` to add it beside\n\
         tests/fixtures/bad/secondary-ips.yaml:16:5: topology.external.ip: external client IP 192.168.1.20 is the IP of node `node-a`",
    ),
    (
        "service-families-single-stack.yaml",
        "tests/fixtures/bad/service-families-single-stack.yaml:10:13: services[0].spec.ipFamilyPolicy: this cluster is not configured for dual-stack services (topology.serviceCIDR has no IPv6 range)\n\
         tests/fixtures/bad/service-families-single-stack.yaml:12:13: services[1].spec.clusterIP: IPv6 is not configured on this cluster (topology.serviceCIDR has no IPv6 range)\n\
         tests/fixtures/bad/service-families-single-stack.yaml:15:5: endpointSlices[0].addressType: the cluster has no IPv6 range (topology.clusterCIDR): no proxier reads an IPv6 slice",
    ),
    (
        "service-families.yaml",
        "tests/fixtures/bad/service-families.yaml:17:47: services[0].spec.clusterIPs: may specify no more than one IP for each IP family\n\
         tests/fixtures/bad/service-families.yaml:19:35: services[1].spec.clusterIPs: first value must match `clusterIP`\n\
         tests/fixtures/bad/service-families.yaml:21:5: services[2].spec.ipFamilyPolicy: must be RequireDualStack or PreferDualStack when multiple 'ipFamilies' are specified\n\
         tests/fixtures/bad/service-families.yaml:23:46: services[3].spec.clusterIPs[0]: expected an IPv4 value as indicated by `ipFamilies[0]`\n\
         tests/fixtures/bad/service-families.yaml:25:13: services[4].spec.ipFamilyPolicy: the Service gets an IPv6 ClusterIP on this cluster (ipFamilyPolicy PreferDualStack), and kpct allocates none: list it in clusterIPs\n\
         tests/fixtures/bad/service-families.yaml:27:33: services[5].spec.clusterIP: clusterIP fd00:10:97::8 is outside serviceCIDR fd00:10:96::/112\n\
         tests/fixtures/bad/service-families.yaml:29:66: services[6].spec.ipFamilies[1]: Duplicate value: \"IPv6\"\n\
         tests/fixtures/bad/service-families.yaml:29:103: services[6].spec.clusterIPs[1]: expected an IPv6 value as indicated by `ipFamilies[1]`\n\
         tests/fixtures/bad/service-families.yaml:37:21: endpointSlices[0].endpoints[0].addresses[0]: 10.244.1.10 must be a valid IPv6 address (the slice's addressType)\n\
         tests/fixtures/bad/service-families.yaml:41:28: probes[0].to.family: via clusterIP: the service has no IPv6 ClusterIP\n\
         tests/fixtures/bad/service-families.yaml:44:42: probes[1].to.family: a literal `ip` target has its own family: `family` picks a Service's address",
    ),
    (
        "several-problems.yaml",
        "tests/fixtures/bad/several-problems.yaml:6:14: topology.external.ip: `192.168.1.050` is not an IPv4 address (four decimal numbers 0-255, no leading zeros)\n\
         tests/fixtures/bad/several-problems.yaml:9:7: topology.nodes[0].ip: `192.168.1.010` is not an IPv4 address (four decimal numbers 0-255, no leading zeros)\n\
         tests/fixtures/bad/several-problems.yaml:10:7: topology.nodes[0].podCIDR: `10.244.01.0` is not an IPv4 address (four decimal numbers 0-255, no leading zeros)\n\
         tests/fixtures/bad/several-problems.yaml:12:35: topology.pods[0].ip: `10.244.1.010` is not an IPv4 address (four decimal numbers 0-255, no leading zeros)\n\
         tests/fixtures/bad/several-problems.yaml:12:73: topology.pods[0]: unknown field `colour`, expected one of `name`, `namespace`, `node`, `ip`, `ips`, `labels`, `ports`\n\
         tests/fixtures/bad/several-problems.yaml:16:7: services[0].spec.clusterIP: `10.96.0.010` is neither an IP address (IPv4: four decimal numbers 0-255, no leading zeros) nor \"None\"\n\
         tests/fixtures/bad/several-problems.yaml:17:26: services[0].spec.ports[0].protocol: unknown variant `tcp`, expected one of `TCP`, `UDP`, `SCTP`\n\
         tests/fixtures/bad/several-problems.yaml:21:37: probes[0].to.node: unknown node `node-z`\n\
         tests/fixtures/bad/several-problems.yaml:23:7: probes[0].expectFor.kube-proxy-ipv: unknown proxier `kube-proxy-ipv`: expected a built-in (kube-proxy-ipvs, kube-proxy-iptables, kube-proxy-nftables), one at a release range (`kube-proxy-iptables@..v1.36`), a release range alone (`@v1.37`), or an `exec:PROGRAM` / `replay:DIRECTORY` label",
    ),
    (
        "proxier-options.yaml",
        "tests/fixtures/bad/proxier-options.yaml:17:43: services[0].spec.ports[1].nodePort: nodePort 30080 is outside the node port range 3000-3100 (topology.serviceNodePortRange)\n\
         tests/fixtures/bad/proxier-options.yaml:19:3: proxier.masqueradeBit: masqueradeBit 40 is not a bit of a 32-bit mark (0-31)\n\
         tests/fixtures/bad/proxier-options.yaml:20:3: proxier.ipvsScheduler: unknown IPVS scheduler `rrr`, expected one of rr, wrr, lc, wlc, sh, dh, mh, sed, nq\n\
         tests/fixtures/bad/proxier-options.yaml:21:39: proxier.nodePortAddresses[1]: `primary` stands alone: it cannot be combined with CIDRs\n\
         tests/fixtures/bad/proxier-options.yaml:22:28: proxier.ipvsTimeouts.tcpFin: 3000000 s is more than the kernel takes (2147483 s)",
    ),
    (
        "expectation-choice.yaml",
        "tests/fixtures/bad/expectation-choice.yaml:24:39: probes[0].expect.reachesOneOf: give `reaches` (exactly these pods) or `reachesOneOf` (each shot on one of them), not both\n\
         tests/fixtures/bad/expectation-choice.yaml:28:14: probes[1].expect.reaches: 2 pods cannot all be reached by 1 shot(s): raise `repeat`, or use `reachesOneOf` if any one of them will do\n\
         tests/fixtures/bad/expectation-choice.yaml:33:14: probes[2].expect.counts: the counts add up to 3, but the probe fires `repeat: 4` shot(s)\n\
         tests/fixtures/bad/expectation-choice.yaml:33:33: probes[2].expect.counts.web-c: unknown pod `web-c`\n\
         tests/fixtures/bad/expectation-choice.yaml:39:25: probes[3].expectFor.kube-proxy-ipvs.sequence: a sequence of 3 backends is longer than the probe's `repeat: 2` shot(s)\n\
         tests/fixtures/bad/expectation-choice.yaml:39:50: probes[3].expectFor.kube-proxy-ipvs.sequence[2]: unknown pod `web-x`\n\
         tests/fixtures/bad/expectation-choice.yaml:43:32: probes[4].expect.sameBackend: `sameBackend` contradicts `outcome: dropped` (nothing is delivered)\n\
         tests/fixtures/bad/expectation-choice.yaml:49:25: probes[5].expectFor.kube-proxy-ipvs.cycle: a round of 3 backends is longer than the probe's `repeat: 2` shot(s)\n\
         tests/fixtures/bad/expectation-choice.yaml:49:47: probes[5].expectFor.kube-proxy-ipvs.cycle[2]: `web-a` twice: a round names each backend once (for a weighted order, give the exact `sequence`)",
    ),
    (
        "yaml-syntax.yaml",
        "tests/fixtures/bad/yaml-syntax.yaml:17:9: topology.pods[0].labels: did not find \
         expected ',' or '}', while parsing a flow mapping at line 16 column 15",
    ),
    (
        "unknown-field.yaml",
        "tests/fixtures/bad/unknown-field.yaml:24:11: services[1].spec.ports[0]: unknown field \
         `nodeport`, expected one of `name`, `protocol`, `port`, `targetPort`, `nodePort`",
    ),
    (
        "wrong-type.yaml",
        "tests/fixtures/bad/wrong-type.yaml:17:17: services[0].spec.ports[0].port: invalid type: \
         string \"eighty\", expected a port number (1-65535)",
    ),
    (
        "target-port-type.yaml",
        "tests/fixtures/bad/target-port-type.yaml:18:11: services[0].spec.ports[0].targetPort: \
         expected a port number (1-65535) or a port name",
    ),
    (
        "missing-field.yaml",
        "tests/fixtures/bad/missing-field.yaml:6:7: topology.nodes[0]: missing field `ip`",
    ),
    (
        "bad-cidr.yaml",
        "tests/fixtures/bad/bad-cidr.yaml:8:7: topology.nodes[0].podCIDR: prefix length 33 is \
         over 32",
    ),
    (
        "bad-enum.yaml",
        "tests/fixtures/bad/bad-enum.yaml:15:13: services[0].spec.type: unknown variant \
         `Nodeport`, expected one of `ClusterIP`, `NodePort`, `LoadBalancer`, `ExternalName`",
    ),
    (
        "cidr-host-bits.yaml",
        "tests/fixtures/bad/cidr-host-bits.yaml:8:7: topology.nodes[0].podCIDR: 10.244.1.5/24 \
         has host bits set (the network is 10.244.1.0/24)\n\
         tests/fixtures/bad/cidr-host-bits.yaml:11:7: topology.nodes[1].podCIDR: podCIDR \
         10.245.2.0/24 is not inside clusterCIDR 10.244.0.0/16",
    ),
    (
        "overlapping-pod-cidrs.yaml",
        "tests/fixtures/bad/overlapping-pod-cidrs.yaml:10:7: topology.nodes[1].ip: node IP \
         192.168.2.11 is outside the underlay 192.168.1.0/24\n\
         tests/fixtures/bad/overlapping-pod-cidrs.yaml:11:7: topology.nodes[1].podCIDR: podCIDR \
         10.244.1.0/24 overlaps topology.nodes[0].podCIDR 10.244.0.0/23",
    ),
    (
        "pod-ip-outside-podcidr.yaml",
        "tests/fixtures/bad/pod-ip-outside-podcidr.yaml:15:7: topology.pods[0].ip: pod IP \
         10.244.2.10 is outside podCIDR 10.244.1.0/24 of node `node-a`\n\
         tests/fixtures/bad/pod-ip-outside-podcidr.yaml:18:7: topology.pods[1].ip: pod IP \
         10.244.1.1 is the gateway of 10.244.1.0/24 (the node's cni0 bridge)\n\
         tests/fixtures/bad/pod-ip-outside-podcidr.yaml:21:7: topology.pods[2].ip: pod IP \
         10.244.2.0 is the network address of 10.244.2.0/24 (the node's flannel.1 VTEP)",
    ),
    (
        "unknown-node.yaml",
        "tests/fixtures/bad/unknown-node.yaml:14:7: topology.pods[0].node: unknown node `node-c`",
    ),
    (
        "duplicate-name.yaml",
        "tests/fixtures/bad/duplicate-name.yaml:17:7: topology.pods[1].name: duplicate pod name \
         `web` (also topology.pods[0]; pod names must be unique across namespaces)\n\
         tests/fixtures/bad/duplicate-name.yaml:21:7: topology.pods[2].name: pod name `Web_2` is \
         not a DNS label (1-63 characters: lower-case letters, digits and '-', starting and \
         ending with a letter or digit)\n\
         tests/fixtures/bad/duplicate-name.yaml:34:5: services[2].name: duplicate service \
         `default/web` (also services[0])",
    ),
    (
        "nodeport-out-of-range.yaml",
        "tests/fixtures/bad/nodeport-out-of-range.yaml:18:34: services[0].spec.ports[0].nodePort: \
         nodePort 8080 is outside the node port range 30000-32767 (topology.serviceNodePortRange)\n\
         tests/fixtures/bad/nodeport-out-of-range.yaml:20:11: services[0].spec.ports[2].nodePort: \
         type NodePort needs a nodePort in 30000-32767 (kpct does not allocate one)\n\
         tests/fixtures/bad/nodeport-out-of-range.yaml:24:26: services[1].spec.ports[0].nodePort: \
         nodePort is only allowed for NodePort and LoadBalancer services, not ClusterIP\n\
         tests/fixtures/bad/nodeport-out-of-range.yaml:29:27: services[2].spec.ports[0].nodePort: \
         nodePort 30443/TCP is already used by default/web:https (443/TCP)",
    ),
    (
        "service-addresses.yaml",
        "tests/fixtures/bad/service-addresses.yaml:13:5: topology.external.ip: external client IP \
         192.168.1.11 is the IP of node `node-b`\n\
         tests/fixtures/bad/service-addresses.yaml:17:7: services[0].spec.clusterIP: clusterIP \
         10.112.0.1 is outside serviceCIDR 10.96.0.0/12\n\
         tests/fixtures/bad/service-addresses.yaml:21:7: services[1].spec.clusterIP: `ten` is \
         neither an IP address (IPv4: four decimal numbers 0-255, no leading zeros) nor \"None\"\n\
         tests/fixtures/bad/service-addresses.yaml:24:5: services[2].spec.clusterIP: clusterIP is \
         required: an address inside serviceCIDR 10.96.0.0/12, or \"None\" for a headless \
         service\n\
         tests/fixtures/bad/service-addresses.yaml:32:7: services[4].spec.clusterIP: clusterIP \
         10.96.0.1 is already used by services[3]",
    ),
    (
        "named-target-port.yaml",
        "tests/fixtures/bad/named-target-port.yaml:25:22: services[0].spec.ports[0].targetPort: \
         targetPort `http` names no TCP container port on any selected pod (web-1)\n\
         tests/fixtures/bad/named-target-port.yaml:31:22: services[1].spec.ports[0].targetPort: \
         targetPort `http` cannot be resolved: the selector matches no pod (and no endpoint slice \
         is given for the service)",
    ),
    (
        "endpoint-slices.yaml",
        "tests/fixtures/bad/endpoint-slices.yaml:22:5: endpointSlices[0].service: unknown service \
         `default/ghost` (an endpoint slice belongs to a service in its own namespace)\n\
         tests/fixtures/bad/endpoint-slices.yaml:28:9: endpointSlices[1].ports[1]: port name \
         `htp` (TCP) matches no port of service `default/web` (ports are matched by name and \
         protocol)\n\
         tests/fixtures/bad/endpoint-slices.yaml:30:21: endpointSlices[1].endpoints[0].addresses[0]: \
         address 172.16.0.1 is neither a pod IP nor inside clusterCIDR 10.244.0.0/16\n\
         tests/fixtures/bad/endpoint-slices.yaml:32:9: endpointSlices[1].endpoints[1].nodeName: \
         nodeName `node-b` contradicts pod `web-1` with this address, which runs on `node-a`\n\
         tests/fixtures/bad/endpoint-slices.yaml:34:9: endpointSlices[1].endpoints[2].nodeName: \
         unknown node `node-z`\n\
         tests/fixtures/bad/endpoint-slices.yaml:35:9: endpointSlices[1].endpoints[3].addresses: \
         an endpoint needs an address",
    ),
    (
        "health-check-node-port.yaml",
        "tests/fixtures/bad/health-check-node-port.yaml:17:7: services[0].spec.healthCheckNodePort: \
         healthCheckNodePort needs type LoadBalancer with externalTrafficPolicy Local\n\
         tests/fixtures/bad/health-check-node-port.yaml:23:7: \
         services[1].spec.loadBalancerSourceRanges: loadBalancerSourceRanges may only be used \
         with type LoadBalancer\n\
         tests/fixtures/bad/health-check-node-port.yaml:24:7: services[1].spec.sessionAffinityConfig: \
         sessionAffinityConfig needs sessionAffinity: ClientIP\n\
         tests/fixtures/bad/health-check-node-port.yaml:24:42: \
         services[1].spec.sessionAffinityConfig.clientIP.timeoutSeconds: timeoutSeconds 0 must be \
         1-86400",
    ),
    (
        "probe-two-sources.yaml",
        "tests/fixtures/bad/probe-two-sources.yaml:23:5: probes[0].from: exactly one of `pod`, \
         `node`, `nodeLocalhost`, `external` must be set (found `pod`, `node`)\n\
         tests/fixtures/bad/probe-two-sources.yaml:26:5: probes[1].from: exactly one of `pod`, \
         `node`, `nodeLocalhost`, `external` must be set (found none)\n\
         tests/fixtures/bad/probe-two-sources.yaml:29:12: probes[2].from.pod: unknown pod `ghost`\n\
         tests/fixtures/bad/probe-two-sources.yaml:30:10: probes[2].to.service: unknown service \
         `default/nope`\n\
         tests/fixtures/bad/probe-two-sources.yaml:31:24: probes[2].expect.reaches[0]: unknown \
         pod `phantom`",
    ),
    (
        "probe-source-address.yaml",
        "tests/fixtures/bad/probe-source-address.yaml:21:25: probes[0].from.address: `address` is \
         only for a `node` source\n\
         tests/fixtures/bad/probe-source-address.yaml:24:26: probes[1].from.address: 192.168.1.99 \
         is no Service's load balancer IP (status.loadBalancer.ingress): a node sends only from \
         its own addresses or from such an IP\n\
         tests/fixtures/bad/probe-source-address.yaml:27:26: probes[2].from.address: a probe with \
         `address` cannot `keep` its flow\n\
         tests/fixtures/bad/probe-source-address.yaml:31:26: probes[3].from.address: \
         192.168.1.200 cannot send to the probe's IPv6 destination\n\
         tests/fixtures/bad/probe-source-address.yaml:32:10: probes[3].to.ip: node `node-a` has \
         no IPv6 address to send an IPv6 probe from",
    ),
    (
        "probe-via.yaml",
        "tests/fixtures/bad/probe-via.yaml:34:24: probes[0].to.via: via nodePort: the service port \
         has no nodePort\n\
         tests/fixtures/bad/probe-via.yaml:37:5: probes[1].to.node: via nodePort needs `node`: the \
         node whose IP to send to\n\
         tests/fixtures/bad/probe-via.yaml:40:5: probes[2].to.via: via clusterIP: a headless \
         service has no ClusterIP\n\
         tests/fixtures/bad/probe-via.yaml:43:5: probes[3].to.port: service `default/np` has 2 \
         ports: say which with `port`\n\
         tests/fixtures/bad/probe-via.yaml:46:23: probes[4].to.port: probe protocol TCP does not \
         match the service port's UDP\n\
         tests/fixtures/bad/probe-via.yaml:49:5: probes[5].to.dport: a literal `ip` target needs \
         `dport`\n\
         tests/fixtures/bad/probe-via.yaml:49:26: probes[5].to.via: `via` is only used with a \
         `service` target\n\
         tests/fixtures/bad/probe-via.yaml:52:35: probes[6].to.via: via healthCheckNodePort: the \
         service has no healthCheckNodePort\n\
         tests/fixtures/bad/probe-via.yaml:56:39: probes[7].expect.reaches: `reaches` contradicts \
         `outcome: answeredByNode` (the node answers itself; no pod is reached)\n\
         tests/fixtures/bad/probe-via.yaml:56:49: probes[7].expect.reaches[0]: unknown pod `web`",
    ),
    (
        "steps.yaml",
        "tests/fixtures/bad/steps.yaml:21:5: probes[0].repeat: a kept flow is one connection: repeat must be 1\n\
         tests/fixtures/bad/steps.yaml:24:5: steps[0].name: step name `Bad_Name` is not a DNS label (1-63 characters: lower-case letters, digits and '-', starting and ending with a letter or digit)\n\
         tests/fixtures/bad/steps.yaml:26:18: steps[0].delete.services[0]: no service default/api to delete at this step\n\
         tests/fixtures/bad/steps.yaml:27:14: steps[0].delete.pods[0]: no pod default/web-9 to delete at this step\n\
         tests/fixtures/bad/steps.yaml:32:13: steps[0].apply.services[0].spec.clusterIP: clusterIP 10.200.0.1 is outside serviceCIDR 10.96.0.0/12\n\
         tests/fixtures/bad/steps.yaml:37:9: steps[0].probes[0].to: a `continue` probe goes the way flow `session` went: drop `to`\n\
         tests/fixtures/bad/steps.yaml:39:9: steps[0].probes[1].continue: no flow `nothing` is kept by an earlier probe (set `keep: nothing` on one)\n\
         tests/fixtures/bad/steps.yaml:47:28: steps[1].probes[0].expect.reaches[0]: unknown pod `web-1`",
    ),
];

fn load_error(file: &str) -> ScenarioError {
    let path = Path::new("tests/fixtures/bad").join(file);
    match scenario::load(&path) {
        Ok(_) => panic!("{file}: loaded, but it is malformed"),
        Err(e) => e,
    }
}

#[test]
fn every_bad_fixture_fails_with_its_exact_message() {
    for (file, expected) in BAD {
        let err = load_error(file);
        assert_eq!(err.to_string(), *expected, "fixture {file}");
        assert_eq!(
            err.problems().len(),
            expected.lines().count(),
            "fixture {file}"
        );
    }
}

/// In a run, `expectFor` may name the built-ins and the run's own `--proxier`s, nothing else: a
/// pin for a proxier the run does not have would silently never judge anything.
#[test]
fn expect_for_names_only_the_proxiers_of_the_run() {
    let text = std::fs::read_to_string(scenarios_dir().join("clusterip-cross-node.yaml")).unwrap();
    let pinned = text.replace(
        "    expect:",
        "    expectFor:\n      exec:./my-proxier: {outcome: delivered}\n    expect:",
    );
    assert_ne!(pinned, text, "the scenario has an `expect` to pin next to");
    let known = |labels: &[String]| {
        scenario::parse_for(&pinned, "pinned.yaml", scenario::KnownProxiers::Run(labels))
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    assert_eq!(known(&["exec:./my-proxier".to_owned()]), Ok(()));
    let err = known(&["exec:./my-proxy".to_owned()]).unwrap_err();
    assert!(
        err.ends_with(
            "probes[0].expectFor.exec:./my-proxier: `exec:./my-proxier` is not a proxier of \
             this run (built-ins: kube-proxy-ipvs, kube-proxy-iptables, kube-proxy-nftables; \
             --proxier: exec:./my-proxy)"
        ),
        "{err}"
    );
    assert!(scenario::parse(&pinned, "pinned.yaml").is_ok());
}

#[test]
fn every_bad_fixture_has_an_expected_message() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bad");
    for file in yaml_files(&dir) {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            BAD.iter().any(|(f, _)| *f == name),
            "{name} has no expected message in BAD"
        );
    }
}

#[test]
fn name_defaults_to_the_file_stem() {
    let text =
        "topology:\n  underlay: 192.168.1.0/24\n  clusterCIDR: 10.244.0.0/16\n  nodes:\n    \
                - {name: n, ip: 192.168.1.10, podCIDR: 10.244.1.0/24}\n";
    let s = scenario::parse(text, "scenarios/my-scenario.yaml").unwrap();
    assert_eq!(s.name, "my-scenario");
    let named = format!("name: explicit\n{text}");
    assert_eq!(
        scenario::parse(&named, "scenarios/x.yaml").unwrap().name,
        "explicit"
    );
}

#[test]
fn unreadable_file_names_the_file() {
    let err = scenario::load(Path::new("tests/fixtures/does-not-exist.yaml")).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("tests/fixtures/does-not-exist.yaml: cannot read scenario file: "),
        "{err}"
    );
    assert!(err.problems().is_empty());
}

#[test]
fn scenarios_built_in_code_validate_without_line_numbers() {
    let mut s = scenario::load(&scenarios_dir().join("rke2-ipvs-node.yaml")).unwrap();
    assert!(scenario::validate(&s).is_ok());
    s.topology.pods[0].node = "node-x".into();
    assert_eq!(
        scenario::validate(&s).unwrap_err().to_string(),
        "rke2-ipvs-node: topology.pods[0].node: unknown node `node-x`"
    );
}

/// The documents' generated parts (the scenario table, the field reference, the known
/// differences) are generated from the files; a stale one fails here.
#[test]
fn generated_documentation_is_current() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (path, expected) in kpct::operations::scenario_table::regenerate(&repo).unwrap() {
        let now = std::fs::read_to_string(&path).unwrap();
        assert!(
            now == expected,
            "{} is stale: run `cargo run -p kpct -- scenario-table --write` from the repository's root",
            path.display()
        );
    }
}

/// Every field of the format (read from the schema) is explained in docs/scenarios.md's
/// prose, not only listed in the generated reference.
#[test]
fn the_documentation_explains_every_scenario_field() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme =
        std::fs::read_to_string(repo.join(kpct::operations::scenario_table::SCENARIOS_DOC))
            .unwrap();
    let (Some(b), Some(e)) = (
        readme.find(kpct::operations::scenario_table::FIELDS_BEGIN),
        readme.find(kpct::operations::scenario_table::FIELDS_END),
    ) else {
        panic!("docs/scenarios.md has no field reference markers");
    };
    let prose = format!("{}{}", &readme[..b], &readme[e..]);
    let mut missing = Vec::new();
    for (path, fields) in kpct::scenario::reference::objects() {
        for field in fields {
            let mentioned = [
                format!("`{field}`"),
                format!("`{field}:"),
                format!("{{ {field}:"),
                format!("{{{field}:"),
                format!(" {field}: "),
            ]
            .iter()
            .any(|form| prose.contains(form.as_str()));
            if !mentioned {
                missing.push(format!("{path}.{field}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/scenarios.md does not explain: {missing:#?}"
    );
}

/// From any directory, the library is the one of the checkout kpct was built from (a proxier's
/// repository runs kpct from its own root); `KPCT_SCENARIOS` names another.
#[test]
fn the_library_is_found_from_any_directory() {
    let elsewhere = std::env::temp_dir().join(format!("kpct-elsewhere-{}", std::process::id()));
    std::fs::create_dir_all(&elsewhere).unwrap();
    let library = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "yaml"))
        .count();
    let validate = common::kpct_command(&["validate"])
        .current_dir(&elsewhere)
        .env_remove("KPCT_SCENARIOS")
        .output()
        .unwrap();
    assert!(validate.status.success(), "{validate:?}");
    assert_eq!(
        String::from_utf8_lossy(&validate.stdout),
        format!("{library} scenario file(s), no problems\n")
    );
    let list = common::kpct_command(&["run", "--list", "--proxier", "kube-proxy-iptables"])
        .current_dir(&elsewhere)
        .env_remove("KPCT_SCENARIOS")
        .output()
        .unwrap();
    assert!(list.status.success(), "{list:?}");
    assert!(
        String::from_utf8_lossy(&list.stdout)
            .starts_with("clusterip-cross-node\tpod-a-to-clusterip\tkube-proxy-iptables\n"),
        "{list:?}"
    );
    // A library of one's own, and a wrong one named as such.
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scenarios/clusterip-udp.yaml"
        ),
        elsewhere.join("clusterip-udp.yaml"),
    )
    .unwrap();
    let own = common::kpct_command(&["validate"])
        .current_dir("/")
        .env("KPCT_SCENARIOS", &elsewhere)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&own.stdout),
        "1 scenario file(s), no problems\n",
        "{own:?}"
    );
    let wrong = common::kpct_command(&["validate"])
        .env("KPCT_SCENARIOS", elsewhere.join("nothing"))
        .output()
        .unwrap();
    assert!(!wrong.status.success());
    assert!(
        String::from_utf8_lossy(&wrong.stderr).contains("KPCT_SCENARIOS="),
        "{wrong:?}"
    );
    std::fs::remove_dir_all(&elsewhere).unwrap();
}
