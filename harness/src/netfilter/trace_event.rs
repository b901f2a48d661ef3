//! nf_tables trace events (`NFT_MSG_TRACE`), which `netlink-packet-netfilter` hands over as
//! raw attributes: this reads the few a drop verdict needs (`include/uapi/linux/netfilter/
//! nf_tables.h`, `enum nft_trace_attributes`).

use super::verdict_table::NF_DROP;
use netlink_packet_core::{DefaultNla, Nla, NlasIterator};

const NFTA_TRACE_TABLE: u16 = 1;
const NFTA_TRACE_CHAIN: u16 = 2;
const NFTA_TRACE_RULE_HANDLE: u16 = 3;
const NFTA_TRACE_TYPE: u16 = 4;
const NFTA_TRACE_VERDICT: u16 = 5;
const NFTA_TRACE_ID: u16 = 6;
const NFTA_TRACE_NETWORK_HEADER: u16 = 8;
const NFTA_TRACE_TRANSPORT_HEADER: u16 = 9;
const NFTA_TRACE_POLICY: u16 = 16;
const NFTA_VERDICT_CODE: u16 = 1;
const NFT_TRACETYPE_POLICY: u32 = 1;
const NLA_TYPE_MASK: u16 = 0x3fff;

/// One nf_tables trace event: where the packet was, what was decided, and — on the first event
/// of each base chain the packet enters — its headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TraceEvent {
    pub id: u32,
    /// The family of the table (`NFPROTO_*`), which names it with its name.
    pub family: u8,
    pub table: String,
    pub chain: String,
    pub rule_handle: Option<u64>,
    /// The rule's verdict was DROP, or the base chain's policy dropped it.
    pub drop: bool,
    /// The IPv4 or IPv6 header (at most 40 bytes) and the transport header with what follows
    /// it (at most 20 bytes), when this event carries the packet.
    pub network: Option<Vec<u8>>,
    pub transport: Option<Vec<u8>>,
}

fn value(nla: &DefaultNla) -> Vec<u8> {
    let mut v = vec![0u8; nla.value_len()];
    nla.emit_value(&mut v);
    v
}

fn be32(value: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(value.get(..4)?.try_into().ok()?))
}

fn text(value: &[u8]) -> String {
    let bytes = value.split(|b| *b == 0).next().unwrap_or_default();
    String::from_utf8_lossy(bytes).into_owned()
}

/// The event of a trace message of table family `family` with `attributes`; `None` without
/// its trace id.
pub(crate) fn parse(family: u8, attributes: &[DefaultNla]) -> Option<TraceEvent> {
    let mut event = TraceEvent {
        family,
        ..TraceEvent::default()
    };
    let (mut kind, mut verdict, mut policy, mut id) = (None, None, None, None);
    for attribute in attributes {
        let v = value(attribute);
        match attribute.kind() & NLA_TYPE_MASK {
            NFTA_TRACE_TABLE => event.table = text(&v),
            NFTA_TRACE_CHAIN => event.chain = text(&v),
            NFTA_TRACE_RULE_HANDLE => {
                event.rule_handle = v
                    .get(..8)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_be_bytes)
            }
            NFTA_TRACE_TYPE => kind = be32(&v),
            NFTA_TRACE_ID => id = be32(&v),
            NFTA_TRACE_VERDICT => {
                verdict = NlasIterator::new(&v[..])
                    .filter_map(Result::ok)
                    .find(|a| a.kind() == NFTA_VERDICT_CODE)
                    .and_then(|a| be32(a.value()))
            }
            NFTA_TRACE_POLICY => policy = be32(&v),
            NFTA_TRACE_NETWORK_HEADER => event.network = Some(v),
            NFTA_TRACE_TRANSPORT_HEADER => event.transport = Some(v),
            _ => {}
        }
    }
    event.id = id?;
    event.drop = if kind == Some(NFT_TRACETYPE_POLICY) {
        policy == Some(NF_DROP)
    } else {
        verdict == Some(NF_DROP)
    };
    Some(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn be(kind: u16, v: u32) -> DefaultNla {
        DefaultNla::new(kind, v.to_be_bytes().to_vec())
    }

    fn string(kind: u16, s: &str) -> DefaultNla {
        let mut v = s.as_bytes().to_vec();
        v.push(0);
        DefaultNla::new(kind, v)
    }

    /// NFTA_TRACE_VERDICT, nested: its NFTA_VERDICT_CODE.
    fn verdict(code: u32) -> DefaultNla {
        let mut v = 8u16.to_ne_bytes().to_vec();
        v.extend(NFTA_VERDICT_CODE.to_ne_bytes());
        v.extend(code.to_be_bytes());
        DefaultNla::new(NFTA_TRACE_VERDICT | 0x8000, v)
    }

    #[test]
    fn a_rule_drop_and_a_policy_drop_are_drops_and_carry_their_headers() {
        let rule = |code: u32| {
            vec![
                string(NFTA_TRACE_TABLE, "filter"),
                string(NFTA_TRACE_CHAIN, "KUBE-FIREWALL"),
                DefaultNla::new(NFTA_TRACE_RULE_HANDLE, 7u64.to_be_bytes().to_vec()),
                be(NFTA_TRACE_TYPE, 3),
                verdict(code),
                be(NFTA_TRACE_ID, 0xabcd),
                DefaultNla::new(NFTA_TRACE_NETWORK_HEADER, vec![0x45; 20]),
                DefaultNla::new(NFTA_TRACE_TRANSPORT_HEADER, vec![1; 20]),
            ]
        };
        let dropped = parse(1, &rule(NF_DROP)).unwrap();
        assert!(dropped.drop);
        assert_eq!((dropped.id, dropped.family), (0xabcd, 1));
        assert_eq!(
            (dropped.table.as_str(), dropped.chain.as_str()),
            ("filter", "KUBE-FIREWALL")
        );
        assert_eq!(dropped.rule_handle, Some(7));
        assert_eq!(dropped.network.as_deref(), Some(&[0x45; 20][..]));
        assert_eq!(dropped.transport.as_deref(), Some(&[1; 20][..]));
        assert!(!parse(1, &rule(1)).unwrap().drop, "ACCEPT");
        // NFT_JUMP is -3: a jump is not a drop.
        assert!(!parse(1, &rule((-3i32) as u32)).unwrap().drop);

        let policy = |p: u32| {
            vec![
                be(NFTA_TRACE_TYPE, NFT_TRACETYPE_POLICY),
                be(NFTA_TRACE_ID, 1),
                be(NFTA_TRACE_POLICY, p),
            ]
        };
        assert!(parse(1, &policy(NF_DROP)).unwrap().drop);
        assert!(!parse(1, &policy(1)).unwrap().drop);
        assert_eq!(parse(1, &[be(NFTA_TRACE_TYPE, 3)]), None, "no trace id");
    }
}
