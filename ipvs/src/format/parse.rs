//! Reading `ipvsadm -Sn` output back into services and destinations.
//!
//! Accepts what `ipvsadm -R` accepts for `-A`/`-a` lines (long and short options, `--opt=value`,
//! blank lines and `#` comments) and applies the same defaults and checks, so a parsed table
//! creates the same kernel state as `ipvsadm -R` would.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::types::{
    Destination, ForwardMethod, Protocol, Service, ServiceFlags, ServiceKey, TunnelType,
};

/// ipvsadm's `MAX_TIMEOUT` for `-p`.
const MAX_PERSISTENT_TIMEOUT: u32 = 86400 * 31;
/// ipvsadm's persistent timeout when `-p` has no value.
const DEFAULT_PERSISTENT_TIMEOUT: u32 = 300;
const DEFAULT_SCHEDULER: &str = "wlc";

/// A line of save output that could not be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}: `{text}`")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub message: String,
    /// The offending line.
    pub text: String,
}

enum Command {
    AddService,
    AddServer,
}

/// The options of one line, as ipvsadm's option parser collects them.
#[derive(Default)]
struct Options {
    service: Option<ServiceKey>,
    scheduler: Option<String>,
    persistent: Option<u32>,
    netmask: Option<String>,
    pe: Option<String>,
    onepacket: bool,
    sched_flags: Option<String>,
    server: Option<(IpAddr, Option<u16>)>,
    forward: Option<ForwardMethod>,
    weight: Option<i32>,
    u_threshold: Option<u32>,
    l_threshold: Option<u32>,
    tun_type: Option<TunnelType>,
    tun_port: Option<u16>,
    tun_flags: Vec<(&'static str, u16)>,
}

fn number<T: std::str::FromStr + PartialOrd>(
    s: &str,
    min: T,
    max: T,
    what: &str,
) -> Result<T, String> {
    s.parse::<T>()
        .ok()
        .filter(|n| *n >= min && *n <= max)
        .ok_or_else(|| format!("illegal {what} `{s}`"))
}

/// `parse_service`: `1.2.3.4[:port]`, `[v6][:port]` or a bare IPv6 address.
fn parse_endpoint(s: &str) -> Result<(IpAddr, Option<u16>), String> {
    let bad = || format!("illegal address[:port] `{s}`");
    let port = |p: &str| number::<u16>(p, 0, 65535, "port");
    if let Some(rest) = s.strip_prefix('[') {
        let (addr, tail) = rest.split_once(']').ok_or_else(bad)?;
        let addr: Ipv6Addr = addr.parse().map_err(|_| bad())?;
        let port = match tail {
            "" => None,
            t => Some(port(t.strip_prefix(':').ok_or_else(bad)?)?),
        };
        return Ok((IpAddr::V6(addr), port));
    }
    if let Ok(a) = s.parse::<Ipv6Addr>() {
        return Ok((IpAddr::V6(a), None));
    }
    match s.rsplit_once(':') {
        Some((addr, p)) => Ok((
            IpAddr::V4(addr.parse::<Ipv4Addr>().map_err(|_| bad())?),
            Some(port(p)?),
        )),
        None => Ok((IpAddr::V4(s.parse::<Ipv4Addr>().map_err(|_| bad())?), None)),
    }
}

fn parse_line(tokens: &[&str]) -> Result<(Command, Options), String> {
    let mut opts = Options::default();
    let mut command = None;
    let mut i = 0;
    while i < tokens.len() {
        let tok = tokens[i];
        i += 1;
        // Long options may carry their value after '='.
        let (name, inline) = match tok.strip_prefix("--") {
            Some(long) => match long.split_once('=') {
                Some((n, v)) => (format!("--{n}"), Some(v.to_string())),
                None => (tok.to_string(), None),
            },
            None => (tok.to_string(), None),
        };
        let mut value = |what: &str| -> Result<String, String> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            let v = tokens
                .get(i)
                .ok_or_else(|| format!("option `{tok}` needs {what}"))?;
            i += 1;
            Ok((*v).to_string())
        };
        match name.as_str() {
            "-A" | "--add-service" => command = Some(Command::AddService),
            "-a" | "--add-server" => command = Some(Command::AddServer),
            "-t" | "--tcp-service" | "-u" | "--udp-service" | "--sctp-service" => {
                let protocol = match name.as_str() {
                    "-t" | "--tcp-service" => Protocol::Tcp,
                    "-u" | "--udp-service" => Protocol::Udp,
                    _ => Protocol::Sctp,
                };
                let (addr, port) = parse_endpoint(&value("an address")?)?;
                opts.service = Some(ServiceKey::Addr {
                    protocol,
                    addr,
                    port: port.unwrap_or(0),
                });
            }
            "-f" | "--fwmark-service" => {
                let v = value("a mark")?;
                let mark = number::<u32>(&v, 1, u32::MAX, "fwmark value")?;
                opts.service = Some(ServiceKey::FwMark { ipv6: false, mark });
            }
            "-6" | "--ipv6" => match &mut opts.service {
                Some(ServiceKey::FwMark { ipv6, .. }) => *ipv6 = true,
                _ => return Err("-6 used before -f".into()),
            },
            "-s" | "--scheduler" => opts.scheduler = Some(value("a scheduler")?),
            "-p" | "--persistent" => {
                // popt's optional argument: taken only when the next word is not an option.
                let v = match &inline {
                    Some(v) => Some(v.clone()),
                    None => match tokens.get(i) {
                        Some(next) if !next.starts_with('-') => {
                            i += 1;
                            Some((*next).to_string())
                        }
                        _ => None,
                    },
                };
                opts.persistent = Some(match v {
                    Some(v) => number::<u32>(&v, 1, MAX_PERSISTENT_TIMEOUT, "timeout value")?,
                    None => DEFAULT_PERSISTENT_TIMEOUT,
                });
            }
            "-M" | "--netmask" => opts.netmask = Some(value("a netmask")?),
            "--pe" => opts.pe = Some(value("a persistence engine")?),
            "-o" | "--ops" => opts.onepacket = true,
            "-b" | "--sched-flags" => opts.sched_flags = Some(value("scheduler flags")?),
            "-r" | "--real-server" => opts.server = Some(parse_endpoint(&value("an address")?)?),
            "-g" | "--gatewaying" => opts.forward = Some(ForwardMethod::Route),
            "-i" | "--ipip" => opts.forward = Some(ForwardMethod::Tunnel),
            "-m" | "--masquerading" => opts.forward = Some(ForwardMethod::Masq),
            "-w" | "--weight" => {
                opts.weight = Some(number::<i32>(&value("a weight")?, 0, 65535, "weight")?)
            }
            "-x" | "--u-threshold" => {
                opts.u_threshold = Some(number::<u32>(
                    &value("a threshold")?,
                    0,
                    i32::MAX as u32,
                    "u_threshold",
                )?)
            }
            "-y" | "--l-threshold" => {
                opts.l_threshold = Some(number::<u32>(
                    &value("a threshold")?,
                    0,
                    i32::MAX as u32,
                    "l_threshold",
                )?)
            }
            "--tun-type" => {
                opts.tun_type = Some(match value("a tunnel type")?.as_str() {
                    "ipip" => TunnelType::IpIp,
                    "gue" => TunnelType::Gue,
                    "gre" => TunnelType::Gre,
                    other => return Err(format!("illegal tunnel type `{other}`")),
                })
            }
            "--tun-port" => {
                opts.tun_port = Some(number::<u16>(&value("a port")?, 1, 65535, "tunnel port")?)
            }
            "--tun-nocsum" => opts.tun_flags.push(("tun-nocsum", 0)),
            "--tun-csum" => opts.tun_flags.push(("tun-csum", 1)),
            "--tun-remcsum" => opts.tun_flags.push(("tun-remcsum", 2)),
            "-n" | "--numeric" => {}
            other => return Err(format!("unknown or unsupported option `{other}`")),
        }
    }
    let command = command.ok_or("line is neither -A (add service) nor -a (add server)")?;
    Ok((command, opts))
}

