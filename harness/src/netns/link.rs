//! Whether a link carries frames yet: `ETHTOOL_GLINK`.
//!
//! A fresh veth whose peer is up is `NO-CARRIER, LOWERLAYERDOWN` until the kernel's linkwatch
//! worker gets to it, and a frame sent before that is dropped (its qdisc is still noop). The
//! worker runs when it runs: under load, after the first shot. Asking `ETHTOOL_GLINK` runs the
//! device's pending linkwatch event at once (`ethtool_op_get_link` calls
//! `linkwatch_sync_dev`, net/ethtool/ioctl.c), so the answer is the link's state and the
//! device is running when it says so.

use super::Netns;
use anyhow::{ensure, Context, Result};

impl Netns {
    /// Fails unless every one of `ifaces` of this namespace has link, each synced first (see
    /// the module): after it, a frame sent on them is not dropped for want of a carrier.
    pub fn ensure_links_up(&self, ifaces: &[&str]) -> Result<()> {
        for iface in ifaces {
            let up = self
                .run(|| has_link(iface))?
                .with_context(|| format!("asking {iface} for its link"))?;
            ensure!(up, "{iface} has no link although both its ends are up");
        }
        Ok(())
    }
}

/// Whether `iface` of the calling thread's namespace has link (`ETHTOOL_GLINK`).
pub fn has_link(iface: &str) -> std::io::Result<bool> {
    const ETHTOOL_GLINK: u32 = 0x0000000a;
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    let mut value = EthtoolValue {
        cmd: ETHTOOL_GLINK,
        data: 0,
    };
    // SAFETY: a zeroed ifreq is valid; the name fits (checked) and stays NUL-terminated;
    // `value` outlives the ioctl that writes it, and the socket is closed on every path.
    unsafe {
        let mut req: libc::ifreq = std::mem::zeroed();
        if iface.len() >= req.ifr_name.len() {
            return Err(std::io::Error::other(format!("{iface}: name too long")));
        }
        for (to, from) in req.ifr_name.iter_mut().zip(iface.bytes()) {
            *to = from as libc::c_char;
        }
        req.ifr_ifru.ifru_data = (&mut value as *mut EthtoolValue).cast();
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let rc = libc::ioctl(fd, libc::SIOCETHTOOL, &mut req);
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if rc != 0 {
            return Err(err);
        }
    }
    Ok(value.data != 0)
}
