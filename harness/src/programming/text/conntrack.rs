//! `*conntrack`: the stale-entry cleanup a proxier asks for.

use super::*;

pub(super) fn parse_conntrack_body(
    body: &[Line],
    origin: &str,
    sources: &mut SourceMap,
) -> Result<Vec<ConntrackCleanup>, TextError> {
    let mut out = Vec::new();
    for &(lineno, line) in body {
        let cleanup = parse_conntrack_line(line).map_err(|message| TextError {
            origin: origin.to_string(),
            line: lineno,
            message,
        })?;
        sources.insert(
            Item::ConntrackCleanup { index: out.len() },
            at(origin, lineno),
        );
        out.push(cleanup);
    }
    Ok(out)
}

pub(super) fn parse_conntrack_line(line: &str) -> Result<ConntrackCleanup, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    if !words.len().is_multiple_of(2) {
        return Err(format!(
            "`{}`: expected OPTION VALUE pairs (-p, --orig-dst, --orig-port-dst, --reply-src-not)",
            crate::quote::quote(line)
        ));
    }
    let (mut protocol, mut orig_dst, mut orig_dport, mut serving) = (None, None, None, None);
    for pair in words.chunks(2) {
        let (option, value) = (pair[0], pair[1]);
        match option {
            "-p" => {
                protocol = Some(match value {
                    "tcp" => Protocol::Tcp,
                    "udp" => Protocol::Udp,
                    "sctp" => Protocol::Sctp,
                    other => return Err(format!("unknown protocol `{other}` (tcp, udp or sctp)")),
                })
            }
            "--orig-dst" => orig_dst = Some(parse_ip(value)?),
            "--orig-port-dst" => {
                orig_dport = Some(
                    value
                        .parse::<u16>()
                        .ok()
                        .filter(|p| *p != 0)
                        .ok_or_else(|| format!("`{value}` is not a port (1-65535)"))?,
                )
            }
            "--reply-src-not" => {
                serving = Some(
                    value
                        .split(',')
                        .map(parse_ip)
                        .collect::<Result<Vec<_>, _>>()?,
                )
            }
            other => {
                return Err(format!(
                    "unknown option `{}` (-p, --orig-dst, --orig-port-dst, --reply-src-not)",
                    crate::quote::quote(other)
                ))
            }
        }
    }
    let serving: Vec<IpAddr> = serving.ok_or("missing `--reply-src-not IP[,IP...]`")?;
    let families: BTreeSet<bool> = serving
        .iter()
        .chain(&orig_dst)
        .map(IpAddr::is_ipv4)
        .collect();
    if families.len() > 1 {
        return Err("addresses of both families: a cleanup deletes entries of one".into());
    }
    Ok(ConntrackCleanup {
        protocol: protocol.ok_or("missing `-p PROTOCOL`")?,
        orig_dst,
        orig_dport: orig_dport.ok_or("missing `--orig-port-dst PORT`")?,
        serving,
    })
}

/// One `*conntrack` line.
pub(crate) fn render_conntrack_line(c: &ConntrackCleanup) -> String {
    let mut out = format!("-p {}", c.protocol.lower());
    if let Some(dst) = c.orig_dst {
        let _ = write!(out, " --orig-dst {dst}");
    }
    let serving: Vec<String> = c.serving.iter().map(|a| a.to_string()).collect();
    let _ = write!(
        out,
        " --orig-port-dst {} --reply-src-not {}",
        c.orig_dport,
        serving.join(",")
    );
    out
}
