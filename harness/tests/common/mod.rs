//! What several integration tests share: deliberately broken proxiers, a UDP socket pair
//! across pods.
// Each test binary compiles this module and uses a part of it.
#![allow(dead_code)]

use kpct::netns::Netns;
use kpct::programming::{Programming, Table};
use kpct::proxier::{builtin, Proxier};
use kpct::scenario::cluster::{ClusterState, NodeContext};
use std::net::UdpSocket;
use std::time::Duration;

pub mod netns_watch;
pub mod processes;

/// Fails a scenario test whose run violated an expectation, with the violations, the
/// observation and the run's report (what each node's kernel and proxier held for the failing
/// probes). Written to the process's stderr at once as well as in the panic: libtest prints a
/// captured panic only when the whole binary ends, and a run cut short (a VM timeout, a kill)
/// would lose the one message that explains a failure seen once.
pub fn fail_with_report(run: &kpct::ScenarioRun, what: &str) -> ! {
    use std::io::Write;
    let yaml = run
        .observation
        .to_yaml()
        .unwrap_or_else(|e| format!("({e})"));
    let report = kpct::report::document::render(
        kpct::report::document::Format::Markdown,
        &kpct::report::Results::new(
            vec![run.clone()],
            Vec::new(),
            kpct::provenance::Environment::detect(),
        ),
    );
    let message = format!(
        "{what}: {} violated expectation(s):\n{}\n\nobserved:\n{yaml}\n\nthe run's report:\n{report}",
        run.violations.len(),
        run.violations.join("\n")
    );
    // Straight to the file descriptor: not captured by libtest.
    let _ = std::io::stderr().write_all(format!("{message}\n").as_bytes());
    panic!("{message}");
}

/// The head of the two-node topology most integration tests share (underlay, cluster range, two
/// nodes), to `concat!` with each test's own pods and objects.
#[macro_export]
macro_rules! two_nodes {
    () => {
        "
topology:
  underlay: 192.168.1.0/24
  clusterCIDR: 10.244.0.0/16
  nodes:
    - { name: node-a, ip: 192.168.1.10, podCIDR: 10.244.1.0/24 }
    - { name: node-b, ip: 192.168.1.11, podCIDR: 10.244.2.0/24 }
"
    };
}

/// Programs like the built-in proxier `inner`, then applies `mutate`; labelled `name` (which
/// may be `inner` itself, so the scenarios' per-proxier expectations still apply).
pub struct Mutated {
    pub name: &'static str,
    pub inner: &'static str,
    pub mutate: fn(&mut Programming) -> anyhow::Result<()>,
}

impl Proxier for Mutated {
    fn name(&self) -> String {
        self.name.to_string()
    }
    fn program(&self, cluster: &ClusterState, node: &NodeContext) -> anyhow::Result<Programming> {
        let mut p = builtin(self.inner)
            .expect("a built-in proxier")
            .program(cluster, node)?;
        (self.mutate)(&mut p)?;
        Ok(p)
    }
    fn resync(
        &self,
        resync: &kpct::proxier::Resync<'_>,
        cluster: &ClusterState,
        node: &NodeContext,
    ) -> anyhow::Result<Programming> {
        let mut p = builtin(self.inner)
            .expect("a built-in proxier")
            .resync(resync, cluster, node)?;
        (self.mutate)(&mut p)?;
        Ok(p)
    }
    fn random_backend_choice(&self) -> bool {
        builtin(self.inner)
            .expect("a built-in proxier")
            .random_backend_choice()
    }
    /// The inner built-in's: an older release's built-in labelled as the newest is that
    /// release's behaviour judged by the newest's expectations.
    fn release(&self) -> kpct::release::Release {
        builtin(self.inner).expect("a built-in proxier").release()
    }
    fn programs_ipvs(&self) -> bool {
        builtin(self.inner)
            .expect("a built-in proxier")
            .programs_ipvs()
    }
    fn default_node_port_addresses(&self) -> Vec<kpct::scenario::NodePortAddress> {
        builtin(self.inner)
            .expect("a built-in proxier")
            .default_node_port_addresses()
    }
}

/// Changes nothing: with an older release's built-in as `inner`, a [`Mutated`] is that
/// release's behaviour.
pub fn unchanged(_: &mut Programming) -> anyhow::Result<()> {
    Ok(())
}

