//! The `kube-ipvs0` device: where kube-proxy's IPVS mode binds service addresses (/32, /128 for
//! IPv6: `NewIPNet` in pkg/proxy/ipvs/netlink_linux.go) so the kernel treats them as local and
//! hands their packets to IPVS.
//!
//! IPv6 addresses on it need no `nodad`: the kernel skips duplicate address detection on NOARP
//! devices (`addrconf_dad_begin`), so they are usable, with their local route, at once, as on a
//! real node.
//!
//! kube-proxy creates a dummy device and never sets it up, and marks it NOARP (see
//! /work/shared/reference/kube-proxy-ipvs.md §1). Kernels built without dummy support get an
//! empty bridge of the same name instead: an address on any device, up or down, gets a `local`
//! route in table local, which is the only property the dataplane relies on. The kind used is
//! reported so a run can tell.
//!
//! rtnetlink is async; each operation runs on a private current-thread runtime on a thread that
//! entered the namespace, so callers stay synchronous whether or not they are inside tokio.

use crate::netns::Netns;
use crate::scenario::IpFamily;
use crate::topology::link::NetlinkNs;
use futures::TryStreamExt;
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkFlags, LinkInfo, LinkMessage};
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteType};
use rtnetlink::{Handle, LinkBridge, LinkDummy, RouteMessageBuilder};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// kube-proxy's `defaultDummyDevice`.
pub const DEVICE: &str = "kube-ipvs0";

/// The kernel's route table `local`.
const RT_TABLE_LOCAL: u8 = 255;

/// What kind of device holds the addresses.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum DeviceKind {
    /// As kube-proxy makes it.
    Dummy,
    /// The fallback on kernels without dummy support.
    Bridge,
    /// A pre-existing device of another kind (e.g. created by an `exec:` proxier).
    Other(String),
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceKind::Dummy => f.write_str("dummy"),
            DeviceKind::Bridge => f.write_str("bridge (fallback: this kernel has no dummy)"),
            DeviceKind::Other(kind) => write!(f, "{kind}"),
        }
    }
}

/// Which kind to create when the device does not exist yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DevicePolicy {
    /// dummy, or a bridge if the kernel does not know dummy (EOPNOTSUPP).
    #[default]
    Auto,
    /// dummy or fail: for kernels that must have it (the IPVS VM).
    RequireDummy,
    /// Always the bridge fallback.
    Bridge,
}

/// The device as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceState {
    pub kind: DeviceKind,
    pub up: bool,
    pub noarp: bool,
    /// Addresses with their prefix length, sorted (IPv4 first). IPv6 link-local addresses,
    /// which the kernel adds on its own if the device goes up, are left out, as kube-proxy's
    /// `isValidForSet` leaves them out.
    pub addresses: Vec<(IpAddr, u8)>,
    /// Destinations of the `local` routes through the device (table local), sorted.
    pub local_routes: Vec<IpAddr>,
}

/// An rtnetlink operation on kube-ipvs0 failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} in namespace {namespace}: {message}")]
pub struct DeviceError {
    pub what: String,
    pub namespace: String,
    pub message: String,
    /// The kernel's errno, when it refused.
    pub errno: Option<i32>,
}

type Res<T> = Result<T, DeviceError>;

/// Runs `f` with an rtnetlink handle opened inside `ns`.
fn with_handle<T, F, Fut>(ns: &Netns, what: &str, f: F) -> Res<T>
where
    F: FnOnce(Handle) -> Fut + Send,
    Fut: std::future::Future<Output = Res<T>>,
    T: Send,
{
    NetlinkNs::blocking(ns, |nl| f(nl.handle())).unwrap_or_else(|e| {
        Err(DeviceError {
            what: what.to_string(),
            namespace: ns.name().to_string(),
            message: format!("{e:#}"),
            errno: None,
        })
    })
}

fn nl_err(ns: &str, what: String) -> impl Fn(rtnetlink::Error) -> DeviceError + '_ {
    move |e| {
        let errno = match &e {
            rtnetlink::Error::NetlinkError(m) => Some(-m.raw_code()),
            _ => None,
        };
        DeviceError {
            what: what.clone(),
            namespace: ns.to_string(),
            message: e.to_string(),
            errno,
        }
    }
}

async fn find_link(handle: &Handle, ns: &str) -> Res<Option<LinkMessage>> {
    let mut links = handle.link().get().execute();
    while let Some(link) = links
        .try_next()
        .await
        .map_err(nl_err(ns, format!("listing links to find {DEVICE}")))?
    {
        let is_ours = link
            .attributes
            .iter()
            .any(|a| matches!(a, LinkAttribute::IfName(n) if n == DEVICE));
        if is_ours {
            return Ok(Some(link));
        }
    }
    Ok(None)
}

