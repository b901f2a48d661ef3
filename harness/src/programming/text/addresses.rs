//! `*addresses`: the addresses bound on kube-ipvs0.

use super::*;

/// Parses one address per line, `A.B.C.D`, `A.B.C.D/32`, `X::Y` or `X::Y/128`.
pub(crate) fn parse_addresses_body(
    body: &[Line],
    origin: &str,
    sources: &mut SourceMap,
) -> Result<Vec<IpAddr>, TextError> {
    let mut out = Vec::new();
    for &(lineno, line) in body {
        let err = |message: String| TextError {
            origin: origin.to_string(),
            line: lineno,
            message,
        };
        let addr = parse_host_address(line).map_err(err)?;
        if out.contains(&addr) {
            return Err(err(format!("address {addr} listed twice")));
        }
        sources.insert(Item::Address { index: out.len() }, at(origin, lineno));
        out.push(addr);
    }
    Ok(out)
}

/// An address without prefix or with its family's host prefix (/32, /128).
pub(crate) fn parse_host_address(text: &str) -> Result<IpAddr, String> {
    let (addr, prefix) = match text.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (text, None),
    };
    let addr = addr
        .parse::<IpAddr>()
        .map_err(|_| format!("malformed IP address `{text}`"))?;
    let host = IpFamily::of(addr).host_prefix_len().to_string();
    if let Some(p) = prefix.filter(|p| *p != host) {
        return Err(format!(
            "address `{text}`: kube-ipvs0 addresses are /{host}, not /{p}"
        ));
    }
    Ok(addr)
}

/// An address of either family.
pub(super) fn parse_ip(text: &str) -> Result<IpAddr, String> {
    text.parse()
        .map_err(|_| format!("malformed IP address `{text}`"))
}
