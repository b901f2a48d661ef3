//! `ipvsadm -Sn` output.

use std::fmt::Write;

use super::addr::addrport;
use super::sort::ipvsadm_order;
use super::{fwd_switch, has_sched_flags, netmask_text, rule_service_name, sched_flags};
use crate::types::{DestinationState, ForwardMethod, ServiceFlags, ServiceState, TunnelType};

/// ipvsadm's `tun_flags_opts[]`, indexed by the tunnel flags value.
fn tun_flags_opt(flags: u16) -> &'static str {
    match flags {
        0 => "--tun-nocsum",
        1 => "--tun-csum",
        2 => "--tun-remcsum",
        // Out of ipvsadm's table (undefined behaviour there); the kernel does not produce it.
        _ => "",
    }
}

/// Renders a table exactly as `ipvsadm -Sn` prints it (including its sort order), given the
/// services and destinations in the kernel's dump order, e.g. from [`crate::IpvsHandle::table`].
pub fn format_save(table: &[(ServiceState, Vec<DestinationState>)]) -> String {
    let mut out = String::new();
    for (svc, dests) in ipvsadm_order(table) {
        let svc = &svc.service;
        let name = rule_service_name(&svc.key);
        let _ = write!(out, "-A {name} -s {}", svc.scheduler);
        if svc.flags.contains(ServiceFlags::PERSISTENT) {
            let _ = write!(out, " -p {}", svc.timeout);
            if let Some(mask) = netmask_text(svc) {
                let _ = write!(out, " -M {mask}");
            }
        }
        if let Some(pe) = svc.pe_name.as_deref().filter(|pe| !pe.is_empty()) {
            let _ = write!(out, " --pe {pe}");
        }
        if svc.flags.contains(ServiceFlags::ONEPACKET) {
            out.push_str(" -o");
        }
        if has_sched_flags(svc) {
            let _ = write!(out, " -b {}", sched_flags(svc));
        }
        out.push('\n');
        for d in dests {
            let d = &d.destination;
            let _ = write!(
                out,
                "-a {name} -r {} {} -w {}",
                addrport(&d.addr, d.port),
                fwd_switch(d.forward),
                d.weight
            );
            if d.forward == ForwardMethod::Tunnel {
                match d.tunnel_type {
                    TunnelType::IpIp => out.push_str(" --tun-type ipip"),
                    TunnelType::Gue => {
                        let _ = write!(
                            out,
                            " --tun-type gue --tun-port {} {}",
                            d.tunnel_port,
                            tun_flags_opt(d.tunnel_flags)
                        );
                    }
                    TunnelType::Gre => {
                        let _ = write!(out, " --tun-type gre {}", tun_flags_opt(d.tunnel_flags));
                    }
                }
            }
            out.push('\n');
        }
    }
    out
}
