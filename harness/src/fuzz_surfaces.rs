//! Every input kpct takes from outside, one entry each, as the fuzz targets (`fuzz/`, cargo
//! fuzz) and their corpus test (`harness/tests/fuzz_corpora.rs`) run it. Each entry takes any
//! bytes and returns; it panics only on a finding: a parser that panicked, or an error that
//! does not say where in the input it is. A hang or unbounded memory is a finding of the
//! fuzzer itself (its `-timeout` and `-rss_limit_mb`).

use crate::drivers::replay::{parse_capture, ReplayError, CAPTURE_FILES};
use crate::programming::text::parse_text_with_sources;
use std::sync::OnceLock;

/// One surface: any bytes in, a panic only on a finding.
pub type Surface = fn(&[u8]);

/// The fuzz targets, by name: what `ci/fuzz.sh` runs and the corpus directories are named for.
pub const TARGETS: [(&str, Surface); 6] = [
    ("scenario", scenario),
    ("programming_text", programming_text),
    ("replay_capture", replay_capture),
    ("ipvs_netlink", ipvs_netlink),
    ("netfilter_netlink", netfilter_netlink),
    ("api_request", api_request),
];

/// A scenario file: loaded and validated, and when valid, every step's cluster state resolved
/// and programmed by each built-in proxier for each node (what a run does before it touches
/// a kernel). Files are read as UTF-8 (another encoding is refused with the file's name).
pub fn scenario(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let s = match crate::scenario::parse(text, "fuzz.yaml") {
        Ok(s) => s,
        Err(e) => {
            for problem in e.problems() {
                assert!(
                    problem.location.is_some(),
                    "a problem without a line: {problem}"
                );
            }
            return;
        }
    };
    let states = std::iter::once(None)
        .chain((0..s.steps.len()).map(Some))
        .map(|step| crate::scenario::state_at(&s, step).scenario);
    for state in states {
        let cluster = crate::scenario::cluster_state(&state);
        let _ = crate::api_objects::cluster_objects(&state);
        for node in &state.topology.nodes {
            let Some(context) = crate::scenario::node_context(&state, &node.name) else {
                continue;
            };
            for name in crate::proxier::BUILTIN {
                if let Some(proxier) = crate::proxier::builtin(name) {
                    let _ = proxier.program(&cluster, &context);
                }
            }
        }
    }
}

/// What an `exec:` proxier prints: programming text, every section.
pub fn programming_text(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(e) = parse_text_with_sources(text, "fuzz") {
        assert!(
            e.line <= text.lines().count() + 1,
            "a line past the end: {e}"
        );
    }
}

/// A `replay:` node directory: the input split at NUL bytes gives the capture files in
/// [`CAPTURE_FILES`]' order (iptables-save, ip6tables-save, ipset-save, ipvsadm-Sn,
/// kube-ipvs0, sysctl, nft-ruleset); an empty part is a file the node lacks.
pub fn replay_capture(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parts: Vec<&str> = text.split('\0').collect();
    let result = parse_capture(|file| {
        let index = CAPTURE_FILES.iter().position(|f| *f == file);
        Ok(index
            .and_then(|i| parts.get(i))
            .filter(|part| !part.is_empty())
            .map(|part| (part.to_string(), file.to_string())))
    });
    match result {
        Ok(_) => {}
        Err(ReplayError::Text(e)) => {
            let part = CAPTURE_FILES
                .iter()
                .position(|f| *f == e.origin)
                .and_then(|i| parts.get(i));
            assert!(part.is_some(), "an error naming no capture file: {e}");
            let lines = part.map_or(0, |p| p.lines().count());
            assert!(e.line <= lines + 1, "a line past the end: {e}");
        }
        Err(other) => panic!("an error without a file and line: {other}"),
    }
}

/// A generic-netlink reply of the IPVS family, as `ipvs-genl` decodes the kernel's: the
/// message, its attributes, and each service, destination, info and timeout set in it.
pub fn ipvs_netlink(data: &[u8]) {
    let Some(decoded) = ipvs_genl::nl::decode_reply(data) else {
        return;
    };
    // What kpct does with a decoded service: reads it back as `ipvsadm -Sn` text.
    for service in decoded.services.into_iter().flatten() {
        let _ = ipvs_genl::format_save(&[(service, Vec::new())]);
    }
}

/// A read of nfnetlink replies, as kpct takes the kernel's: each message decoded by
/// `netlink-packet-netfilter`, then read for what kpct uses of it (a conntrack entry, a table's
/// name, a trace event, whether a rule drops plainly).
pub fn netfilter_netlink(data: &[u8]) {
    crate::netfilter::read_replies(data);
}

/// A connection to the API server: raw bytes (one or more HTTP/1 requests), served the
/// objects of `clusterip-cross-node` (see [`apiserver::answer_raw`]).
pub fn api_request(data: &[u8]) {
    static OBJECTS: OnceLock<crate::api_objects::ClusterObjects> = OnceLock::new();
    let objects = OBJECTS.get_or_init(|| {
        let text = include_str!("../../scenarios/clusterip-cross-node.yaml");
        let s = crate::scenario::parse(text, "clusterip-cross-node.yaml")
            .unwrap_or_else(|e| panic!("the bundled scenario: {e}"));
        crate::api_objects::cluster_objects(&s)
    });
    if let Err(e) = apiserver::answer_raw(objects.clone(), data) {
        panic!("the server failed, not the request: {e:#}");
    }
}