/// kube-proxy's UDP conntrack cleanup as the built-ins did it before exploring found the
/// difference: the DNAT target compared by address alone, whatever its port.
pub fn serving_address_alone(p: &mut Programming) -> anyhow::Result<()> {
    for c in &mut p.conntrack_cleanup {
        for s in &mut c.serving {
            s.port = None;
        }
    }
    Ok(())
}

/// The cleanup of kube-proxy v1.36 and earlier: no entry of a Service without a serving
/// endpoint goes.
pub fn no_cleanup_without_endpoints(p: &mut Programming) -> anyhow::Result<()> {
    p.conntrack_cleanup.retain(|c| !c.serving.is_empty());
    Ok(())
}

/// A cleanup that also clears the flows of a deleted UDP Service (as v1.37 would, were its
/// slices gone before it): every entry to 10.96.0.53:53, the ClusterIP
/// transition-udp-service-deleted deletes.
pub fn clear_flows_of_deleted_service(p: &mut Programming) -> anyhow::Result<()> {
    p.conntrack_cleanup
        .push(kpct::programming::ConntrackCleanup {
            protocol: kpct::scenario::Protocol::Udp,
            orig_dst: Some("10.96.0.53".parse()?),
            orig_dport: 53,
            serving: Vec::new(),
        });
    Ok(())
}

/// A proxier that serves the healthCheckNodePort as a NodePort: 32000 DNATed to web-a (the
/// pod of health-check-from-node), so the node's health server never answers it.
pub fn health_check_port_as_node_port(p: &mut Programming) -> anyhow::Result<()> {
    let nat = p
        .iptables
        .get_mut(&Table::Nat)
        .ok_or_else(|| anyhow::anyhow!("the proxier writes nat"))?;
    let at = nat
        .rules
        .iter()
        .position(|r| r.starts_with("-A KUBE-NODEPORTS"))
        .ok_or_else(|| anyhow::anyhow!("no KUBE-NODEPORTS rule"))?;
    nat.rules.insert(
        at,
        "-A KUBE-NODEPORTS -p tcp -m tcp --dport 32000 -j DNAT --to-destination 10.244.1.20:8080"
            .to_string(),
    );
    Ok(())
}

/// Leaves the node's other IPVS services alone: nftables mode without its start-up flush.
pub fn keep_foreign_ipvs_services(p: &mut Programming) -> anyhow::Result<()> {
    anyhow::ensure!(p.ipvs_clear, "the built-in clears IPVS at its first sync");
    p.ipvs_clear = false;
    Ok(())
}

/// Removes the service MASQUERADE rule of KUBE-POSTROUTING (not the hairpin one), and only it.
pub fn drop_postrouting_masquerade(p: &mut Programming) -> anyhow::Result<()> {
    let nat = p
        .iptables
        .get_mut(&Table::Nat)
        .expect("the proxier writes nat");
    let before = nat.rules.len();
    nat.rules.retain(|r| {
        !(r.starts_with("-A KUBE-POSTROUTING")
            && r.contains("-j MASQUERADE")
            && !r.contains("-LOOP-BACK"))
    });
    assert_eq!(
        before - 1,
        nat.rules.len(),
        "exactly the service MASQUERADE rule was removed"
    );
    Ok(())
}

/// A UDP socket bound to `addr` inside namespace `ns`, whose reads give up after `wait`.
pub fn udp_socket(ns: &Netns, addr: impl Into<std::net::SocketAddr>, wait: Duration) -> UdpSocket {
    let addr = addr.into();
    let socket = ns
        .run(|| UdpSocket::bind(addr))
        .expect("entering the namespace")
        .unwrap_or_else(|e| panic!("binding {addr} in {}: {e}", ns.name()));
    socket
        .set_read_timeout(Some(wait))
        .expect("setting the read timeout");
    socket
}

