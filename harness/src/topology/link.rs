//! rtnetlink operations on one namespace: links, addresses, routes, neighbours, FDB entries.

use crate::netns::Netns;
use crate::scenario::IpFamily;
use anyhow::{anyhow, Context, Result};
use futures::TryStreamExt;
use netlink_packet_route::address::{AddressAttribute, AddressHeaderFlags, CacheInfo};
use netlink_packet_route::link::{InfoData, InfoVeth, LinkAttribute, LinkMessage};
use netlink_packet_route::neighbour::{NeighbourAddress, NeighbourAttribute, NeighbourFlags};
use rtnetlink::{Handle, LinkBridge, LinkUnspec, LinkVeth, LinkVxlan, RouteMessageBuilder};
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;

/// An rtnetlink handle bound to one namespace.
pub struct NetlinkNs {
    handle: Handle,
    ns_name: String,
}

impl NetlinkNs {
    /// Opens a route-netlink socket inside `ns`. The socket stays bound to that namespace, so
    /// the returned handle works from any task.
    pub fn open(ns: &Netns) -> Result<NetlinkNs> {
        let rt = tokio::runtime::Handle::try_current()
            .context("topology operations need a tokio runtime")?;
        let (conn, handle, _) = ns
            .run(move || {
                let _guard = rt.enter();
                rtnetlink::new_connection()
            })?
            .with_context(|| format!("opening rtnetlink in namespace {}", ns.name()))?;
        tokio::spawn(conn);
        Ok(NetlinkNs {
            handle,
            ns_name: ns.name().to_string(),
        })
    }

