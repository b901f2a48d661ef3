//! The nf_tables netlink this needs, spoken directly (no `nft` process per probe): one batch
//! creating a table owned by the calling socket, and the trace events the kernel multicasts to
//! NFNLGRP_NFTRACE. Numbers are from include/uapi/linux/netfilter/nf_tables.h and
//! nfnetlink.h.

pub(super) use crate::nfnetlink::NLMSG_ERROR;
use crate::nfnetlink::{NFNL_SUBSYS_NFTABLES, NFT_MSG_NEWTABLE, NLM_F_ACK, NLM_F_REQUEST};

const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
const NFT_MSG_DELTABLE: u16 = 2;
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_NEWRULE: u16 = 6;
const NFT_MSG_GETRULE: u16 = 7;
const NFT_MSG_DELRULE: u16 = 8;
/// The message type of a rule, as GETRULE returns it.
pub(super) const RULE: u16 = nft(NFT_MSG_NEWRULE);
const NFT_MSG_TRACE: u16 = 17;
/// The message type of a trace event.
pub(super) const TRACE_EVENT: u16 = nft(NFT_MSG_TRACE);
pub(super) const NFNLGRP_NFTRACE: u32 = 9;

const NLM_F_CREATE: u16 = 0x400;
const NLM_F_APPEND: u16 = 0x800;
const NLA_F_NESTED: u16 = 0x8000;
const NLA_TYPE_MASK: u16 = 0x3fff;
pub(super) const NFPROTO_INET: u8 = 1;

const NFTA_TABLE_NAME: u16 = 1;
const NFTA_TABLE_FLAGS: u16 = 2;
/// The table lives as long as the netlink socket that created it (Linux 5.12).
const NFT_TABLE_F_OWNER: u32 = 2;
const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_CHAIN_HOOK: u16 = 4;
const NFTA_CHAIN_TYPE: u16 = 7;
const NFTA_HOOK_HOOKNUM: u16 = 1;
const NFTA_HOOK_PRIORITY: u16 = 2;
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_HANDLE: u16 = 3;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
const NFTA_IMMEDIATE_DREG: u16 = 1;
const NFTA_LOOKUP_DREG: u16 = 3;
/// The verdict register: a lookup that writes it is a verdict map (`vmap`).
const NFT_REG_VERDICT: u32 = 0;
const NFTA_IMMEDIATE_DATA: u16 = 2;
const NFTA_DATA_VALUE: u16 = 1;
const NFTA_DATA_VERDICT: u16 = 2;
const NFTA_META_DREG: u16 = 1;
const NFTA_META_KEY: u16 = 2;
const NFTA_META_SREG: u16 = 3;
const NFT_META_NFTRACE: u32 = 12;
const NFT_META_L4PROTO: u32 = 16;
const NFTA_CMP_SREG: u16 = 1;
const NFTA_CMP_OP: u16 = 2;
const NFTA_CMP_DATA: u16 = 3;
const NFT_CMP_EQ: u32 = 0;
const NFTA_PAYLOAD_DREG: u16 = 1;
const NFTA_PAYLOAD_BASE: u16 = 2;
const NFTA_PAYLOAD_OFFSET: u16 = 3;
const NFTA_PAYLOAD_LEN: u16 = 4;
const NFT_PAYLOAD_TRANSPORT_HEADER: u32 = 2;
const NFT_REG_1: u32 = 1;

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
const NF_DROP: u32 = 0;

/// A netfilter hook a chain of the table attaches to (`enum nf_inet_hooks`).
#[derive(Debug, Clone, Copy)]
pub(super) enum Hook {
    Prerouting = 0,
    Output = 3,
}

/// Packets a chain sets the `nftrace` bit of, one rule each: only the current shot's first
/// packet and ICMP errors, because tracing costs the kernel a netlink message for every rule a
/// traced packet meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Marking {
    /// `tcp sequence == ISN`: the TCP shot's SYN, translated or not.
    TcpSequence(u32),
    /// `udp sport == PORT`: the UDP shot's datagram (its marker lies past what a rule can
    /// cheaply match).
    UdpSourcePort(u16),
    /// `meta l4proto icmp`, `meta l4proto ipv6-icmp`: errors that may answer a shot.
    Icmp,
}

/// A base chain of the table: where it hooks, at which priority, and whether it marks the
/// packets of each shot ([`set_shot`]; otherwise it never has a rule, and is there to be traced
/// itself). Every chain is created empty: a table with no marking rule traces nothing.
#[derive(Debug, Clone, Copy)]
pub(super) struct Chain {
    pub name: &'static str,
    pub hook: Hook,
    pub priority: i32,
    pub marks: bool,
}

