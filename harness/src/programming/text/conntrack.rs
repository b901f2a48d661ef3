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
            "--reply-src-not" if value == "none" => serving = Some(Vec::new()),
            "--reply-src-not" => {
                serving = Some(
                    value
                        .split(',')
                        .map(parse_serving)
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
    let serving: Vec<Serving> =
        serving.ok_or("missing `--reply-src-not IP:PORT[,IP:PORT...]` (or `none`)")?;
    let families: BTreeSet<bool> = serving
        .iter()
        .map(|s| s.ip)
        .chain(orig_dst)
        .map(|a| a.is_ipv4())
        .collect();
    if families.len() > 1 {
        return Err("addresses of both families: a cleanup deletes entries of one".into());
    }
    if serving.is_empty() && orig_dst.is_none() {
        return Err(
            "`--reply-src-not none` needs `--orig-dst`: with no address at all the cleanup has \
             no family (and kube-proxy never clears a NodePort of a Service without endpoints)"
                .into(),
        );
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
    let serving: Vec<String> = c
        .serving
        .iter()
        .map(|s| match s.port {
            Some(port) => std::net::SocketAddr::new(s.ip, port).to_string(),
            None => s.ip.to_string(),
        })
        .collect();
    let serving = if serving.is_empty() {
        "none".to_string()
    } else {
        serving.join(",")
    };
    let _ = write!(
        out,
        " --orig-port-dst {} --reply-src-not {serving}",
        c.orig_dport
    );
    out
}

/// A serving endpoint: `IP:PORT` (`[IPv6]:PORT`), or a bare `IP` (any port).
fn parse_serving(text: &str) -> Result<Serving, String> {
    if let Ok(a) = text.parse::<std::net::SocketAddr>() {
        return Ok(Serving {
            ip: a.ip(),
            port: Some(a.port()),
        });
    }
    Ok(Serving {
        ip: parse_ip(text)?,
        port: None,
    })
}
