//! Addresses as glibc's `inet_ntop` prints them.
//!
//! Rust's `Ipv6Addr` display differs from glibc for IPv4-compatible addresses (`::1.2.3.4`),
//! so IPv6 text is produced by a transcription of glibc's `inet_ntop6`.

use std::fmt::Write;
use std::net::{IpAddr, Ipv6Addr};

pub fn ntop(addr: &IpAddr) -> String {
    match addr {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => ntop6(a),
    }
}

/// `addrport_to_anyname` in numeric mode: `1.2.3.4:80`, `[::1]:80`.
pub fn addrport(addr: &IpAddr, port: u16) -> String {
    match addr {
        IpAddr::V4(_) => format!("{}:{port}", ntop(addr)),
        IpAddr::V6(_) => format!("[{}]:{port}", ntop(addr)),
    }
}

fn longer(run: (usize, usize), best: Option<(usize, usize)>) -> bool {
    match best {
        None => true,
        Some(b) => run.1 > b.1,
    }
}

fn ntop6(addr: &Ipv6Addr) -> String {
    let words = addr.segments();
    let octets = addr.octets();
    // Longest run of zero words (first one wins ties), ignored when shorter than two.
    let mut best: Option<(usize, usize)> = None;
    let mut cur: Option<(usize, usize)> = None;
    for (i, w) in words.iter().enumerate() {
        if *w == 0 {
            cur = Some(match cur {
                None => (i, 1),
                Some((base, len)) => (base, len + 1),
            });
        } else if let Some(c) = cur.take() {
            if longer(c, best) {
                best = Some(c);
            }
        }
    }
    if let Some(c) = cur {
        if longer(c, best) {
            best = Some(c);
        }
    }
    let best = best.filter(|b| b.1 >= 2);

    let mut out = String::new();
    for i in 0..8 {
        if let Some((base, len)) = best {
            if i >= base && i < base + len {
                if i == base {
                    out.push(':');
                }
                continue;
            }
        }
        if i != 0 {
            out.push(':');
        }
        if i == 6 && matches!(best, Some((0, len)) if len == 6 || (len == 5 && words[5] == 0xffff))
        {
            let _ = write!(
                out,
                "{}.{}.{}.{}",
                octets[12], octets[13], octets[14], octets[15]
            );
            return out;
        }
        let _ = write!(out, "{:x}", words[i]);
    }
    if matches!(best, Some((base, len)) if base + len == 8) {
        out.push(':');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v6(s: &str) -> String {
        ntop6(&s.parse().unwrap())
    }

    #[test]
    fn matches_glibc_inet_ntop() {
        assert_eq!(v6("::"), "::");
        assert_eq!(v6("::1"), "::1");
        assert_eq!(v6("2001:db8::1"), "2001:db8::1");
        assert_eq!(v6("2001:db8:0:1:0:0:0:1"), "2001:db8:0:1::1");
        assert_eq!(v6("2001:0:0:1:0:0:0:1"), "2001:0:0:1::1");
        assert_eq!(v6("1:0:1:0:1:0:1:0"), "1:0:1:0:1:0:1:0");
        assert_eq!(v6("fe80::"), "fe80::");
        assert_eq!(v6("::ffff:1.2.3.4"), "::ffff:1.2.3.4");
        // IPv4-compatible: glibc keeps the dotted quad, Rust would print ::102:304.
        assert_eq!(v6("::1.2.3.4"), "::1.2.3.4");
        assert_eq!(v6("::0.0.1.2"), "::102");
    }
}