/// Netlink attributes being written, each padded to 4 bytes.
#[derive(Default)]
struct Attributes(Vec<u8>);

impl Attributes {
    fn put(mut self, kind: u16, value: &[u8]) -> Self {
        let len = u16::try_from(4 + value.len()).unwrap_or(u16::MAX);
        self.0.extend_from_slice(&len.to_ne_bytes());
        self.0.extend_from_slice(&kind.to_ne_bytes());
        self.0.extend_from_slice(value);
        while !self.0.len().is_multiple_of(4) {
            self.0.push(0);
        }
        self
    }

    fn string(self, kind: u16, value: &str) -> Self {
        let mut bytes = value.as_bytes().to_vec();
        bytes.push(0);
        self.put(kind, &bytes)
    }

    fn be32(self, kind: u16, value: u32) -> Self {
        self.put(kind, &value.to_be_bytes())
    }

    fn nested(self, kind: u16, inner: Attributes) -> Self {
        self.put(kind | NLA_F_NESTED, &inner.0)
    }
}

/// A netlink message with its `struct nfgenmsg` (family, NFNETLINK_V0, res_id).
fn message(kind: u16, flags: u16, seq: u32, family: u8, res_id: u16, body: &Attributes) -> Vec<u8> {
    let len = u32::try_from(16 + 4 + body.0.len()).unwrap_or(u32::MAX);
    let mut m = Vec::with_capacity(len as usize);
    m.extend_from_slice(&len.to_ne_bytes());
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.push(family);
    m.push(0);
    m.extend_from_slice(&res_id.to_be_bytes());
    m.extend_from_slice(&body.0);
    m
}

const fn nft(kind: u16) -> u16 {
    (NFNL_SUBSYS_NFTABLES << 8) | kind
}

/// One expression: its name and its attributes.
fn expression(name: &str, data: Attributes) -> Attributes {
    Attributes::default()
        .string(NFTA_EXPR_NAME, name)
        .nested(NFTA_EXPR_DATA, data)
}

/// `data` as an `NFTA_DATA_VALUE`.
fn value(data: &[u8]) -> Attributes {
    Attributes::default().put(NFTA_DATA_VALUE, data)
}

/// Register 1 compared with `data` (`NFT_CMP_EQ` or `NFT_CMP_NEQ`).
fn compare(op: u32, data: &[u8]) -> Attributes {
    expression(
        "cmp",
        Attributes::default()
            .be32(NFTA_CMP_SREG, NFT_REG_1)
            .be32(NFTA_CMP_OP, op)
            .nested(NFTA_CMP_DATA, value(data)),
    )
}

/// The packet's layer 4 protocol into register 1.
fn load_l4proto() -> Attributes {
    expression(
        "meta",
        Attributes::default()
            .be32(NFTA_META_DREG, NFT_REG_1)
            .be32(NFTA_META_KEY, NFT_META_L4PROTO),
    )
}

/// `meta nftrace set 1`: load 1 into register 1, then set the bit from it.
fn set_nftrace() -> [Attributes; 2] {
    [
        expression(
            "immediate",
            Attributes::default()
                .be32(NFTA_IMMEDIATE_DREG, NFT_REG_1)
                .nested(NFTA_IMMEDIATE_DATA, value(&[1])),
        ),
        expression(
            "meta",
            Attributes::default()
                .be32(NFTA_META_KEY, NFT_META_NFTRACE)
                .be32(NFTA_META_SREG, NFT_REG_1),
        ),
    ]
}

