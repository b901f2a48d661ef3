//! Real servers at weight 0 in an IPVS table, as graceful termination leaves them, each kind in
//! `ipvsadm -S` form (`-a` lines): those still holding connections, those held only by
//! connections that already ended, and those drained.
//!
//! kube-proxy sets a real server that a sync removes to weight 0 instead of deleting it while
//! IPVS counts connections to it, and deletes it once they are gone (`GracefulDeleteRS`,
//! `deleteRsFunc`, `tryDeleteRs`, pkg/proxy/ipvs/graceful_termination.go); only for protocols
//! that need it (`IsRsGracefulTerminationNeeded`, pkg/util/ipvs: everything but UDP and SCTP).

use crate::ipvs_connections::Connection;
use crate::programming::graceful_termination_needed;
use ipvs_genl::{DestinationState, ServiceKey, ServiceState, TableEntry};
use std::net::SocketAddr;

/// Real servers at weight 0 that still hold connections, of any protocol.
pub fn draining_lines(table: &[TableEntry]) -> Vec<String> {
    lines_where(table, |_, d| d.active_conns + d.inactive_conns > 0)
}

/// Real servers at weight 0 that no live connection holds, where graceful termination applies:
/// kube-proxy deletes each once IPVS counts no connection to it. The connections that may still
/// count are ones that ended (half-open or closed, lingering in `conns`, IPVS's connection
/// table); an established one is a flow a scenario keeps on purpose, and a real server it holds
/// is not listed.
pub fn awaiting_deletion(table: &[TableEntry], conns: &[Connection]) -> Vec<String> {
    lines_where(table, |svc, d| awaits_deletion(svc, d, conns))
}

/// [`awaiting_deletion`]'s real servers to which IPVS still counts connections.
pub fn held_by_ended_connections(table: &[TableEntry], conns: &[Connection]) -> Vec<String> {
    lines_where(table, |svc, d| {
        awaits_deletion(svc, d, conns) && d.active_conns + d.inactive_conns > 0
    })
}

fn awaits_deletion(svc: &ServiceState, dest: &DestinationState, conns: &[Connection]) -> bool {
    graceful_termination_needed(&svc.service.key) && !held_by_established(svc, dest, conns)
}

/// Whether an established connection of `conns` goes to `dest` through `svc`. (IPVS counts a
/// half-open connection as active too, so the counters cannot tell.)
fn held_by_established(svc: &ServiceState, dest: &DestinationState, conns: &[Connection]) -> bool {
    let real_server = SocketAddr::new(dest.destination.addr, dest.destination.port);
    conns.iter().any(|c| {
        c.is_established()
            && c.real_server == real_server
            && match &svc.service.key {
                ServiceKey::Addr {
                    protocol,
                    addr,
                    port,
                } => {
                    c.protocol.eq_ignore_ascii_case(protocol.name())
                        && c.virtual_addr == SocketAddr::new(*addr, *port)
                }
                // The table shows the address a marked packet went to, not the mark.
                ServiceKey::FwMark { .. } => true,
            }
    })
}

/// Real servers at weight 0 that hold no connection any more, where graceful termination
/// applies: what kube-proxy's loop deletes next.
pub fn drained_lines(table: &[TableEntry]) -> Vec<String> {
    lines_where(table, |svc, d| {
        graceful_termination_needed(&svc.service.key) && d.active_conns + d.inactive_conns == 0
    })
}

fn lines_where(
    table: &[TableEntry],
    keep: impl Fn(&ServiceState, &DestinationState) -> bool,
) -> Vec<String> {
    let kept: Vec<TableEntry> = table
        .iter()
        .map(|(svc, dests)| {
            let kept = dests
                .iter()
                .filter(|d| d.destination.weight == 0 && keep(svc, d))
                .cloned()
                .collect();
            (svc.clone(), kept)
        })
        .collect();
    ipvs_genl::format_save(&kept)
        .lines()
        .filter(|l| l.starts_with("-a "))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipvs_genl::Protocol;
    use ipvs_genl::{Destination, ForwardMethod, Service, Stats};

    fn entry(protocol: Protocol, dests: &[(&str, i32, u32, u32)]) -> TableEntry {
        let key = ServiceKey::Addr {
            protocol,
            addr: "10.96.0.10".parse().unwrap(),
            port: 80,
        };
        let svc = ServiceState {
            service: Service::new(key, "rr"),
            stats: Stats::default(),
        };
        let dests = dests
            .iter()
            .map(|(addr, weight, active, inactive)| DestinationState {
                destination: Destination {
                    weight: *weight,
                    forward: ForwardMethod::Masq,
                    ..Destination::new(addr.parse().unwrap(), 8080)
                },
                active_conns: *active,
                inactive_conns: *inactive,
                persistent_conns: 0,
                stats: Stats::default(),
            })
            .collect();
        (svc, dests)
    }

    fn table() -> Vec<TableEntry> {
        vec![
            entry(
                Protocol::Tcp,
                &[
                    // Held by a SYN_RECV or TIME_WAIT entry.
                    ("10.244.1.21", 0, 0, 1),
                    // Held by a kept, established flow (and an ended one).
                    ("10.244.1.22", 0, 1, 2),
                    // Held by a half-open connection, which IPVS counts as active.
                    ("10.244.1.27", 0, 1, 0),
                    // Drained.
                    ("10.244.1.23", 0, 0, 0),
                    // Serving.
                    ("10.244.1.24", 1, 0, 3),
                ],
            ),
            // UDP real servers are deleted at once; a weight of 0 there is the proxier's own.
            entry(
                Protocol::Udp,
                &[("10.244.1.25", 0, 0, 1), ("10.244.1.26", 0, 0, 0)],
            ),
        ]
    }

    fn line(proto: &str, addr: &str) -> String {
        format!("-a -{proto} 10.96.0.10:80 -r {addr}:8080 -m -w 0")
    }

    fn conn(real_server: &str, state: &str) -> Connection {
        Connection {
            protocol: "TCP".into(),
            client: "10.244.1.10:20000".parse().unwrap(),
            virtual_addr: "10.96.0.10:80".parse().unwrap(),
            real_server: format!("{real_server}:8080").parse().unwrap(),
            state: state.into(),
        }
    }

    #[test]
    fn each_kind_of_real_server_at_weight_zero() {
        let table = table();
        let conns = [
            conn("10.244.1.21", "TIME_WAIT"),
            conn("10.244.1.22", "ESTABLISHED"),
            conn("10.244.1.22", "SYN_RECV"),
            conn("10.244.1.27", "SYN_RECV"),
        ];
        assert_eq!(
            held_by_ended_connections(&table, &conns),
            [line("t", "10.244.1.21"), line("t", "10.244.1.27")]
        );
        assert_eq!(
            awaiting_deletion(&table, &conns),
            [
                line("t", "10.244.1.21"),
                line("t", "10.244.1.23"),
                line("t", "10.244.1.27")
            ]
        );
        assert_eq!(drained_lines(&table), [line("t", "10.244.1.23")]);
        assert_eq!(
            draining_lines(&table),
            [
                line("t", "10.244.1.21"),
                line("t", "10.244.1.22"),
                line("t", "10.244.1.27"),
                line("u", "10.244.1.25")
            ]
        );
    }
}
