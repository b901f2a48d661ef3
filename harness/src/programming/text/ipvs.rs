//! `*ipvs`: `ipvsadm -Sn` lines and the directives kpct adds (timeouts, delete-others, clear).

use super::*;

/// Parses `ipvsadm -Sn` lines; also used for a replay's `ipvsadm-Sn` file.
/// The `*ipvs` section: `ipvsadm -Sn` lines, at most one `--set TCP TCPFIN UDP`, at most one
/// `--delete-others [CIDRs]` per family and at most one `--clear` (every other service goes,
/// where the kernel has IP_VS).
pub(crate) fn parse_ipvs_body(
    body: &[Line],
    origin: &str,
    sources: &mut SourceMap,
) -> Result<IpvsSection, TextError> {
    let (directives, body): (Vec<Line>, Vec<Line>) = body.iter().partition(|(_, l)| {
        matches!(
            l.split_whitespace().next(),
            Some("--set" | "--delete-others" | "--clear")
        )
    });
    let (clear_lines, directives): (Vec<Line>, Vec<Line>) = directives
        .into_iter()
        .partition(|(_, l)| l.split_whitespace().next() == Some("--clear"));
    let clear = single_directive(&clear_lines, origin, parse_clear)?.is_some();
    if let Some((lineno, _)) = clear_lines.first() {
        sources.insert(Item::IpvsClear, at(origin, *lineno));
    }
    let (delete_lines, set_lines): (Vec<Line>, Vec<Line>) = directives
        .into_iter()
        .partition(|(_, l)| l.starts_with("--delete-others"));
    let mut delete_others: BTreeMap<IpFamily, Vec<IpCidr>> = BTreeMap::new();
    for &(lineno, line) in &delete_lines {
        let err = |message: String| TextError {
            origin: origin.to_string(),
            line: lineno,
            message,
        };
        let (family, keep) = parse_delete_others(line).map_err(err)?;
        if delete_others.insert(family, keep).is_some() {
            return Err(err(format!("`--delete-others` for {family} appears twice")));
        }
        sources.insert(Item::IpvsDeleteOthers(family), at(origin, lineno));
    }
    let timeouts = single_directive(&set_lines, origin, parse_timeouts)?;
    if let (Some(_), Some((lineno, _))) = (&timeouts, set_lines.first()) {
        sources.insert(Item::IpvsTimeouts, at(origin, *lineno));
    }
    Ok(IpvsSection {
        servers: parse_ipvs_servers(&body, origin, sources)?,
        timeouts,
        delete_others,
        clear,
    })
}

/// `--clear`, which takes nothing.
fn parse_clear(line: &str) -> Result<(), String> {
    match line.split_whitespace().count() {
        1 => Ok(()),
        _ => Err(format!(
            "`{}`: `--clear` takes nothing (it deletes every IPVS service not listed)",
            crate::quote::quote(line)
        )),
    }
}

/// The value of a directive that may appear once: its lines parsed with `parse`.
pub(super) fn single_directive<T>(
    lines: &[Line],
    origin: &str,
    parse: fn(&str) -> Result<T, String>,
) -> Result<Option<T>, TextError> {
    let err = |lineno: usize, message: String| TextError {
        origin: origin.to_string(),
        line: lineno,
        message,
    };
    match lines {
        [] => Ok(None),
        [(lineno, line)] => parse(line).map(Some).map_err(|m| err(*lineno, m)),
        [_, (lineno, line), ..] => {
            let name = line.split_whitespace().next().unwrap_or_default();
            Err(err(*lineno, format!("`{name}` appears twice")))
        }
    }
}

/// `--delete-others [IPv4|IPv6] [CIDR,CIDR...]`: the family pruned (IPv4 when not named) and
/// the CIDRs whose services are kept, all of that family.
pub(super) fn parse_delete_others(line: &str) -> Result<(IpFamily, Vec<IpCidr>), String> {
    let mut words: Vec<&str> = line.split_whitespace().skip(1).collect();
    let family = match words.first() {
        Some(&"IPv4") => Some(IpFamily::Ipv4),
        Some(&"IPv6") => Some(IpFamily::Ipv6),
        _ => None,
    };
    if family.is_some() {
        words.remove(0);
    }
    let family = family.unwrap_or(IpFamily::Ipv4);
    let keep = match words.as_slice() {
        [] => Vec::new(),
        [list] => list
            .split(',')
            .map(|c| {
                c.parse::<IpCidr>()
                    .map_err(|e| format!("`{}`: {e}", crate::quote::quote(line)))
            })
            .collect::<Result<Vec<_>, _>>()?,
        _ => {
            return Err(format!(
                "`{}`: expected `--delete-others [IPv4|IPv6] [CIDR[,CIDR...]]` (the family pruned, \
                 the kept CIDRs)",
                crate::quote::quote(line)
            ))
        }
    };
    if let Some(other) = keep.iter().find(|c| c.family() != family) {
        return Err(format!(
            "`{}`: {other} is not an {family} CIDR: each family's line keeps its own",
            crate::quote::quote(line)
        ));
    }
    Ok((family, keep))
}

