//! Wire layer: the IPVS generic netlink family as netlink-packet-* types.
//!
//! Public so that callers can inspect or build raw messages (and so the encoding can be tested
//! against golden bytes), but most users want [`crate::IpvsHandle`].

pub mod attrs;
pub mod constants;
pub(crate) mod convert;
pub mod decode;
pub mod message;

pub use attrs::{CmdAttr, DestAttr, FlagsMask, InfoAttr, StatsNest, StatsWidth, SvcAttr};
pub use decode::{decode_reply, Decoded};
pub use message::{IpvsCmd, IpvsMessage};

#[cfg(test)]
mod tests;
