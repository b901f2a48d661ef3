//! `ipvs-genl`: a typed client for the Linux IPVS generic-netlink family — what `ipvsadm` does,
//! without C.
//!
//! * [`IpvsHandle`] talks to the kernel (services, destinations, timeouts, info, flush), in the
//!   current network namespace or in one given by path.
//! * [`format_save`] / [`format_list`] print a table byte-for-byte like `ipvsadm -Sn` /
//!   `ipvsadm -Ln`; [`parse_save`] reads `ipvsadm -Sn` output back; [`apply`] creates a table.
//! * [`nl`] exposes the wire-level message types.

mod apply;
mod error;
mod format;
mod handle;
pub mod nl;
mod socket;
mod types;

pub use apply::apply;
pub use error::{Errno, Error, Operation, Result};
pub use format::{format_list, format_save, parse_save, ParseError};
pub use handle::{hold_service_changes, IpvsHandle, TableEntry};
pub use types::*;

/// Compiles the README example as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
