//! A reply from the kernel decoded all the way, as [`crate::IpvsHandle`] decodes each: the
//! netlink message, its attributes, and the services, destinations, info and timeouts in it.
//! For the fuzz target of this decoding (`kpct`'s `fuzz_surfaces::ipvs_netlink`).

use super::attrs::CmdAttr;
use super::convert;
use super::message::IpvsMessage;
use crate::types::{DestinationState, Info, ServiceState, Timeouts};
use netlink_packet_core::{NetlinkMessage, NetlinkPayload};
use netlink_packet_generic::GenlMessage;

/// Everything one reply holds, each part as its decoding ended.
#[derive(Debug)]
pub struct Decoded {
    pub services: Vec<Result<ServiceState, String>>,
    /// Each destination decoded under an IPv4 service and under an IPv6 one (its address
    /// family defaults to its service's).
    pub destinations: Vec<[Result<DestinationState, String>; 2]>,
    pub info: Result<Info, String>,
    pub timeouts: Timeouts,
}

/// Decodes one netlink message of the IPVS family (`None`: not one, or not a message of it).
pub fn decode_reply(bytes: &[u8]) -> Option<Decoded> {
    let message = NetlinkMessage::<GenlMessage<IpvsMessage>>::deserialize(bytes).ok()?;
    let NetlinkPayload::InnerMessage(genl) = message.payload else {
        return None;
    };
    let attrs = genl.payload.attrs;
    let mut decoded = Decoded {
        services: Vec::new(),
        destinations: Vec::new(),
        info: convert::info_from_attrs(&attrs),
        timeouts: convert::timeouts_from_attrs(&attrs),
    };
    for attr in &attrs {
        match attr {
            CmdAttr::Service(svc) => decoded.services.push(convert::service_from_attrs(svc)),
            CmdAttr::Dest(dest) => decoded.destinations.push([
                convert::destination_from_attrs(dest, false),
                convert::destination_from_attrs(dest, true),
            ]),
            _ => {}
        }
    }
    Some(decoded)
}