/// Sends every connection of a Service to one endpoint: in iptables mode each KUBE-SVC-/KUBE-SVL-
/// chain keeps only its last jump to an endpoint chain (the one without `-m statistic`, and no
/// affinity `--rcheck` jumps); in IPVS mode each virtual server keeps only its first real server.
pub fn pin_one_backend(p: &mut Programming) -> anyhow::Result<()> {
    if let Some(nat) = p.iptables.get_mut(&Table::Nat) {
        let is_endpoint_jump = |r: &str| {
            (r.starts_with("-A KUBE-SVC-") || r.starts_with("-A KUBE-SVL-"))
                && r.contains("-j KUBE-SEP-")
        };
        let chain_of = |r: &str| r.split_whitespace().nth(1).unwrap_or_default().to_string();
        let last_jump: std::collections::BTreeMap<String, usize> = nat
            .rules
            .iter()
            .enumerate()
            .filter(|(_, r)| is_endpoint_jump(r))
            .map(|(i, r)| (chain_of(r), i))
            .collect();
        let rules = std::mem::take(&mut nat.rules);
        nat.rules = rules
            .into_iter()
            .enumerate()
            .filter(|(i, r)| !is_endpoint_jump(r) || last_jump.get(&chain_of(r)) == Some(i))
            .map(|(_, r)| r)
            .collect();
    }
    for vs in &mut p.ipvs {
        vs.destinations.truncate(1);
    }
    // nftables: `numgen random mod N vmap { 0 : goto A , 1 : goto B }` keeps only A.
    if !p.nft.is_empty() {
        let lines = p
            .nft
            .lines
            .iter()
            .map(|l| match l.split_once(" numgen random mod ") {
                Some((head, rest)) => {
                    let first = rest
                        .split_once("vmap { ")
                        .and_then(|(_, m)| m.split([',', '}']).next())
                        .unwrap_or_default()
                        .trim();
                    format!("{head} numgen random mod 1 vmap {{ {first} }}")
                }
                None => l.clone(),
            })
            .collect();
        p.nft =
            kpct::programming::nft::NftScript::new(lines).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    }
    Ok(())
}

/// Gives each virtual server's first real server weight 2: a weighted order (wrr then visits
/// it twice a round) where kube-proxy gives every real server weight 1.
pub fn weigh_one_real_server(p: &mut Programming) -> anyhow::Result<()> {
    for vs in &mut p.ipvs {
        if let Some(first) = vs.destinations.first_mut() {
            first.weight = 2;
        }
    }
    Ok(())
}

/// Lists each virtual server's real servers in the reverse order: what a real kube-proxy does
/// on some runs (it adds them in Go map order), which no expectation may hold against it.
pub fn reverse_real_servers(p: &mut Programming) -> anyhow::Result<()> {
    for vs in &mut p.ipvs {
        vs.destinations.reverse();
    }
    Ok(())
}

/// Turns the ACCEPT of the healthCheckNodePort rules (iptables mode's "health check node port"
/// rule, IPVS mode's KUBE-HEALTH-CHECK-NODE-PORT match) into DROP: a proxier that blocks the
/// load balancer's health checks.
pub fn block_health_checks(p: &mut Programming) -> anyhow::Result<()> {
    let filter = p
        .iptables
        .get_mut(&Table::Filter)
        .expect("the proxier writes filter");
    let mut changed = 0;
    for rule in &mut filter.rules {
        let health_check =
            rule.contains("health check node port") || rule.contains("KUBE-HEALTH-CHECK-NODE-PORT");
        if health_check && rule.ends_with(" -j ACCEPT") {
            *rule = format!("{} -j DROP", rule.trim_end_matches(" -j ACCEPT"));
            changed += 1;
        }
    }
    anyhow::ensure!(changed > 0, "no health-check ACCEPT rule to break");
    Ok(())
}

/// Removes everything SCTP from a programming: the iptables rules matching `-p sctp` and the
/// SCTP virtual servers. A proxier that forgets SCTP Services.
pub fn drop_sctp(p: &mut Programming) -> anyhow::Result<()> {
    let mut dropped = 0;
    for table in p.iptables.values_mut() {
        let before = table.rules.len();
        table.rules.retain(|r| !r.contains("-p sctp"));
        dropped += before - table.rules.len();
    }
    let before = p.ipvs.len();
    p.ipvs.retain(|vs| {
        !matches!(
            vs.service.key,
            ipvs_genl::ServiceKey::Addr {
                protocol: ipvs_genl::Protocol::Sctp,
                ..
            }
        )
    });
    dropped += before - p.ipvs.len();
    anyhow::ensure!(dropped > 0, "nothing SCTP to drop");
    Ok(())
}

/// The `kpct` binary under test, run from the repository root with `args`.
pub fn kpct(args: &[&str]) -> std::process::Output {
    kpct_command(args).output().expect("kpct runs")
}