fn sched_flag_bits(scheduler: &str, arg: &str) -> Result<u32, String> {
    let mut bits = 0;
    for flag in arg.split(',').filter(|f| !f.is_empty()) {
        let (bit, needs) = match flag {
            "flag-1" => (ServiceFlags::SCHED1, None),
            "flag-2" => (ServiceFlags::SCHED2, None),
            "flag-3" => (ServiceFlags::SCHED3, None),
            "sh-fallback" => (ServiceFlags::SCHED1, Some("sh")),
            "sh-port" => (ServiceFlags::SCHED2, Some("sh")),
            "mh-fallback" => (ServiceFlags::SCHED1, Some("mh")),
            "mh-port" => (ServiceFlags::SCHED2, Some("mh")),
            other => return Err(format!("invalid scheduler flag `{other}`")),
        };
        if needs.is_some_and(|s| s != scheduler) {
            return Err(format!("incompatible scheduler flag `{flag}`"));
        }
        bits |= bit;
    }
    Ok(bits)
}

/// A prefix length, or an IPv4 mask that is none (the kernel takes any).
fn netmask_of(ipv6: bool, text: &str) -> Result<(u8, Option<Ipv4Addr>), String> {
    if ipv6 {
        return Ok((number::<u8>(text, 1, 128, "ipv6 netmask")?, None));
    }
    let mask: Ipv4Addr = text
        .parse()
        .map_err(|_| format!("illegal persistent mask `{text}`"))?;
    let m = u32::from(mask);
    if m.leading_ones() + m.trailing_zeros() < 32 {
        return Ok((0, Some(mask)));
    }
    Ok((m.leading_ones() as u8, None))
}