/// The `--delete-others` line of one family; IPv4's does not name its family.
pub(crate) fn render_delete_others(family: IpFamily, keep: &[IpCidr]) -> String {
    let mut line = "--delete-others".to_string();
    if family == IpFamily::Ipv6 {
        line.push_str(" IPv6");
    }
    if !keep.is_empty() {
        let list: Vec<String> = keep.iter().map(|c| c.to_string()).collect();
        line.push(' ');
        line.push_str(&list.join(","));
    }
    line
}

/// `--set TCP TCPFIN UDP`, seconds, as `ipvsadm --set` takes them.
pub(super) fn parse_timeouts(line: &str) -> Result<Timeouts, String> {
    let words: Vec<&str> = line.split_whitespace().skip(1).collect();
    let [tcp, tcp_fin, udp] = words.as_slice() else {
        return Err(format!(
            "`{}`: expected `--set TCP TCPFIN UDP` (three timeouts in seconds)",
            crate::quote::quote(line)
        ));
    };
    let secs = |w: &str| {
        w.parse::<u32>().map_err(|_| {
            format!(
                "`{}`: `{w}` is not a number of seconds",
                crate::quote::quote(line)
            )
        })
    };
    Ok(Timeouts {
        tcp: secs(tcp)?,
        tcp_fin: secs(tcp_fin)?,
        udp: secs(udp)?,
    })
}

pub(super) fn parse_ipvs_servers(
    body: &[Line],
    origin: &str,
    sources: &mut SourceMap,
) -> Result<Vec<VirtualServer>, TextError> {
    let text: String = body.iter().map(|(_, l)| format!("{l}\n")).collect();
    let table = parse_save(&text).map_err(|e| TextError {
        origin: origin.to_string(),
        line: body
            .get(e.line.wrapping_sub(1))
            .map(|(n, _)| *n)
            .unwrap_or(0),
        message: format!("{}: `{}`", e.message, crate::quote::quote(e.text.trim())),
    })?;
    let servers: Vec<VirtualServer> = table
        .into_iter()
        .map(|(service, destinations)| VirtualServer {
            service,
            destinations,
        })
        .collect();
    // Origins: -A lines are the services in order; a -a line's service is found by parsing it
    // after a synthetic -A of the same service (the parse above already validated everything).
    let mut service_index = 0;
    let mut dest_counts = vec![0usize; servers.len()];
    for &(lineno, line) in body {
        let first = line.split_whitespace().next().unwrap_or_default();
        if matches!(first, "-A" | "--add-service") {
            sources.insert(
                Item::Service {
                    service: service_index,
                },
                at(origin, lineno),
            );
            service_index += 1;
        } else if let Some(key) = destination_service(line) {
            if let Some(service) = servers.iter().position(|vs| vs.service.key == key) {
                sources.insert(
                    Item::Destination {
                        service,
                        destination: dest_counts[service],
                    },
                    at(origin, lineno),
                );
                dest_counts[service] += 1;
            }
        }
    }
    Ok(servers)
}

/// The service key of an `-a` line, by re-parsing it after an `-A` line for the same service.
pub(super) fn destination_service(line: &str) -> Option<ipvs_genl::ServiceKey> {
    const SERVICE_OPTS: [&str; 8] = [
        "-t",
        "--tcp-service",
        "-u",
        "--udp-service",
        "--sctp-service",
        "-f",
        "--fwmark-service",
        "--sctp",
    ];
    let tokens: Vec<&str> = line.split_whitespace().collect();
    let spec = tokens.windows(2).find_map(|w| {
        SERVICE_OPTS
            .contains(&w[0])
            .then(|| format!("{} {}", w[0], w[1]))
    })?;
    let parsed = parse_save(&format!("-A {spec}\n{line}\n")).ok()?;
    parsed.into_iter().next().map(|(svc, _)| svc.key)
}

/// `--set TCP TCPFIN UDP`.
pub(crate) fn render_timeouts(t: &Timeouts) -> String {
    format!("--set {} {} {}", t.tcp, t.tcp_fin, t.udp)
}

/// `ipvsadm -Sn` lines for the virtual servers, in the given order (ipvsadm itself sorts).
pub fn render_ipvs(servers: &[VirtualServer]) -> String {
    let mut out = String::new();
    for vs in servers {
        out.push_str(&render_service_line(&vs.service));
        for d in &vs.destinations {
            out.push_str(&render_destination_line(&vs.service, d));
        }
    }
    out
}

pub(super) fn service_state(
    service: &Service,
    dests: Vec<Destination>,
) -> (ServiceState, Vec<DestinationState>) {
    (
        ServiceState {
            service: service.clone(),
            stats: Stats::default(),
        },
        dests
            .into_iter()
            .map(|destination| DestinationState {
                destination,
                active_conns: 0,
                inactive_conns: 0,
                persistent_conns: 0,
                stats: Stats::default(),
            })
            .collect(),
    )
}

/// The `-A` line of a service, as `ipvsadm -Sn` prints it.
pub fn render_service_line(service: &Service) -> String {
    format_save(&[service_state(service, Vec::new())])
}

/// The `-a` line of one destination, as `ipvsadm -Sn` prints it.
pub fn render_destination_line(service: &Service, dest: &Destination) -> String {
    // format_save prints the service line first; the destination line is what follows.
    let both = format_save(&[service_state(service, vec![dest.clone()])]);
    both.split_once('\n')
        .map(|(_, d)| d.to_string())
        .unwrap_or_default()
}
