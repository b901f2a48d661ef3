//! ipvsadm's text formats: `-Sn` (save/restore rules) and `-Ln` (listing), printed and parsed.
//!
//! Byte-identical output is the point, so the submodules follow ipvsadm 1.31 closely: its
//! sort (glibc's merge sort with ipvsadm's wrapping comparators), glibc's `inet_ntop`, and its
//! printf formats.

mod addr;
mod list;
mod parse;
mod save;
mod sort;

pub use list::format_list;
pub use parse::{parse_save, ParseError};
pub use save::format_save;

use crate::types::{ForwardMethod, Protocol, Service, ServiceFlags, ServiceKey};
use addr::addrport;

/// ipvsadm's scheduler-flag names (`print_sched_flags`), comma-joined.
fn sched_flags(svc: &Service) -> String {
    let f = svc.flags;
    let names: &[(u32, &str)] = match svc.scheduler.as_str() {
        "sh" => &[
            (ServiceFlags::SCHED1, "sh-fallback"),
            (ServiceFlags::SCHED2, "sh-port"),
        ],
        "mh" => &[
            (ServiceFlags::SCHED1, "mh-fallback"),
            (ServiceFlags::SCHED2, "mh-port"),
        ],
        _ => &[
            (ServiceFlags::SCHED1, "flag-1"),
            (ServiceFlags::SCHED2, "flag-2"),
            (ServiceFlags::SCHED3, "flag-3"),
        ],
    };
    names
        .iter()
        .filter(|(bit, _)| f.contains(*bit))
        .map(|(_, name)| *name)
        .collect::<Vec<_>>()
        .join(",")
}

fn has_sched_flags(svc: &Service) -> bool {
    svc.flags.0 & (ServiceFlags::SCHED1 | ServiceFlags::SCHED2 | ServiceFlags::SCHED3) != 0
}

/// The persistence mask as ipvsadm prints it, or `None` when it is the full-address default.
fn netmask_text(svc: &Service) -> Option<String> {
    if let (Some(mask), false) = (svc.odd_netmask, svc.key.is_ipv6()) {
        return Some(mask.to_string());
    }
    if svc.key.is_ipv6() {
        (svc.netmask_prefix != 128).then(|| svc.netmask_prefix.to_string())
    } else {
        (svc.netmask_prefix < 32).then(|| {
            let prefix = u32::from(svc.netmask_prefix);
            let mask = if prefix == 0 {
                0
            } else {
                u32::MAX << (32 - prefix)
            };
            std::net::Ipv4Addr::from(mask).to_string()
        })
    }
}

/// `printf("%s", NULL)` in glibc, which ipvsadm reaches for forwarding methods it has no name
/// for.
const GLIBC_NULL: &str = "(null)";

fn fwd_switch(fwd: ForwardMethod) -> &'static str {
    match fwd {
        ForwardMethod::Masq => "-m",
        ForwardMethod::Tunnel => "-i",
        ForwardMethod::Local | ForwardMethod::Route => "-g",
        ForwardMethod::Bypass => GLIBC_NULL,
    }
}

fn fwd_name(fwd: ForwardMethod) -> &'static str {
    match fwd {
        ForwardMethod::Masq => "Masq",
        ForwardMethod::Local => "Local",
        ForwardMethod::Tunnel => "Tunnel",
        ForwardMethod::Route => "Route",
        ForwardMethod::Bypass => GLIBC_NULL,
    }
}

/// The service as `-t 1.2.3.4:80` / `-f 5 -6` (rule form).
fn rule_service_name(key: &ServiceKey) -> String {
    match key {
        ServiceKey::FwMark { ipv6, mark } => {
            // ipvsadm prints the mark with %d.
            let mark = *mark as i32;
            if *ipv6 {
                format!("-f {mark} -6")
            } else {
                format!("-f {mark}")
            }
        }
        ServiceKey::Addr {
            protocol,
            addr,
            port,
        } => {
            let opt = match protocol {
                Protocol::Tcp => "-t",
                Protocol::Udp => "-u",
                Protocol::Sctp => "--sctp-service",
            };
            format!("{opt} {}", addrport(addr, *port))
        }
    }
}

#[cfg(test)]
mod tests;