/// The `kpct` command under test, from the repository root, for a test that spawns it (e.g. to
/// signal it).
pub fn kpct_command(args: &[&str]) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_kpct"));
    command
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .args(args);
    // kpct starts with the signal dispositions a terminal gives, whatever the suite inherited:
    // a suite started in the background by a non-interactive shell (`cmd &`) has SIGINT
    // ignored, which exec passes on, and a Ctrl-C a test sends before kpct's own handler is in
    // place was then ignored (seen: `lab up` interrupted at once ran to completion).
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, || {
            use nix::sys::signal::{signal, SigHandler, Signal};
            for s in [
                Signal::SIGINT,
                Signal::SIGTERM,
                Signal::SIGHUP,
                Signal::SIGQUIT,
            ] {
                signal(s, SigHandler::SigDfl).map_err(std::io::Error::from)?;
            }
            Ok(())
        });
    }
    command
}

/// Skips the proxier's stale UDP conntrack cleanup (kube-proxy's `CleanStaleEntries`).
pub fn skip_conntrack_cleanup(p: &mut Programming) -> anyhow::Result<()> {
    p.conntrack_cleanup.clear();
    Ok(())
}

/// Leaves stale chains in place: drops every `-X CHAIN` line and the declaration that would
/// have flushed the chain.
pub fn keep_stale_chains(p: &mut Programming) -> anyhow::Result<()> {
    for rules in p.iptables.values_mut() {
        let deleted: Vec<String> = rules.deleted_chains().map(str::to_string).collect();
        rules.rules.retain(|r| !r.starts_with("-X "));
        rules.chains.retain(|c| !deleted.contains(&c.name));
    }
    // nftables: the chains flushed by the previous sync are never deleted.
    if !p.nft.is_empty() {
        let lines = p
            .nft
            .lines
            .iter()
            .filter(|l| !(l.starts_with("delete chain ") && l.contains('/')))
            .cloned()
            .collect();
        p.nft =
            kpct::programming::nft::NftScript::new(lines).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    }
    Ok(())
}

/// Leaves IPVS services the proxier no longer programs (no `cleanLegacyService`).
pub fn keep_stale_virtual_servers(p: &mut Programming) -> anyhow::Result<()> {
    p.ipvs_delete_others.clear();
    Ok(())
}

/// Deletes real servers at once instead of draining them (no graceful termination).
pub fn no_graceful_termination(p: &mut Programming) -> anyhow::Result<()> {
    for vs in &mut p.ipvs {
        vs.destinations.retain(|d| d.weight != 0);
    }
    Ok(())
}

/// Removes KUBE-FORWARD's drop of packets conntrack finds INVALID.
pub fn drop_invalid_rule(p: &mut Programming) -> anyhow::Result<()> {
    let filter = p
        .iptables
        .get_mut(&Table::Filter)
        .expect("the proxier writes filter");
    let before = filter.rules.len();
    filter
        .rules
        .retain(|r| !(r.starts_with("-A KUBE-FORWARD") && r.contains("--ctstate INVALID")));
    assert_eq!(
        before - 1,
        filter.rules.len(),
        "exactly the INVALID rule was removed"
    );
    Ok(())
}

/// iptables mode dropping packets conntrack finds INVALID whatever
/// `nf_conntrack_tcp_be_liberal` says: KUBE-FORWARD's drop written first, as with a strict
/// conntrack (the sysctl itself still set).
pub fn invalid_dropped_anyway(p: &mut Programming) -> anyhow::Result<()> {
    const RULE: &str = "-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP";
    let filter = p
        .iptables
        .get_mut(&Table::Filter)
        .expect("the proxier writes filter");
    if filter.rules.iter().any(|r| r == RULE) {
        return Ok(());
    }
    let at = filter
        .rules
        .iter()
        .position(|r| r.starts_with("-A KUBE-FORWARD "))
        .ok_or_else(|| anyhow::anyhow!("no KUBE-FORWARD rule"))?;
    filter.rules.insert(at, RULE.to_string());
    Ok(())
}

/// Rewrites an nftables programming's script line by line (`None` drops a line), then appends
/// `extra` lines.
fn rewrite_nft(
    p: &mut Programming,
    edit: impl Fn(&str) -> Option<String>,
    extra: &[&str],
) -> anyhow::Result<()> {
    let mut lines: Vec<String> = p.nft.lines.iter().filter_map(|l| edit(l)).collect();
    lines.extend(extra.iter().map(|l| l.to_string()));
    p.nft = kpct::programming::nft::NftScript::new(lines).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    Ok(())
}

/// nftables mode without `cluster-ips-check`'s reject of undefined ClusterIP ports.
pub fn no_cluster_ips_reject(p: &mut Programming) -> anyhow::Result<()> {
    rewrite_nft(
        p,
        |l| (!l.contains("ip daddr @cluster-ips reject")).then(|| l.to_string()),
        &[],
    )
}

