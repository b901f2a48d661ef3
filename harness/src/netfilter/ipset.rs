//! Whether a namespace holds any ipset (what an empty `ipset save` would say), over the ipset
//! nfnetlink subsystem. `netlink-packet-netfilter` has no ipset messages, so this request is
//! its generic form: the subsystem, the command and one attribute.

use super::socket::{carried, dump, message, Message};
use crate::netns::Netns;
use netlink_packet_core::{DefaultNla, NLM_F_DUMP, NLM_F_REQUEST};
use netlink_packet_netfilter::{NetfilterMessageInner, NetfilterProtoFamily, NetfilterSubsystem};

/// `include/uapi/linux/netfilter/nfnetlink.h`: NFNL_SUBSYS_IPSET.
const NFNL_SUBSYS_IPSET: u8 = 6;
/// `include/uapi/linux/netfilter/ipset/ip_set.h`: IPSET_CMD_LIST, and IPSET_ATTR_PROTOCOL with
/// the oldest protocol the kernel accepts (IPSET_PROTOCOL_MIN; ip_set_core.c refuses a request
/// without it).
const IPSET_CMD_LIST: u8 = 7;
const IPSET_ATTR_PROTOCOL: u16 = 1;
const IPSET_PROTOCOL_MIN: u8 = 6;

/// Whether `ns` holds no ipset, so that `ipset save` would print nothing. `None` when the
/// kernel could not say (then ask the tool).
pub fn holds_no_ipsets(ns: &Netns) -> Option<bool> {
    let replies = dump(ns, &list_request()).ok()?;
    Some(!replies.iter().any(|m| carried(m).is_some()))
}

/// IPSET_CMD_LIST of every set, with the protocol attribute the kernel requires.
fn list_request() -> Message {
    message(
        NetfilterProtoFamily::IPv4,
        0,
        NetfilterMessageInner::Other {
            subsys: NetfilterSubsystem::Other(NFNL_SUBSYS_IPSET),
            message_type: IPSET_CMD_LIST,
            attributes: vec![DefaultNla::new(
                IPSET_ATTR_PROTOCOL,
                vec![IPSET_PROTOCOL_MIN],
            )],
        },
        NLM_F_REQUEST | NLM_F_DUMP,
        1,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netfilter::socket::encode;

    /// The bytes the hand-written request always had: a padded u8 protocol attribute.
    #[test]
    fn the_list_request_carries_the_protocol_as_a_padded_u8() {
        let bytes = encode(&[list_request()]);
        assert_eq!(bytes.len(), 28);
        assert_eq!(bytes[4..6], 0x0607u16.to_ne_bytes());
        assert_eq!(bytes[16..20], [2, 0, 0, 0]);
        assert_eq!(bytes[20..], [5, 0, 1, 0, 6, 0, 0, 0]);
    }
}
