//! Graceful termination of real servers (pkg/proxy/ipvs/graceful_termination.go), folded into
//! the sync: a real server the new state drops is deleted at once if it holds no connection or
//! its protocol needs no graceful termination (UDP, SCTP: "existing connections will be deleted
//! on the next packet because sysctlExpireNoDestConn=1"); otherwise it stays at weight 0, so no
//! new connection picks it while established ones finish, until a later sync finds it drained.
//!
//! Deviation: kube-proxy checks its termination list every `rsCheckDeleteInterval` (1 min) in a
//! goroutine; the model checks at each sync, the only moments a scenario observes.

use crate::programming::graceful_termination_needed;
use crate::programming::VirtualServer;
use ipvs_genl::TableEntry;

/// Keeps, at weight 0, every real server of `kernel` that `servers` no longer lists but that
/// still holds connections (`ActiveConn + InactiveConn != 0`, `deleteRsFunc`). A listed real
/// server comes back at its full weight (`MoveRSOutofGracefulDeleteList`, then
/// `AddRealServer`).
pub(super) fn keep_draining(servers: &mut [VirtualServer], kernel: &[TableEntry]) {
    for vs in servers.iter_mut() {
        let Some((_, dests)) = kernel.iter().find(|(s, _)| s.service.key == vs.service.key) else {
            continue;
        };
        if !graceful_termination_needed(&vs.service.key) {
            continue;
        }
        for d in dests {
            let listed = vs
                .destinations
                .iter()
                .any(|x| x.key() == d.destination.key());
            if listed || d.active_conns + d.inactive_conns == 0 {
                continue;
            }
            let mut draining = d.destination.clone();
            draining.weight = 0;
            vs.destinations.push(draining);
        }
        vs.destinations.sort_by_key(|d| d.key());
    }
}
