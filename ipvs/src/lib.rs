//! `ipvs-genl`: a typed client for the Linux IPVS generic-netlink family.
mod types;
pub use types::*;