fn kind_of(link: &LinkMessage) -> DeviceKind {
    let kind = link.attributes.iter().find_map(|a| match a {
        LinkAttribute::LinkInfo(infos) => infos.iter().find_map(|i| match i {
            LinkInfo::Kind(k) => Some(k.clone()),
            _ => None,
        }),
        _ => None,
    });
    match kind {
        Some(InfoKind::Dummy) => DeviceKind::Dummy,
        Some(InfoKind::Bridge) => DeviceKind::Bridge,
        Some(other) => DeviceKind::Other(other.to_string()),
        None => DeviceKind::Other("unknown".into()),
    }
}

async fn addresses(handle: &Handle, ns: &str, index: u32) -> Res<Vec<AddressMessage>> {
    handle
        .address()
        .get()
        .set_link_index_filter(index)
        .execute()
        .try_collect::<Vec<_>>()
        .await
        .map_err(nl_err(ns, format!("listing addresses of {DEVICE}")))
}

/// The address a message carries (`IFA_LOCAL`, else `IFA_ADDRESS`), unless it is an IPv6
/// link-local one.
fn address_of(msg: &AddressMessage) -> Option<IpAddr> {
    let local = msg.attributes.iter().find_map(|a| match a {
        AddressAttribute::Local(ip) => Some(*ip),
        _ => None,
    });
    local
        .or_else(|| {
            msg.attributes.iter().find_map(|a| match a {
                AddressAttribute::Address(ip) => Some(*ip),
                _ => None,
            })
        })
        .filter(|ip| !is_link_local_v6(*ip))
}

fn is_link_local_v6(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80)
}