/// The rules marking `what`, as expression lists.
fn marking_rules(what: Marking) -> Vec<Attributes> {
    const TCP: u8 = 6;
    const UDP: u8 = 17;
    let field = |offset: u32, len: u32| {
        expression(
            "payload",
            Attributes::default()
                .be32(NFTA_PAYLOAD_DREG, NFT_REG_1)
                .be32(NFTA_PAYLOAD_BASE, NFT_PAYLOAD_TRANSPORT_HEADER)
                .be32(NFTA_PAYLOAD_OFFSET, offset)
                .be32(NFTA_PAYLOAD_LEN, len),
        )
    };
    let matchings = match what {
        Marking::TcpSequence(seq) => vec![vec![
            load_l4proto(),
            compare(NFT_CMP_EQ, &[TCP]),
            field(4, 4),
            compare(NFT_CMP_EQ, &seq.to_be_bytes()),
        ]],
        Marking::UdpSourcePort(port) => vec![vec![
            load_l4proto(),
            compare(NFT_CMP_EQ, &[UDP]),
            field(0, 2),
            compare(NFT_CMP_EQ, &port.to_be_bytes()),
        ]],
        Marking::Icmp => [1u8, 58]
            .into_iter()
            .map(|protocol| vec![load_l4proto(), compare(NFT_CMP_EQ, &[protocol])])
            .collect(),
    };
    matchings
        .into_iter()
        .map(|matching| {
            matching
                .iter()
                .chain(set_nftrace().iter())
                .fold(Attributes::default(), |list, e| {
                    list.put(NFTA_LIST_ELEM | NLA_F_NESTED, &e.0)
                })
        })
        .collect()
}

/// NEWRULE messages appending `marks` to `chain`.
fn append_rules(table: &str, chain: &str, marks: &[Marking]) -> Vec<(u16, u16, Attributes)> {
    marks
        .iter()
        .flat_map(|what| marking_rules(*what))
        .map(|rule| {
            (
                NFT_MSG_NEWRULE,
                NLM_F_CREATE | NLM_F_APPEND,
                Attributes::default()
                    .string(NFTA_RULE_TABLE, table)
                    .string(NFTA_RULE_CHAIN, chain)
                    .nested(NFTA_RULE_EXPRESSIONS, rule),
            )
        })
        .collect()
}

/// One transaction giving every marking chain of `table` the rules marking `marks` instead
/// of what it had (DELRULE with no handle empties a chain).
pub(super) fn set_shot(table: &str, chains: &[Chain], marks: &[Marking]) -> (Vec<u8>, Vec<u32>) {
    let mut messages = Vec::new();
    for chain in chains.iter().filter(|c| c.marks) {
        messages.push((
            NFT_MSG_DELRULE,
            0,
            Attributes::default()
                .string(NFTA_RULE_TABLE, table)
                .string(NFTA_RULE_CHAIN, chain.name),
        ));
        messages.extend(append_rules(table, chain.name, marks));
    }
    transaction(messages)
}

/// A transaction of `messages` (type, flags, attributes), each acknowledged; returns the batch
/// and the sequence numbers the kernel acknowledges.
fn transaction(messages: Vec<(u16, u16, Attributes)>) -> (Vec<u8>, Vec<u32>) {
    let mut batch = message(
        NFNL_MSG_BATCH_BEGIN,
        NLM_F_REQUEST,
        0,
        0,
        NFNL_SUBSYS_NFTABLES,
        &Attributes::default(),
    );
    let mut acked = Vec::new();
    for (seq, (kind, flags, body)) in (1..).zip(messages) {
        batch.extend(message(
            nft(kind),
            flags | NLM_F_REQUEST | NLM_F_ACK,
            seq,
            NFPROTO_INET,
            0,
            &body,
        ));
        acked.push(seq);
    }
    let end = u32::try_from(acked.len() + 1).unwrap_or(u32::MAX);
    batch.extend(message(
        NFNL_MSG_BATCH_END,
        NLM_F_REQUEST,
        end,
        0,
        NFNL_SUBSYS_NFTABLES,
        &Attributes::default(),
    ));
    (batch, acked)
}

/// One transaction deleting `table` (family inet).
pub(super) fn delete_table(table: &str) -> (Vec<u8>, Vec<u32>) {
    transaction(vec![(
        NFT_MSG_DELTABLE,
        0,
        Attributes::default().string(NFTA_TABLE_NAME, table),
    )])
}

/// One transaction creating `table` (family inet, owned by the sending socket) with `chains`,
/// all empty.
/// Returns the batch and the sequence numbers the kernel acknowledges.
pub(super) fn create_table(table: &str, chains: &[Chain]) -> (Vec<u8>, Vec<u32>) {
    let mut messages = vec![(
        NFT_MSG_NEWTABLE,
        NLM_F_CREATE,
        Attributes::default()
            .string(NFTA_TABLE_NAME, table)
            .be32(NFTA_TABLE_FLAGS, NFT_TABLE_F_OWNER),
    )];
    for chain in chains {
        let hook = Attributes::default()
            .be32(NFTA_HOOK_HOOKNUM, chain.hook as u32)
            .be32(NFTA_HOOK_PRIORITY, chain.priority as u32);
        messages.push((
            NFT_MSG_NEWCHAIN,
            NLM_F_CREATE,
            Attributes::default()
                .string(NFTA_CHAIN_TABLE, table)
                .string(NFTA_CHAIN_NAME, chain.name)
                .nested(NFTA_CHAIN_HOOK, hook)
                .string(NFTA_CHAIN_TYPE, "filter"),
        ));
    }
    transaction(messages)
}