fn build_service(opts: &Options) -> Result<Service, String> {
    let key = opts
        .service
        .ok_or("no service given (-t/-u/--sctp-service/-f)")?;
    if opts.server.is_some() || opts.forward.is_some() || opts.weight.is_some() {
        return Err("real-server options on a service line".into());
    }
    let scheduler = opts
        .scheduler
        .clone()
        .unwrap_or_else(|| DEFAULT_SCHEDULER.to_string());
    let mut flags = 0;
    let mut timeout = 0;
    if let Some(t) = opts.persistent {
        flags |= ServiceFlags::PERSISTENT;
        timeout = t;
    }
    if opts.onepacket {
        flags |= ServiceFlags::ONEPACKET;
    }
    if let Some(arg) = &opts.sched_flags {
        flags |= sched_flag_bits(&scheduler, arg)?;
    }
    if let ServiceKey::Addr { protocol, port, .. } = key {
        if port == 0 && flags & ServiceFlags::PERSISTENT == 0 {
            return Err("zero port specified for non-persistent service".into());
        }
        if opts.onepacket && protocol != Protocol::Udp {
            return Err("one-packet scheduling is only for UDP virtual services".into());
        }
    }
    let (netmask_prefix, odd_netmask) = match &opts.netmask {
        Some(text) => netmask_of(key.is_ipv6(), text)?,
        None => (key.full_prefix(), None),
    };
    Ok(Service {
        key,
        scheduler,
        flags: ServiceFlags(flags),
        timeout,
        netmask_prefix,
        odd_netmask,
        pe_name: opts.pe.clone(),
    })
}