    /// Runs `f` on a handle inside `ns` from synchronous code (a probe's shots, a proxier's
    /// programming step): on a thread that entered `ns`, with a runtime of its own. The outer
    /// error is setting that up, the inner one `f`'s own.
    pub(crate) fn blocking<T, E, F, Fut>(ns: &Netns, f: F) -> Result<std::result::Result<T, E>>
    where
        F: FnOnce(NetlinkNs) -> Fut + Send,
        Fut: std::future::Future<Output = std::result::Result<T, E>>,
        T: Send,
        E: Send,
    {
        let ns_name = ns.name().to_string();
        ns.run(move || -> Result<std::result::Result<T, E>> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting a runtime for rtnetlink")?;
            rt.block_on(async {
                let (conn, handle, _) = rtnetlink::new_connection().context("opening rtnetlink")?;
                let conn = tokio::spawn(conn);
                let result = f(NetlinkNs { handle, ns_name }).await;
                conn.abort();
                Ok(result)
            })
        })?
    }

    /// The rtnetlink handle, for requests this module has no method for.
    pub(crate) fn handle(&self) -> Handle {
        self.handle.clone()
    }

    fn ctx(&self, what: &str) -> String {
        format!("{what} in namespace {}", self.ns_name)
    }

    /// RTM_NEWLINK creating `msg`'s link; `what` names it in the error.
    async fn add_link(&self, msg: LinkMessage, what: impl FnOnce() -> String) -> Result<()> {
        self.handle
            .link()
            .add(msg)
            .execute()
            .await
            .with_context(what)
    }

    /// RTM_NEWROUTE adding `msg`'s route; `what` names it in the error.
    async fn add_route(
        &self,
        msg: netlink_packet_route::route::RouteMessage,
        what: impl FnOnce() -> String,
    ) -> Result<()> {
        self.handle
            .route()
            .add(msg)
            .execute()
            .await
            .with_context(what)
    }

    pub async fn index_of(&self, name: &str) -> Result<u32> {
        let link = self
            .handle
            .link()
            .get()
            .match_name(name.to_string())
            .execute()
            .try_next()
            .await
            .with_context(|| self.ctx(&format!("looking up link {name}")))?
            .ok_or_else(|| anyhow!("{}", self.ctx(&format!("no link {name}"))))?;
        Ok(link.header.index)
    }

    pub async fn set_up(&self, name: &str) -> Result<()> {
        let index = self.index_of(name).await?;
        self.handle
            .link()
            .set(LinkUnspec::new_with_index(index).up().build())
            .execute()
            .await
            .with_context(|| self.ctx(&format!("setting {name} up")))
    }

    /// Deletes the link `name` (for a veth, its peer goes with it).
    pub async fn delete_link(&self, name: &str) -> Result<()> {
        let index = self.index_of(name).await?;
        self.handle
            .link()
            .del(index)
            .execute()
            .await
            .with_context(|| self.ctx(&format!("deleting link {name}")))
    }

    /// Creates a veth pair: `local` here, `peer` directly inside `peer_ns`, each with a fixed
    /// MAC, and optionally enslaves `local` to the bridge `controller`.
    pub async fn add_veth(
        &self,
        local: &str,
        local_mac: [u8; 6],
        peer: &str,
        peer_mac: [u8; 6],
        peer_ns: &Netns,
    ) -> Result<()> {
        let ns_file = std::fs::File::open(peer_ns.path())
            .with_context(|| format!("opening {}", peer_ns.path().display()))?;
        let peer_msg: LinkMessage = LinkUnspec::new_with_name(peer)
            .address(peer_mac.to_vec())
            .setns_by_fd(ns_file.as_raw_fd())
            .build();
        // The builder's own peer carries only a name; ours also carries netns and MAC.
        let msg = LinkVeth::new(local, peer)
            .address(local_mac.to_vec())
            .set_info_data(InfoData::Veth(InfoVeth::Peer(peer_msg)))
            .build();
        self.add_link(msg, || {
            self.ctx(&format!(
                "creating veth {local} <-> {peer} (in {})",
                peer_ns.name()
            ))
        })
        .await
    }

    pub async fn add_bridge(&self, name: &str, mac: [u8; 6]) -> Result<()> {
        let msg = LinkBridge::new(name).address(mac.to_vec()).build();
        self.add_link(msg, || self.ctx(&format!("creating bridge {name}")))
            .await
    }

    pub async fn enslave(&self, port: &str, bridge: &str) -> Result<()> {
        let port_index = self.index_of(port).await?;
        let bridge_index = self.index_of(bridge).await?;
        self.handle
            .link()
            .set(
                LinkUnspec::new_with_index(port_index)
                    .controller(bridge_index)
                    .build(),
            )
            .execute()
            .await
            .with_context(|| self.ctx(&format!("attaching {port} to {bridge}")))
    }

    /// Lets the bridge send a frame back out of the port it came in on — what flannel's CNI
    /// config (`"hairpinMode": true`) does for every pod port, so a pod can reach itself
    /// through its own Service (the DNATed packet is bridged back by br_netfilter).
    pub async fn set_hairpin(&self, port: &str) -> Result<()> {
        use netlink_packet_route::link::{InfoBridgePort, InfoPortData, InfoPortKind};
        let index = self.index_of(port).await?;
        let msg = LinkUnspec::new_with_index(index)
            .set_port_kind(InfoPortKind::Bridge)
            .set_port_data(InfoPortData::BridgePort(vec![InfoBridgePort::HairpinMode(
                true,
            )]))
            .build();
        // RTM_NEWLINK on the existing link: RTM_SETLINK ignores bridge-port (slave) data.
        self.handle
            .link()
            .change(msg)
            .execute()
            .await
            .with_context(|| self.ctx(&format!("enabling hairpin mode on {port}")))
    }

    /// A flannel-style VXLAN device: no learning (flannel programs FDB and neighbours itself).
    /// Its outer family is `local`'s: an IPv6 one tunnels over IPv6, as flannel's IPv6 vxlan
    /// backend does.
    pub async fn add_vxlan(
        &self,
        name: &str,
        mac: [u8; 6],
        vni: u32,
        local: IpAddr,
        dev: &str,
        port: u16,
    ) -> Result<()> {
        let dev_index = self.index_of(dev).await?;
        let msg = LinkVxlan::new(name, vni);
        let msg = match local {
            IpAddr::V4(v4) => msg.local(v4),
            IpAddr::V6(v6) => msg.local6(v6),
        };
        let msg = msg
            .dev(dev_index)
            .port(port)
            .learning(false)
            .address(mac.to_vec())
            .build();
        self.add_link(msg, || {
            self.ctx(&format!("creating vxlan {name} (VNI {vni}, port {port})"))
        })
        .await
    }

    /// Adds an address; an IPv6 one without duplicate address detection (`nodad`), so it is
    /// usable at once and puts no neighbour solicitation on the wire.
    pub async fn add_address(
        &self,
        dev: &str,
        addr: impl Into<IpAddr>,
        prefix_len: u8,
    ) -> Result<()> {
        let addr = addr.into();
        let index = self.index_of(dev).await?;
        let mut req = self.handle.address().add(index, addr, prefix_len);
        if addr.is_ipv6() {
            req.message_mut().header.flags |= AddressHeaderFlags::Nodad;
        }
        req.execute()
            .await
            .with_context(|| self.ctx(&format!("adding {addr}/{prefix_len} to {dev}")))
    }

    /// Adds `addr` beside the interface's address of its family, never to be the node's source
    /// address: an IPv4 one added later is kernel-secondary; an IPv6 one is added deprecated
    /// (preferred lifetime 0, valid forever, as `ip addr add … preferred_lft 0`), which source
    /// address selection avoids (RFC 6724 rule 3). It still receives.
    pub async fn add_secondary_address(
        &self,
        dev: &str,
        addr: IpAddr,
        prefix_len: u8,
    ) -> Result<()> {
        if addr.is_ipv4() {
            return self.add_address(dev, addr, prefix_len).await;
        }
        let index = self.index_of(dev).await?;
        let mut req = self.handle.address().add(index, addr, prefix_len);
        let message = req.message_mut();
        message.header.flags |= AddressHeaderFlags::Nodad;
        let mut lifetimes = CacheInfo::default();
        lifetimes.ifa_preferred = 0;
        lifetimes.ifa_valid = u32::MAX;
        message
            .attributes
            .push(AddressAttribute::CacheInfo(lifetimes));
        req.execute()
            .await
            .with_context(|| self.ctx(&format!("adding {addr}/{prefix_len} (deprecated) to {dev}")))
    }

    pub async fn add_default_route(&self, gateway: impl Into<IpAddr>) -> Result<()> {
        let gateway = gateway.into();
        let any = match gateway {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
        };
        let invalid = |e| anyhow!("{}", self.ctx(&format!("default route via {gateway}: {e}")));
        let msg = RouteMessageBuilder::<IpAddr>::new()
            .destination_prefix(any, 0)
            .map_err(invalid)?
            .gateway(gateway)
            .map_err(invalid)?
            .build();
        self.add_route(msg, || {
            self.ctx(&format!("adding default route via {gateway}"))
        })
        .await
    }

    /// `ip [-6] route add default dev DEV`: a node's uplink, per family. Real nodes have a
    /// default route, and a node process connecting to a ClusterIP needs one in iptables mode:
    /// routing must succeed before nat OUTPUT rewrites the destination. The underlay only leads
    /// to the suite's own fabric namespace, so nothing can leave through it.
    pub async fn add_default_dev_route(&self, dev: &str, family: IpFamily) -> Result<()> {
        let index = self.index_of(dev).await?;
        let msg = match family {
            IpFamily::Ipv4 => RouteMessageBuilder::<Ipv4Addr>::new()
                .output_interface(index)
                .scope(netlink_packet_route::route::RouteScope::Link)
                .build(),
            IpFamily::Ipv6 => RouteMessageBuilder::<std::net::Ipv6Addr>::new()
                .output_interface(index)
                .build(),
        };
        self.add_route(msg, || {
            self.ctx(&format!("adding {family} default route dev {dev}"))
        })
        .await
    }

    /// `ip route add local IP dev lo table local`: `ip` becomes this namespace's for routing (a
    /// socket may bind it, packets to it are delivered here) without being put on an
    /// interface, so nothing that lists the node's addresses sees it. `false` when a local
    /// route for it is there already (kube-proxy's IPVS mode binds LB IPs to kube-ipvs0).
    pub async fn add_local_route(&self, ip: IpAddr) -> Result<bool> {
        let msg = self.local_route(ip).await?;
        match self.handle.route().add(msg).execute().await {
            Err(rtnetlink::Error::NetlinkError(e)) if -e.raw_code() == libc::EEXIST => Ok(false),
            result => result
                .map(|()| true)
                .with_context(|| self.ctx(&format!("adding local route {ip} dev lo"))),
        }
    }

    /// Removes what [`NetlinkNs::add_local_route`] added.
    pub async fn del_local_route(&self, ip: IpAddr) -> Result<()> {
        let msg = self.local_route(ip).await?;
        self.handle
            .route()
            .del(msg)
            .execute()
            .await
            .with_context(|| self.ctx(&format!("removing local route {ip} dev lo")))
    }

    async fn local_route(&self, ip: IpAddr) -> Result<netlink_packet_route::route::RouteMessage> {
        use netlink_packet_route::route::{RouteScope, RouteType};
        let lo = self.index_of("lo").await?;
        let host = if ip.is_ipv4() { 32 } else { 128 };
        Ok(RouteMessageBuilder::<IpAddr>::new()
            .destination_prefix(ip, host)
            .map_err(|e| anyhow!("{}", self.ctx(&format!("local route {ip}: {e}"))))?
            .output_interface(lo)
            .table_id(u32::from(libc::RT_TABLE_LOCAL))
            .kind(RouteType::Local)
            .scope(RouteScope::Host)
            .build())
    }

    /// `ip route add DST/LEN via GW dev DEV onlink` — flannel's route to a remote pod CIDR.
    pub async fn add_onlink_route(
        &self,
        dst: impl Into<IpAddr>,
        prefix_len: u8,
        gateway: impl Into<IpAddr>,
        dev: &str,
    ) -> Result<()> {
        let (dst, gateway) = (dst.into(), gateway.into());
        let index = self.index_of(dev).await?;
        let invalid = |e| {
            anyhow!(
                "{}",
                self.ctx(&format!("route {dst}/{prefix_len} via {gateway}: {e}"))
            )
        };
        let msg = RouteMessageBuilder::<IpAddr>::new()
            .destination_prefix(dst, prefix_len)
            .map_err(invalid)?
            .gateway(gateway)
            .map_err(invalid)?
            .output_interface(index)
            .onlink()
            .build();
        self.handle
            .route()
            .add(msg)
            .execute()
            .await
            .with_context(|| {
                self.ctx(&format!(
                    "adding route {dst}/{prefix_len} via {gateway} dev {dev} onlink"
                ))
            })
    }

    /// `ip neigh add IP lladdr MAC dev DEV nud permanent`.
    pub async fn add_neighbour(
        &self,
        dev: &str,
        ip: impl Into<IpAddr>,
        mac: [u8; 6],
    ) -> Result<()> {
        let ip = ip.into();
        let index = self.index_of(dev).await?;
        self.handle
            .neighbours()
            .add(index, ip)
            .link_layer_address(&mac)
            .execute()
            .await
            .with_context(|| self.ctx(&format!("adding neighbour {ip} on {dev}")))
    }

    /// `ip neigh flush to IP`: forgets what this namespace learnt of `ip`'s link-layer address
    /// on any device, so the next packet to it asks again.
    pub async fn forget_neighbour(&self, ip: IpAddr) -> Result<()> {
        let mut stale = Vec::new();
        let mut stream = self.handle.neighbours().get().execute();
        while let Some(msg) = stream
            .try_next()
            .await
            .with_context(|| self.ctx("listing neighbours"))?
        {
            let names_ip = msg.attributes.iter().any(|a| match a {
                NeighbourAttribute::Destination(NeighbourAddress::Inet(v4)) => {
                    IpAddr::V4(*v4) == ip
                }
                NeighbourAttribute::Destination(NeighbourAddress::Inet6(v6)) => {
                    IpAddr::V6(*v6) == ip
                }
                _ => false,
            });
            if names_ip {
                stale.push(msg);
            }
        }
        for msg in stale {
            match self.handle.neighbours().del(msg).execute().await {
                // The kernel's own garbage collection may remove a failed or stale entry
                // between the dump and the delete: it is forgotten either way.
                Err(rtnetlink::Error::NetlinkError(e)) if -e.raw_code() == libc::ENOENT => {}
                result => {
                    result.with_context(|| self.ctx(&format!("forgetting neighbour {ip}")))?
                }
            }
        }
        Ok(())
    }

    /// `bridge fdb append MAC dev DEV dst IP self permanent` — where the VXLAN device sends
    /// frames for a remote VTEP's MAC.
    pub async fn add_fdb(&self, dev: &str, mac: [u8; 6], dst: IpAddr) -> Result<()> {
        let index = self.index_of(dev).await?;
        let mut req = self
            .handle
            .neighbours()
            .add_bridge(index, &mac)
            .flags(NeighbourFlags::Own);
        req.message_mut()
            .attributes
            .push(NeighbourAttribute::Destination(NeighbourAddress::from(dst)));
        req.execute()
            .await
            .with_context(|| self.ctx(&format!("adding FDB entry on {dev} to {dst}")))
    }

    /// Names and MACs of every link, for leak checks and effective-state reports.
    pub async fn links(&self) -> Result<Vec<(String, Option<Vec<u8>>)>> {
        let mut out = Vec::new();
        let mut stream = self.handle.link().get().execute();
        while let Some(msg) = stream
            .try_next()
            .await
            .with_context(|| self.ctx("listing links"))?
        {
            let mut name = None;
            let mut mac = None;
            for attr in msg.attributes {
                match attr {
                    LinkAttribute::IfName(n) => name = Some(n),
                    LinkAttribute::Address(a) => mac = Some(a),
                    _ => {}
                }
            }
            if let Some(name) = name {
                out.push((name, mac));
            }
        }
        Ok(out)
    }
}