/// `(type, sequence number, what follows the header)` of each netlink message in `buf`.
pub(super) fn split(buf: &[u8]) -> Vec<(u16, u32, &[u8])> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 16 <= buf.len() {
        let word = |i: usize| u32::from_ne_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
        let len = word(at) as usize;
        if len < 16 || at + len > buf.len() {
            break;
        }
        let kind = u16::from_ne_bytes([buf[at + 4], buf[at + 5]]);
        out.push((kind, word(at + 8), &buf[at + 16..at + len]));
        at += (len + 3) & !3;
    }
    out
}

/// One nf_tables trace event: where the packet was, what was decided, and — on the first event
/// of each base chain the packet enters — its headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct TraceEvent {
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

/// `(type, value)` of each attribute in `buf`.
fn attributes(buf: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 4 <= buf.len() {
        let len = usize::from(u16::from_ne_bytes([buf[at], buf[at + 1]]));
        let kind = u16::from_ne_bytes([buf[at + 2], buf[at + 3]]) & NLA_TYPE_MASK;
        if len < 4 || at + len > buf.len() {
            break;
        }
        out.push((kind, &buf[at + 4..at + len]));
        at += (len + 3) & !3;
    }
    out
}

fn be32(value: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(value.get(..4)?.try_into().ok()?))
}

fn text(value: &[u8]) -> String {
    let bytes = value.split(|b| *b == 0).next().unwrap_or_default();
    String::from_utf8_lossy(bytes).into_owned()
}

/// Parses the payload (after the netlink header) of an NFT_MSG_TRACE message.
pub(super) fn parse_trace(payload: &[u8]) -> Option<TraceEvent> {
    let mut event = TraceEvent {
        family: *payload.first()?,
        ..TraceEvent::default()
    };
    let mut kind = None;
    let mut verdict = None;
    let mut policy = None;
    for (attribute, value) in attributes(payload.get(4..)?) {
        match attribute {
            NFTA_TRACE_TABLE => event.table = text(value),
            NFTA_TRACE_CHAIN => event.chain = text(value),
            NFTA_TRACE_RULE_HANDLE => {
                event.rule_handle = value
                    .get(..8)
                    .map(|v| u64::from_be_bytes(v.try_into().unwrap_or_default()))
            }
            NFTA_TRACE_TYPE => kind = be32(value),
            NFTA_TRACE_ID => event.id = be32(value)?,
            NFTA_TRACE_VERDICT => {
                verdict = attributes(value)
                    .into_iter()
                    .find(|(k, _)| *k == NFTA_VERDICT_CODE)
                    .and_then(|(_, v)| be32(v))
            }
            NFTA_TRACE_POLICY => policy = be32(value),
            NFTA_TRACE_NETWORK_HEADER => event.network = Some(value.to_vec()),
            NFTA_TRACE_TRANSPORT_HEADER => event.transport = Some(value.to_vec()),
            _ => {}
        }
    }
    event.drop = if kind == Some(NFT_TRACETYPE_POLICY) {
        policy == Some(NF_DROP)
    } else {
        verdict == Some(NF_DROP)
    };
    Some(event)
}

/// A GETRULE request for one rule, acknowledged.
pub(super) fn get_rule(family: u8, table: &str, chain: &str, handle: u64, seq: u32) -> Vec<u8> {
    let body = Attributes::default()
        .string(NFTA_RULE_TABLE, table)
        .string(NFTA_RULE_CHAIN, chain)
        .put(NFTA_RULE_HANDLE, &handle.to_be_bytes());
    message(
        nft(NFT_MSG_GETRULE),
        NLM_F_REQUEST | NLM_F_ACK,
        seq,
        family,
        0,
        &body,
    )
}

/// Expressions that send a packet of their own (REJECT, any xtables target, duplication,
/// forwarding, SYN proxying) or hand it to user space: after them a DROP does not mean that
/// nothing more comes.
const SENDING: [&str; 6] = ["reject", "target", "dup", "fwd", "synproxy", "queue"];