fn build_destination(opts: &Options) -> Result<(ServiceKey, Destination), String> {
    let key = opts
        .service
        .ok_or("no service given (-t/-u/--sctp-service/-f)")?;
    let (addr, port) = opts.server.ok_or("no real server given (-r)")?;
    let forward = opts.forward.unwrap_or(ForwardMethod::Route);
    let service_port = match key {
        ServiceKey::Addr { port, .. } => Some(port),
        ServiceKey::FwMark { .. } => None,
    };
    // ipvsadm: the port defaults to the service's, and DR/tunnel cannot remap ports.
    let mut port = port.or(service_port).unwrap_or(0);
    if let Some(svc_port) = service_port {
        if matches!(forward, ForwardMethod::Route | ForwardMethod::Tunnel) {
            port = svc_port;
        }
    }
    if addr.is_ipv6() != key.is_ipv6() && forward != ForwardMethod::Tunnel {
        return Err("different address family is allowed only for tunneling servers".into());
    }
    let tunnel_opts =
        opts.tun_type.is_some() || opts.tun_port.is_some() || !opts.tun_flags.is_empty();
    if tunnel_opts && forward != ForwardMethod::Tunnel {
        return Err("tunnel options conflict with forward method".into());
    }
    let tunnel_type = opts.tun_type.unwrap_or_default();
    match tunnel_type {
        TunnelType::IpIp if opts.tun_port.is_some() || !opts.tun_flags.is_empty() => {
            return Err(
                "tunnel port and checksum options are illegal with the 'ipip' tunnel type".into(),
            )
        }
        TunnelType::Gue if opts.tun_port.is_none() => {
            return Err("the 'gue' tunnel type needs --tun-port".into())
        }
        TunnelType::Gre if opts.tun_port.is_some() => {
            return Err("--tun-port is illegal with the 'gre' tunnel type".into())
        }
        TunnelType::Gre if opts.tun_flags.iter().any(|(_, f)| *f == 2) => {
            return Err("--tun-remcsum is illegal with the 'gre' tunnel type".into())
        }
        _ => {}
    }
    if opts.tun_flags.len() > 1 {
        return Err(format!(
            "the options {} conflict",
            opts.tun_flags
                .iter()
                .map(|(n, _)| format!("--{n}"))
                .collect::<Vec<_>>()
                .join(" and ")
        ));
    }
    Ok((
        key,
        Destination {
            addr,
            port,
            forward,
            weight: opts.weight.unwrap_or(1),
            upper_threshold: opts.u_threshold.unwrap_or(0),
            lower_threshold: opts.l_threshold.unwrap_or(0),
            tunnel_type,
            tunnel_port: opts.tun_port.unwrap_or(0),
            tunnel_flags: opts.tun_flags.first().map(|(_, f)| *f).unwrap_or(0),
        },
    ))
}

/// Parses `ipvsadm -Sn` output (the input of `ipvsadm -R`) into services with their
/// destinations, in the order they appear.
pub fn parse_save(text: &str) -> Result<Vec<(Service, Vec<Destination>)>, ParseError> {
    let mut table: Vec<(Service, Vec<Destination>)> = Vec::new();
    for (idx, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |message: String| ParseError {
            line: idx + 1,
            message,
            text: raw.to_string(),
        };
        let tokens: Vec<&str> = line.split_whitespace().collect();
        let (command, opts) = parse_line(&tokens).map_err(err)?;
        match command {
            Command::AddService => {
                let svc = build_service(&opts).map_err(err)?;
                if table.iter().any(|(s, _)| s.key == svc.key) {
                    return Err(err(format!("service {} defined twice", svc.key)));
                }
                table.push((svc, Vec::new()));
            }
            Command::AddServer => {
                let (key, dest) = build_destination(&opts).map_err(err)?;
                let (_, dests) = table
                    .iter_mut()
                    .find(|(s, _)| s.key == key)
                    .ok_or_else(|| {
                        err(format!(
                            "destination for service {key}, which no earlier -A line defines"
                        ))
                    })?;
                if dests.iter().any(|d| d.key() == dest.key()) {
                    return Err(err(format!("destination {} added twice", dest.key())));
                }
                dests.push(dest);
            }
        }
    }
    Ok(table)
}
