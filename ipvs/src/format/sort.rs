//! ipvsadm's listing order.
//!
//! ipvsadm sorts services and destinations with `qsort` and comparators that subtract unsigned
//! values and truncate to `int`. Those comparators are not transitive for values more than 2^31
//! apart (10.0.0.1 sorts after 200.0.0.1, but before 100.0.0.1), so the result depends on the
//! sort algorithm and the input order. glibc's `qsort` is a top-down merge sort; it is
//! transcribed here and fed the kernel's dump order, exactly as ipvsadm is.

use std::net::IpAddr;

use crate::handle::TableEntry;
use crate::types::{DestinationState, ServiceKey, ServiceState};

const AF_INET: i32 = libc::AF_INET;
const AF_INET6: i32 = libc::AF_INET6;

/// glibc `msort_with_tmp`: stable top-down merge sort, taking from the left run while
/// `cmp(left, right) <= 0`.
fn glibc_msort<T>(items: &mut [T], cmp: &impl Fn(&T, &T) -> i32)
where
    T: Clone,
{
    let n = items.len();
    if n <= 1 {
        return;
    }
    let n1 = n / 2;
    glibc_msort(&mut items[..n1], cmp);
    glibc_msort(&mut items[n1..], cmp);
    let mut merged = Vec::with_capacity(n);
    let (mut i, mut j) = (0, n1);
    while i < n1 && j < n {
        if cmp(&items[i], &items[j]) <= 0 {
            merged.push(items[i].clone());
            i += 1;
        } else {
            merged.push(items[j].clone());
            j += 1;
        }
    }
    merged.extend_from_slice(&items[i..n1]);
    // Whatever is left of the right run is already in place.
    let done = merged.len();
    items[..done].clone_from_slice(&merged);
}

/// The address as the four host-order words ipvsadm compares (`ntohl(s6_addr32[i])`); IPv4
/// occupies the first word of the union.
fn words(addr: &IpAddr) -> [u32; 4] {
    let mut w = [0u32; 4];
    match addr {
        IpAddr::V4(a) => w[0] = u32::from_be_bytes(a.octets()),
        IpAddr::V6(a) => {
            let o = a.octets();
            for (i, word) in w.iter_mut().enumerate() {
                *word = u32::from_be_bytes([o[4 * i], o[4 * i + 1], o[4 * i + 2], o[4 * i + 3]]);
            }
        }
    }
    w
}

/// `r = a - b` on unsigned values, truncated to int, as C does.
fn diff(a: u32, b: u32) -> i32 {
    a.wrapping_sub(b) as i32
}

fn cmp_addr(af: i32, a: &[u32; 4], b: &[u32; 4]) -> i32 {
    if af == AF_INET6 {
        let mut r = 0;
        for i in 0..4 {
            if r != 0 {
                break;
            }
            r = diff(a[i], b[i]);
        }
        r
    } else {
        diff(a[0], b[0])
    }
}

/// The fields of `ipvs_service_entry_t` that `ipvs_cmp_services` reads.
#[derive(Clone)]
struct SvcSortKey {
    fwmark: u32,
    af: i32,
    protocol: i32,
    addr: [u32; 4],
    port: i32,
}

fn svc_sort_key(key: &ServiceKey) -> SvcSortKey {
    match key {
        // libipvs leaves protocol, address and port zeroed for fwmark services.
        ServiceKey::FwMark { ipv6, mark } => SvcSortKey {
            fwmark: *mark,
            af: if *ipv6 { AF_INET6 } else { AF_INET },
            protocol: 0,
            addr: [0; 4],
            port: 0,
        },
        ServiceKey::Addr {
            protocol,
            addr,
            port,
        } => SvcSortKey {
            fwmark: 0,
            af: if addr.is_ipv6() { AF_INET6 } else { AF_INET },
            protocol: i32::from(protocol.number()),
            addr: words(addr),
            port: i32::from(*port),
        },
    }
}

/// `ipvs_cmp_services`.
fn cmp_services(a: &SvcSortKey, b: &SvcSortKey) -> i32 {
    let r = diff(a.fwmark, b.fwmark);
    if r != 0 {
        return r;
    }
    let r = a.af - b.af;
    if r != 0 {
        return r;
    }
    let r = a.protocol - b.protocol;
    if r != 0 {
        return r;
    }
    let r = cmp_addr(a.af, &a.addr, &b.addr);
    if r != 0 {
        return r;
    }
    a.port - b.port
}

/// `ipvs_cmp_dests`: note the address width is chosen by the first operand's family.
fn cmp_dests(a: &DestinationState, b: &DestinationState) -> i32 {
    let (da, db) = (&a.destination, &b.destination);
    let af = if da.addr.is_ipv6() { AF_INET6 } else { AF_INET };
    let r = cmp_addr(af, &words(&da.addr), &words(&db.addr));
    if r != 0 {
        return r;
    }
    i32::from(da.port) - i32::from(db.port)
}

/// The table in the order `ipvsadm -L`/`-S` prints it, given the kernel's dump order.
pub fn ipvsadm_order(table: &[TableEntry]) -> Vec<(&ServiceState, Vec<&DestinationState>)> {
    let mut keyed: Vec<(&TableEntry, SvcSortKey)> = table
        .iter()
        .map(|entry| (entry, svc_sort_key(&entry.0.service.key)))
        .collect();
    glibc_msort(&mut keyed, &|a, b| cmp_services(&a.1, &b.1));
    keyed
        .into_iter()
        .map(|((svc, dests), _)| {
            let mut dests: Vec<&DestinationState> = dests.iter().collect();
            glibc_msort(&mut dests, &|a, b| cmp_dests(a, b));
            (svc, dests)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msort_matches_reference_merge() {
        // A non-transitive comparator: wrapping differences on values 2^31 apart.
        let vals: Vec<u32> = vec![0x0a00_0001, 0xc800_0001, 0x6400_0001, 0x0a00_0002];
        let mut v = vals.clone();
        glibc_msort(&mut v, &|a: &u32, b: &u32| diff(*a, *b));
        // By hand, following glibc: split [0a01, c801] [6401, 0a02];
        // left: cmp(0a01, c801) = 0x4200_0000 > 0, so [c801, 0a01];
        // right: cmp(6401, 0a02) > 0, so [0a02, 6401];
        // merge: cmp(c801, 0a02) < 0 takes c801; cmp(0a01, 0a02) < 0 takes 0a01; then the rest.
        assert_eq!(v, vec![0xc800_0001, 0x0a00_0001, 0x0a00_0002, 0x6400_0001]);
    }
}