/// Whether the rule (the payload of a NEWRULE message), which the trace says dropped, drops
/// with a plain DROP verdict — an `immediate` of NF_DROP (iptables' `-j DROP`, nftables'
/// `drop`), or a verdict map's `drop` element (`vmap`: the map gave the DROP, and an element
/// holds a verdict only, never a reject; kube-proxy's nftables `no-endpoint-services` drops
/// so) — and has no expression that sends anything.
pub(super) fn is_plain_drop(rule: &[u8]) -> bool {
    let Some(body) = rule.get(4..) else {
        return false;
    };
    let Some((_, expressions)) = attributes(body)
        .into_iter()
        .find(|(k, _)| *k == NFTA_RULE_EXPRESSIONS)
    else {
        return false;
    };
    let mut drops = false;
    for (_, expression) in attributes(expressions) {
        let fields = attributes(expression);
        let name = fields
            .iter()
            .find(|(k, _)| *k == NFTA_EXPR_NAME)
            .map(|(_, v)| text(v))
            .unwrap_or_default();
        if SENDING.contains(&name.as_str()) {
            return false;
        }
        if name == "immediate" {
            let verdict = fields
                .iter()
                .find(|(k, _)| *k == NFTA_EXPR_DATA)
                .and_then(|(_, data)| nested(data, NFTA_IMMEDIATE_DATA))
                .and_then(|data| nested(data, NFTA_DATA_VERDICT))
                .and_then(|verdict| nested(verdict, NFTA_VERDICT_CODE))
                .and_then(be32);
            drops |= verdict == Some(NF_DROP);
        }
        if name == "lookup" {
            let dreg = fields
                .iter()
                .find(|(k, _)| *k == NFTA_EXPR_DATA)
                .and_then(|(_, data)| nested(data, NFTA_LOOKUP_DREG))
                .and_then(be32);
            drops |= dreg == Some(NFT_REG_VERDICT);
        }
    }
    drops
}