/// nftables mode with iptables mode's drop of packets conntrack finds INVALID.
pub fn nft_drop_invalid(p: &mut Programming) -> anyhow::Result<()> {
    rewrite_nft(
        p,
        |l| Some(l.to_string()),
        &["add rule ip kube-proxy filter-forward ct state invalid drop"],
    )
}

/// nftables mode serving NodePorts on every local address, 127.0.0.1 included (as iptables mode
/// does with `route_localnet`).
pub fn nft_localhost_node_ports(p: &mut Programming) -> anyhow::Result<()> {
    p.sysctls
        .insert("net.ipv4.conf.all.route_localnet".into(), "1".into());
    rewrite_nft(
        p,
        |l| {
            Some(l.replace(
                "ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports",
                "fib daddr type local meta l4proto . th dport vmap @service-nodeports",
            ))
        },
        &[],
    )
}

/// A proxier whose IPv6 half programs nothing: the programming of an IPv6 state (one that
/// writes the `ip6` family) is emptied, as a proxier that ignores IPv6 Services would leave it.
pub fn ignore_ipv6(p: &mut Programming) -> anyhow::Result<()> {
    if p.nft.lines.iter().any(|l| l.contains(" ip6 kube-proxy")) {
        *p = Programming::default();
    }
    Ok(())
}

/// nftables mode without the IPv6 table's masquerade: `masquerade fully-random` is dropped from
/// `ip6 kube-proxy` only.
pub fn no_ipv6_masquerade(p: &mut Programming) -> anyhow::Result<()> {
    rewrite_nft(
        p,
        |l| {
            (!(l.contains(" ip6 kube-proxy ") && l.ends_with("masquerade fully-random")))
                .then(|| l.to_string())
        },
        &[],
    )
}

/// An IPv6 proxier that DNATs every connection of the endpoint `from` to `to` instead (as one
/// mixing up its endpoints would).
pub fn ipv6_endpoint_swapped(p: &mut Programming) -> anyhow::Result<()> {
    rewrite_nft(
        p,
        |l| {
            Some(if l.contains(" ip6 kube-proxy ") && l.contains("dnat to") {
                l.replace("[fd00:10:244:2::21]", "[fd00:10:244:2::20]")
            } else {
                l.to_string()
            })
        },
        &[],
    )
}

/// IPVS mode's IPv6 proxier without its kube-ipvs0 bindings: the IPv6 ClusterIPs are not local,
/// so IPVS (in LOCAL_IN) never sees their packets.
pub fn unbind_ipv6_service_addresses(p: &mut Programming) -> anyhow::Result<()> {
    if let Some(addresses) = &mut p.ipvs_addresses {
        addresses.retain(|a| a.is_ipv4());
    }
    Ok(())
}

/// IPVS mode's IPv6 proxier whose real servers point at port 9 (discard) instead of the
/// endpoint's port, as one that mixed up target ports for IPv6 would.
pub fn ipv6_real_servers_on_wrong_port(p: &mut Programming) -> anyhow::Result<()> {
    for vs in &mut p.ipvs {
        for d in vs.destinations.iter_mut().filter(|d| d.addr.is_ipv6()) {
            d.port = 9;
        }
    }
    Ok(())
}

/// IPVS mode leaving kube-ipvs0 alone once a family has no address to bind, instead of
/// unbinding the last one ("Remove superfluous addresses from the dummy device").
pub fn leave_kube_ipvs0_when_nothing_is_bound(p: &mut Programming) -> anyhow::Result<()> {
    if p.ipvs_addresses.as_ref().is_some_and(Vec::is_empty) {
        p.ipvs_addresses = None;
    }
    Ok(())
}

/// The kube-proxy `ci/real-proxiers.sh` builds, which the real-proxier tests run: missing is a
/// failure that says how to build it, never a skip.
pub fn kube_proxy_binary() -> std::path::PathBuf {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/real-proxiers/kube-proxy-v1.37.2");
    assert!(
        path.is_file(),
        "{} is missing: run `sudo ci/real-proxiers.sh` (ci/install-deps.sh runs it)",
        path.display()
    );
    path
}

/// A scenario of the library, by file name.
pub fn library_scenario(file: &str) -> kpct::Scenario {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios")
        .join(file);
    kpct::load(&path).unwrap_or_else(|e| panic!("{e}"))
}
