//! Real servers held at weight 0 by connections that already ended: waited out before a step is
//! observed, so that what a step shows does not depend on how long the run took to get there.
//!
//! kube-proxy's IPVS mode keeps a real server that a sync removes at weight 0 while IPVS still
//! counts connections to it (`GracefulDeleteRS`, `deleteRsFunc`:
//! `rs.ActiveConn+rs.InactiveConn != 0`, pkg/proxy/ipvs/graceful_termination.go), and deletes it
//! once they are gone (`tryDeleteRs`, every `rsCheckDeleteInterval`, one minute). A probe's
//! connection outlives the probe in IPVS's connection table: a crafted SYN whose SYN-ACK the
//! client's kernel resets stays `SYN_RECV` for 60 s (IPVS ignores a client's RST in that state),
//! a socket closed with FINs stays `TIME_WAIT` for 120 s. Both timeouts are fixed in the kernel
//! (`tcp_timeouts`, net/netfilter/ipvs/ip_vs_proto_tcp.c; `ipvsadm --set` reaches neither), and
//! nothing flushes that table short of deleting the namespace. So a step that removed an
//! endpoint an earlier probe had reached kept it at weight 0 if the step came within 60 s of
//! the probe, and deleted it otherwise: in the emulated VM `transition-many-updates` reached
//! its step `scale-web-to-one` 58 s after its first probe, and in one bench pass of three later,
//! so that pass counted one real server where the others counted two, and its last probe's
//! round robin started at the other endpoint.
//!
//! So when a step's sync leaves such real servers, kpct waits until IPVS counts no connection
//! to them (the kernel offers no event for that: the counts are read every [`POLL`]), then lets
//! the proxier see it ([`RunProgrammer::drained`]: for a built-in, one more sync of the same
//! state, which is what kube-proxy's loop would do). A real server that an established
//! connection holds is left alone: that is a flow the scenario keeps on purpose (`keep:`), and
//! it stays at weight 0 as the scenario means it to. (IPVS counts a half-open connection as
//! active too, so the connection table, not the counters, tells which is which.) The step is
//! then observed as if it had come after every lingering entry expired, whatever the machine's
//! speed.

use crate::draining::{awaiting_deletion, held_by_ended_connections};
use crate::ipvs_connections;
use crate::ipvs_connections::ipvs_table;
use crate::topology::{NodeNs, Topology};
use anyhow::{bail, Context, Result};
use std::time::{Duration, Instant};

#[cfg(doc)]
use crate::drivers::programmer::RunProgrammer;

/// How often the connection counts are read while waiting.
const POLL: Duration = Duration::from_millis(250);

/// Beyond the longest timeout of an inactive TCP state: the kernel's expiry timers fire late
/// under emulation.
const SLACK: Duration = Duration::from_secs(15);

/// `TIME_WAIT`, the longest fixed timeout of an inactive TCP state in IPVS.
const TIME_WAIT: Duration = Duration::from_secs(120);

/// The indices of the `topo` nodes holding real servers at weight 0 that no live connection
/// holds, once IPVS counts no connection to them any more; empty (and nothing waited for) when
/// no node holds one.
pub async fn wait_out_ended_connections(topo: &Topology) -> Result<Vec<usize>> {
    let mut held = Vec::new();
    for (k, node) in topo.nodes().iter().enumerate() {
        let table = ipvs_table(node)?;
        if !awaiting_deletion(&table, &ipvs_connections::read(&node.netns)?).is_empty() {
            held.push(k);
        }
    }
    for &k in &held {
        wait_on(&topo.nodes()[k]).await?;
    }
    Ok(held)
}

/// Before a step lets real time pass (`waitSeconds`), waits until no node's IPVS holds a TCP
/// connection that an earlier probe left behind (see [`ipvs_connections::Connection::lingers`]):
/// such a connection keeps its ClientIP persistence template alive however short the
/// template's own timeout (`ip_vs_conn_expire` re-arms a template while connections it
/// scheduled remain). Left in place, whether the template outlived the wait depended on how
/// long the run took to reach it — 60 s of SYN_RECV against a 20 s wait, with the emulated VM
/// sometimes slower than the difference. Waited out first, the wait then runs from a table
/// holding only established flows and templates, as on a node no probe ever touched.
pub async fn wait_out_probe_connections(topo: &Topology) -> Result<()> {
    for node in topo.nodes() {
        wait_until_none(node, "holds probe connections", || {
            Ok(ipvs_connections::read(&node.netns)?
                .into_iter()
                .filter(ipvs_connections::Connection::lingers)
                .map(|c| format!("{} -> {} ({})", c.client, c.real_server, c.state))
                .collect())
        })
        .await?;
    }
    Ok(())
}

async fn wait_on(node: &NodeNs) -> Result<()> {
    wait_until_none(
        node,
        "counts ended connections to real servers at weight 0",
        || {
            let conns = ipvs_connections::read(&node.netns)?;
            Ok(held_by_ended_connections(&ipvs_table(node)?, &conns))
        },
    )
    .await
}

/// Reads `left` every [`POLL`] until it lists nothing, for at most the longest timeout of an
/// inactive TCP connection in `node`'s IPVS (plus [`SLACK`]); past that, an error saying what
/// IPVS still `does` and what is left. Nothing is asked of IPVS when `left` is empty at once
/// (a kernel without IP_VS lists nothing and has no timeouts to read).
async fn wait_until_none(
    node: &NodeNs,
    does: &str,
    left: impl Fn() -> Result<Vec<String>>,
) -> Result<()> {
    if left()?.is_empty() {
        return Ok(());
    }
    let deadline = Instant::now() + longest_inactive_timeout(node)? + SLACK;
    loop {
        let lines = left()?;
        if lines.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "node {}: IPVS still {does} after their longest timeout: {}",
                node.name,
                lines.join("; ")
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The longest an inactive TCP connection lasts in `node`'s IPVS: `TIME_WAIT`, or `FIN_WAIT`
/// if a proxier set that longer (`ipvsadm --set`'s tcpfin, kube-proxy's `tcpFinTimeout`).
fn longest_inactive_timeout(node: &NodeNs) -> Result<Duration> {
    let mut handle = ipvs_genl::IpvsHandle::in_netns(node.netns.path())
        .with_context(|| format!("opening IPVS on node {}", node.name))?;
    let timeouts = handle
        .timeouts()
        .with_context(|| format!("reading the IPVS timeouts of node {}", node.name))?;
    Ok(TIME_WAIT.max(Duration::from_secs(u64::from(timeouts.tcp_fin))))
}
