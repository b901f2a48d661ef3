//! A load balancer IP a node's socket sends from (`from: {node, address}`), made the node's for
//! the probe's shots. A node's connection to its own LB IP leaves from that IP when something
//! outside kube-proxy SNATs it there; kpct stands in for that something with a local route, so
//! the socket may bind the IP and the answer, un-NATed back to it, is delivered to the socket.
//! No interface carries the IP, so what a proxier lists as the node's addresses is unchanged.

use crate::netns::Netns;
use crate::topology::link::NetlinkNs;
use anyhow::{Context, Result};
use std::net::IpAddr;

pub(super) struct BorrowedAddress<'n> {
    ns: &'n Netns,
    ip: IpAddr,
    /// Whether kpct added the route (not when the proxier made the IP local already, as IPVS
    /// mode does on kube-ipvs0); only then is it kpct's to remove.
    added: bool,
}

impl<'n> BorrowedAddress<'n> {
    pub(super) fn hold(ns: &'n Netns, ip: IpAddr) -> Result<BorrowedAddress<'n>> {
        let added = NetlinkNs::blocking(ns, move |nl| async move { nl.add_local_route(ip).await })
            .and_then(|r| r)
            .with_context(|| format!("making {ip} a local address to send from"))?;
        Ok(BorrowedAddress { ns, ip, added })
    }

    /// Gives the address back; the node is then as the proxier left it.
    pub(super) fn release(mut self) -> Result<()> {
        self.remove()
    }

    fn remove(&mut self) -> Result<()> {
        if !std::mem::take(&mut self.added) {
            return Ok(());
        }
        let ip = self.ip;
        NetlinkNs::blocking(
            self.ns,
            move |nl| async move { nl.del_local_route(ip).await },
        )?
    }
}

impl Drop for BorrowedAddress<'_> {
    /// On an error path: best effort, the namespace goes with the run anyway.
    fn drop(&mut self) {
        let _ = self.remove();
    }
}