/// The destinations of table local's `local` routes through device `index`, both families.
async fn local_routes(handle: &Handle, ns: &str, index: u32) -> Res<Vec<IpAddr>> {
    let requests = [
        RouteMessageBuilder::<Ipv4Addr>::new()
            .table_id(u32::from(RT_TABLE_LOCAL))
            .build(),
        RouteMessageBuilder::<Ipv6Addr>::new()
            .table_id(u32::from(RT_TABLE_LOCAL))
            .build(),
    ];
    let mut out: Vec<IpAddr> = Vec::new();
    for request in requests {
        let routes: Vec<_> = handle
            .route()
            .get(request)
            .execute()
            .try_collect()
            .await
            .map_err(nl_err(ns, "listing table local".into()))?;
        out.extend(
            routes
                .iter()
                .filter(|r| r.header.kind == RouteType::Local && r.header.table == RT_TABLE_LOCAL)
                .filter(|r| {
                    r.attributes
                        .iter()
                        .any(|a| matches!(a, RouteAttribute::Oif(i) if *i == index))
                })
                .filter_map(|r| {
                    r.attributes.iter().find_map(|a| match a {
                        RouteAttribute::Destination(RouteAddress::Inet(v4)) => {
                            Some(IpAddr::V4(*v4))
                        }
                        RouteAttribute::Destination(RouteAddress::Inet6(v6)) => {
                            Some(IpAddr::V6(*v6))
                        }
                        _ => None,
                    })
                })
                .filter(|ip| !is_link_local_v6(*ip)),
        );
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Reads the device; `None` when there is none.
pub fn read(ns: &Netns) -> Res<Option<DeviceState>> {
    let ns_name = ns.name().to_string();
    with_handle(ns, &format!("reading {DEVICE}"), |handle| async move {
        let Some(link) = find_link(&handle, &ns_name).await? else {
            return Ok(None);
        };
        let index = link.header.index;
        let mut addrs: Vec<(IpAddr, u8)> = addresses(&handle, &ns_name, index)
            .await?
            .iter()
            .filter_map(|m| address_of(m).map(|a| (a, m.header.prefix_len)))
            .collect();
        addrs.sort();
        Ok(Some(DeviceState {
            kind: kind_of(&link),
            up: link.header.flags.contains(LinkFlags::Up),
            noarp: link.header.flags.contains(LinkFlags::Noarp),
            addresses: addrs,
            local_routes: local_routes(&handle, &ns_name, index).await?,
        }))
    })
}

/// The device once every one of `addresses` has its local route, or as it is at `deadline`.
///
/// An IPv4 address's local route is inserted as the address is added. An IPv6 one's is not:
/// `inet6_addr_add` hands the address to the deferred DAD work (`addrconf_dad_start` queues
/// `dad_work` even for NOARP devices and `nodad` addresses), and the route goes in when that
/// work runs (`addrconf_dad_completed`), a moment later on a busy machine. `None` when there is
/// no device.
pub fn await_local_routes(
    ns: &Netns,
    addresses: &[IpAddr],
    deadline: std::time::Instant,
) -> Res<Option<DeviceState>> {
    loop {
        let state = read(ns)?;
        let routed = state
            .as_ref()
            .is_some_and(|s| addresses.iter().all(|a| s.local_routes.contains(a)));
        if routed || std::time::Instant::now() >= deadline {
            return Ok(state);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// What [`ensure`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ensured {
    pub kind: DeviceKind,
    /// The device was created by this call (so a rollback deletes it).
    pub created: bool,
}

/// Makes sure the device exists (creating it DOWN and NOARP per `policy` if not) and holds
/// exactly `wanted` as host addresses (/32, /128).
pub fn ensure(ns: &Netns, wanted: &[IpAddr], policy: DevicePolicy) -> Res<Ensured> {
    let ns_name = ns.name().to_string();
    let wanted = wanted.to_vec();
    with_handle(ns, &format!("programming {DEVICE}"), |handle| async move {
        let (link, created) = match find_link(&handle, &ns_name).await? {
            Some(link) => (link, false),
            None => {
                create(&handle, &ns_name, policy).await?;
                let link = find_link(&handle, &ns_name)
                    .await?
                    .ok_or_else(|| DeviceError {
                        what: format!("creating {DEVICE}"),
                        namespace: ns_name.clone(),
                        message: "the device is missing right after creation".into(),
                        errno: None,
                    })?;
                (link, true)
            }
        };
        let index = link.header.index;
        sync_addresses(&handle, &ns_name, index, &wanted).await?;
        Ok(Ensured {
            kind: kind_of(&link),
            created,
        })
    })
}

async fn create(handle: &Handle, ns: &str, policy: DevicePolicy) -> Res<()> {
    // LinkBridge::new also sets the link up; kube-ipvs0 stays down, as kube-proxy leaves it.
    let bridge = || async {
        handle
            .link()
            .add(LinkBridge::new(DEVICE).down().arp(false).build())
            .execute()
            .await
            .map_err(nl_err(ns, format!("creating {DEVICE} as a bridge")))
    };
    if policy == DevicePolicy::Bridge {
        return bridge().await;
    }
    let dummy = handle
        .link()
        .add(LinkDummy::new(DEVICE).arp(false).build())
        .execute()
        .await
        .map_err(nl_err(ns, format!("creating {DEVICE} as a dummy device")));
    match dummy {
        Err(e) if policy == DevicePolicy::Auto && e.errno == Some(libc::EOPNOTSUPP) => {
            bridge().await
        }
        other => other,
    }
}

async fn sync_addresses(handle: &Handle, ns: &str, index: u32, wanted: &[IpAddr]) -> Res<()> {
    let present = addresses(handle, ns, index).await?;
    for msg in present {
        let Some(addr) = address_of(&msg) else {
            // An IPv6 link-local address is the kernel's, not a bound service address.
            continue;
        };
        let keep = msg.header.prefix_len == host_prefix_len(addr) && wanted.contains(&addr);
        if !keep {
            let what = format!("removing {addr} from {DEVICE}");
            handle
                .address()
                .del(msg)
                .execute()
                .await
                .map_err(nl_err(ns, what))?;
        }
    }
    let present: Vec<IpAddr> = addresses(handle, ns, index)
        .await?
        .iter()
        .filter_map(address_of)
        .collect();
    for &addr in wanted.iter().filter(|a| !present.contains(a)) {
        let prefix = host_prefix_len(addr);
        handle
            .address()
            .add(index, addr, prefix)
            .execute()
            .await
            .map_err(nl_err(ns, format!("adding {addr}/{prefix} to {DEVICE}")))?;
    }
    Ok(())
}

/// 32 or 128: the prefix kube-proxy binds an address with.
pub fn host_prefix_len(addr: IpAddr) -> u8 {
    IpFamily::of(addr).host_prefix_len()
}

/// Deletes the device (and with it its addresses and local routes); absent is fine.
pub fn remove(ns: &Netns) -> Res<()> {
    let ns_name = ns.name().to_string();
    with_handle(ns, &format!("deleting {DEVICE}"), |handle| async move {
        if let Some(link) = find_link(&handle, &ns_name).await? {
            handle
                .link()
                .del(link.header.index)
                .execute()
                .await
                .map_err(nl_err(&ns_name, format!("deleting {DEVICE}")))?;
        }
        Ok(())
    })
}

/// Puts back exactly the given addresses (with prefix lengths) on an existing device.
pub fn restore_addresses(ns: &Netns, addrs: &[(IpAddr, u8)]) -> Res<()> {
    let ns_name = ns.name().to_string();
    let addrs = addrs.to_vec();
    with_handle(
        ns,
        &format!("restoring the addresses of {DEVICE}"),
        |handle| async move {
            let Some(link) = find_link(&handle, &ns_name).await? else {
                return Ok(());
            };
            let index = link.header.index;
            for msg in addresses(&handle, &ns_name, index).await? {
                let Some(addr) = address_of(&msg) else {
                    continue;
                };
                let what = format!("removing {addr} from {DEVICE}");
                handle
                    .address()
                    .del(msg)
                    .execute()
                    .await
                    .map_err(nl_err(&ns_name, what))?;
            }
            for (addr, prefix) in addrs {
                handle
                    .address()
                    .add(index, addr, prefix)
                    .execute()
                    .await
                    .map_err(nl_err(
                        &ns_name,
                        format!("adding {addr}/{prefix} to {DEVICE}"),
                    ))?;
            }
            Ok(())
        },
    )
}