/// The value of attribute `kind` inside `buf`.
fn nested(buf: &[u8], kind: u16) -> Option<&[u8]> {
    attributes(buf)
        .into_iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_batches_create_empty_chains_and_give_a_shot_its_rules() {
        let chains = [
            Chain {
                name: "mark",
                hook: Hook::Prerouting,
                priority: -500,
                marks: true,
            },
            Chain {
                name: "see",
                hook: Hook::Output,
                priority: 500,
                marks: false,
            },
        ];
        let kinds = |batch: &[u8]| {
            let mut kinds = Vec::new();
            let mut at = 0;
            while at < batch.len() {
                let len = u32::from_ne_bytes(batch[at..at + 4].try_into().unwrap()) as usize;
                kinds.push(u16::from_ne_bytes([batch[at + 4], batch[at + 5]]));
                // res_id of the batch messages names the nf_tables subsystem, big-endian.
                if kinds.len() == 1 {
                    assert_eq!(&batch[at + 18..at + 20], &[0, 10]);
                }
                at += len;
            }
            assert_eq!(at, batch.len());
            kinds
        };
        let (batch, acked) = create_table("t", &chains);
        assert_eq!(acked, vec![1, 2, 3]);
        assert_eq!(
            kinds(&batch),
            vec![0x10, 0x0a00, 0x0a03, 0x0a03, 0x11],
            "begin, table, two empty chains, end"
        );
        let (batch, acked) = set_shot("t", &chains, &[Marking::TcpSequence(7), Marking::Icmp]);
        assert_eq!(acked, vec![1, 2, 3, 4]);
        assert_eq!(
            kinds(&batch),
            vec![0x10, 0x0a08, 0x0a06, 0x0a06, 0x0a06, 0x11],
            "begin, empty the marking chain, the shot's rule and the two ICMP rules, end"
        );
        let (batch, _) = set_shot("t", &chains, &[]);
        assert_eq!(kinds(&batch), vec![0x10, 0x0a08, 0x11], "disarmed");
    }

    /// A NEWRULE payload whose expressions are `(name, data)`.
    fn rule(expressions: Vec<(&str, Attributes)>) -> Vec<u8> {
        let mut list = Attributes::default();
        for (name, data) in expressions {
            list = list.nested(
                NFTA_LIST_ELEM,
                Attributes::default()
                    .string(NFTA_EXPR_NAME, name)
                    .nested(NFTA_EXPR_DATA, data),
            );
        }
        let mut payload = vec![NFPROTO_INET, 0, 0, 0];
        payload.extend(
            Attributes::default()
                .string(NFTA_RULE_TABLE, "filter")
                .nested(NFTA_RULE_EXPRESSIONS, list)
                .0,
        );
        payload
    }

    fn verdict(code: u32) -> Attributes {
        Attributes::default().nested(
            NFTA_IMMEDIATE_DATA,
            Attributes::default().nested(
                NFTA_DATA_VERDICT,
                Attributes::default().be32(NFTA_VERDICT_CODE, code),
            ),
        )
    }

    #[test]
    fn only_a_drop_verdict_with_nothing_sent_is_a_plain_drop() {
        let matching = || ("cmp", Attributes::default().be32(1, 1));
        let counter = || ("counter", Attributes::default());
        assert!(is_plain_drop(&rule(vec![
            matching(),
            counter(),
            ("immediate", verdict(NF_DROP))
        ])));
        assert!(!is_plain_drop(&rule(vec![
            matching(),
            ("immediate", verdict(1))
        ])));
        // iptables-nft's -j REJECT: an xtables target that answers, then drops.
        assert!(!is_plain_drop(&rule(vec![
            matching(),
            ("target", Attributes::default().string(1, "REJECT"))
        ])));
        // nftables' reject.
        assert!(!is_plain_drop(&rule(vec![
            matching(),
            ("reject", Attributes::default())
        ])));
        // A copy sent elsewhere before the drop.
        assert!(!is_plain_drop(&rule(vec![
            ("dup", Attributes::default()),
            ("immediate", verdict(NF_DROP))
        ])));
        assert!(!is_plain_drop(&rule(vec![])));
        // A verdict map (`… vmap @no-endpoint-services`): its element gave the DROP.
        let vmap = |dreg: u32| {
            (
                "lookup",
                Attributes::default()
                    .string(1, "no-endpoint-services")
                    .be32(NFTA_LOOKUP_DREG, dreg),
            )
        };
        assert!(is_plain_drop(&rule(vec![
            matching(),
            vmap(NFT_REG_VERDICT)
        ])));
        // A set lookup into a data register is no verdict.
        assert!(!is_plain_drop(&rule(vec![matching(), vmap(1)])));
        assert!(!is_plain_drop(&rule(vec![
            vmap(NFT_REG_VERDICT),
            ("reject", Attributes::default())
        ])));
    }

    #[test]
    fn a_rule_drop_and_a_policy_drop_are_drops_and_carry_their_headers() {
        let verdict = |code: u32| Attributes::default().be32(NFTA_VERDICT_CODE, code);
        let rule = |code: u32| {
            let body = Attributes::default()
                .string(NFTA_TRACE_TABLE, "filter")
                .string(NFTA_TRACE_CHAIN, "KUBE-FIREWALL")
                .put(NFTA_TRACE_RULE_HANDLE, &7u64.to_be_bytes())
                .be32(NFTA_TRACE_TYPE, 3)
                .nested(NFTA_TRACE_VERDICT, verdict(code))
                .be32(NFTA_TRACE_ID, 0xabcd)
                .put(NFTA_TRACE_NETWORK_HEADER, &[0x45; 20])
                .put(NFTA_TRACE_TRANSPORT_HEADER, &[1; 20]);
            let mut payload = vec![NFPROTO_INET, 0, 0, 0];
            payload.extend(body.0);
            payload
        };
        let dropped = parse_trace(&rule(NF_DROP)).unwrap();
        assert!(dropped.drop);
        assert_eq!(dropped.id, 0xabcd);
        assert_eq!(
            (dropped.table.as_str(), dropped.chain.as_str()),
            ("filter", "KUBE-FIREWALL")
        );
        assert_eq!(dropped.rule_handle, Some(7));
        assert_eq!(dropped.network.as_deref(), Some(&[0x45; 20][..]));
        assert_eq!(dropped.transport.as_deref(), Some(&[1; 20][..]));
        assert!(!parse_trace(&rule(1)).unwrap().drop, "ACCEPT");
        // NFT_JUMP is -3: a jump is not a drop.
        assert!(!parse_trace(&rule((-3i32) as u32)).unwrap().drop);

        let policy = |p: u32| {
            let body = Attributes::default()
                .be32(NFTA_TRACE_TYPE, NFT_TRACETYPE_POLICY)
                .be32(NFTA_TRACE_ID, 1)
                .be32(NFTA_TRACE_POLICY, p);
            let mut payload = vec![NFPROTO_INET, 0, 0, 0];
            payload.extend(body.0);
            payload
        };
        assert!(parse_trace(&policy(NF_DROP)).unwrap().drop);
        assert!(!parse_trace(&policy(1)).unwrap().drop);
    }
}
