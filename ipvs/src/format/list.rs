//! `ipvsadm -Ln` output.

use std::fmt::Write;

use super::addr::addrport;
use super::sort::ipvsadm_order;
use super::{fwd_name, has_sched_flags, netmask_text, sched_flags};
use crate::types::{DestinationState, Info, ServiceFlags, ServiceKey, ServiceState};

/// The service column: `TCP  1.2.3.4:80`, `FWM  5 IPv6`.
fn list_service_name(key: &ServiceKey) -> String {
    match key {
        ServiceKey::FwMark { ipv6, mark } => {
            let mark = *mark as i32;
            if *ipv6 {
                format!("FWM  {mark} IPv6")
            } else {
                format!("FWM  {mark}")
            }
        }
        ServiceKey::Addr {
            protocol,
            addr,
            port,
        } => {
            let mut s = format!("{:<4} {}", protocol.name(), addrport(addr, *port));
            // ipvsadm cuts IPv4 names at 33 bytes (`svc_name[33] = '\0'`).
            if addr.is_ipv4() {
                s.truncate(33);
            }
            s
        }
    }
}

/// Renders a table exactly as `ipvsadm -Ln` prints it, given the kernel's info and the
/// services and destinations in the kernel's dump order.
pub fn format_list(info: &Info, table: &[(ServiceState, Vec<DestinationState>)]) -> String {
    let (major, minor, patch) = info.version_triple();
    let mut out = format!(
        "IP Virtual Server version {major}.{minor}.{patch} (size={})\n",
        info.conn_table_size as i32
    );
    out.push_str("Prot LocalAddress:Port Scheduler Flags\n");
    out.push_str("  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n");
    for (svc, dests) in ipvsadm_order(table) {
        let svc = &svc.service;
        let _ = write!(out, "{} {}", list_service_name(&svc.key), svc.scheduler);
        if has_sched_flags(svc) {
            let _ = write!(out, " ({})", sched_flags(svc));
        }
        if svc.flags.contains(ServiceFlags::PERSISTENT) {
            let _ = write!(out, " persistent {}", svc.timeout);
            if let Some(mask) = netmask_text(svc) {
                let _ = write!(out, " mask {mask}");
            }
            if let Some(pe) = svc.pe_name.as_deref().filter(|pe| !pe.is_empty()) {
                let _ = write!(out, " pe {pe}");
            }
        }
        if svc.flags.contains(ServiceFlags::ONEPACKET) {
            out.push_str(" ops");
        }
        out.push('\n');
        for d in dests {
            let mut name = addrport(&d.destination.addr, d.destination.port);
            if d.destination.addr.is_ipv4() {
                name.truncate(28);
            }
            let _ = writeln!(
                out,
                "  -> {:<28} {:<7} {:<6} {:<10} {:<10}",
                name,
                fwd_name(d.destination.forward),
                d.destination.weight,
                d.active_conns,
                d.inactive_conns
            );
        }
    }
    out
}
