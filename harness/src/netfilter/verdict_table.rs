//! The `kpct-verdicts` nf_tables table as netlink transactions: created with its chains, given
//! a shot's marking rules, deleted; and the question its watcher asks about a dropping rule
//! (read back, is it a plain DROP?). How the table is used: `drop_verdicts`.

use super::socket::{message, transaction, Message};
use netlink_packet_core::{NLM_F_ACK, NLM_F_APPEND, NLM_F_CREATE, NLM_F_REQUEST};
use netlink_packet_netfilter::nftables::{
    ChainAttribute, ChainMessage, Cmp, DataAttribute, ExpressionAttribute, Expressions, Hook,
    HookNumber, Immediate, InetHookNumber, ListAttribute, Lookup, Meta, MetaKey, NfTablesMessage,
    Operator, Payload, Register, RuleAttribute, RuleMessage, TableAttribute, TableFlags,
    TableMessage, Verdict, VerdictAttribute,
};
use netlink_packet_netfilter::NetfilterProtoFamily;

/// The table each node holds while probes fire, and its family (`NFPROTO_INET`).
pub const TABLE: &str = "kpct-verdicts";
pub const FAMILY: u8 = 1;
const INET: NetfilterProtoFamily = NetfilterProtoFamily::Inet;

/// `include/uapi/linux/netfilter/nf_tables.h`: NFT_PAYLOAD_TRANSPORT_HEADER.
const TRANSPORT_HEADER: u32 = 2;
/// `include/uapi/linux/netfilter.h`: NF_DROP.
pub(crate) const NF_DROP: u32 = 0;

/// Packets a chain sets the `nftrace` bit of, one rule each: only the current shot's first
/// packet and ICMP errors, because tracing costs the kernel a netlink message for every rule a
/// traced packet meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Marking {
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
pub(crate) struct Chain {
    pub name: &'static str,
    pub hook: InetHookNumber,
    pub priority: i32,
    pub marks: bool,
}

/// Before every chain a proxier may have (raw is -300, conntrack -200), and after them all.
pub(crate) const CHAINS: [Chain; 3] = [
    Chain {
        name: "mark-arriving",
        hook: InetHookNumber::PreRouting,
        priority: -500,
        marks: true,
    },
    Chain {
        name: "mark-sent",
        hook: InetHookNumber::LocalOut,
        priority: -500,
        marks: true,
    },
    Chain {
        name: "see-sent",
        hook: InetHookNumber::LocalOut,
        priority: 500,
        marks: false,
    },
];

/// One expression, named as the kernel names its type.
fn expression(data: Expressions) -> ListAttribute<ExpressionAttribute> {
    ListAttribute::from(data)
}

/// Register 1 compared equal with `data`.
fn equals(data: &[u8]) -> ListAttribute<ExpressionAttribute> {
    expression(Expressions::Cmp(vec![
        Cmp::SourceRegister(Register::Reg1),
        Cmp::Op(Operator::Equal),
        Cmp::Data(DataAttribute::Value(data.to_vec())),
    ]))
}

/// The packet's layer 4 protocol into register 1.
fn load_l4proto() -> ListAttribute<ExpressionAttribute> {
    expression(Expressions::Meta(vec![
        Meta::DestinationRegister(Register::Reg1),
        Meta::Key(MetaKey::L4Proto),
    ]))
}

/// `len` bytes of the transport header from `offset` into register 1.
fn transport_field(offset: u32, len: u32) -> ListAttribute<ExpressionAttribute> {
    expression(Expressions::Payload(vec![
        Payload::DestinationRegister(Register::Reg1),
        Payload::Base(TRANSPORT_HEADER),
        Payload::Offset(offset),
        Payload::Len(len),
    ]))
}

/// `meta nftrace set 1`: load 1 into register 1, then set the bit from it.
fn set_nftrace() -> [ListAttribute<ExpressionAttribute>; 2] {
    [
        expression(Expressions::Immediate(vec![
            Immediate::DestinationRegister(Register::Reg1),
            Immediate::Data(DataAttribute::Value(vec![1])),
        ])),
        expression(Expressions::Meta(vec![
            Meta::Key(MetaKey::NftraceBit),
            Meta::SourceRegister(Register::Reg1),
        ])),
    ]
}

/// The rules marking `what`, as expression lists.
fn marking_rules(what: Marking) -> Vec<Vec<ListAttribute<ExpressionAttribute>>> {
    const TCP: u8 = 6;
    const UDP: u8 = 17;
    let matchings = match what {
        Marking::TcpSequence(seq) => vec![vec![
            load_l4proto(),
            equals(&[TCP]),
            transport_field(4, 4),
            equals(&seq.to_be_bytes()),
        ]],
        Marking::UdpSourcePort(port) => vec![vec![
            load_l4proto(),
            equals(&[UDP]),
            transport_field(0, 2),
            equals(&port.to_be_bytes()),
        ]],
        Marking::Icmp => [1u8, 58]
            .into_iter()
            .map(|protocol| vec![load_l4proto(), equals(&[protocol])])
            .collect(),
    };
    matchings
        .into_iter()
        .map(|mut rule| {
            rule.extend(set_nftrace());
            rule
        })
        .collect()
}

fn rule(table: &str, chain: &str, more: Vec<RuleAttribute>) -> NfTablesMessage {
    let mut attributes = vec![
        RuleAttribute::Table(table.to_string()),
        RuleAttribute::Chain(chain.to_string()),
    ];
    attributes.extend(more);
    NfTablesMessage::NewRule(RuleMessage { attributes })
}

/// One transaction giving every marking chain of `table` the rules marking `marks` instead
/// of what it had (DELRULE with no handle empties a chain). Returns the batch and the sequence
/// numbers the kernel acknowledges.
pub(crate) fn set_shot(table: &str, chains: &[Chain], marks: &[Marking]) -> (Vec<u8>, Vec<u32>) {
    let mut messages = Vec::new();
    for chain in chains.iter().filter(|c| c.marks) {
        messages.push((
            NfTablesMessage::DeleteRule(RuleMessage {
                attributes: vec![
                    RuleAttribute::Table(table.to_string()),
                    RuleAttribute::Chain(chain.name.to_string()),
                ],
            }),
            0,
        ));
        for expressions in marks.iter().flat_map(|what| marking_rules(*what)) {
            messages.push((
                rule(
                    table,
                    chain.name,
                    vec![RuleAttribute::Expressions(expressions)],
                ),
                NLM_F_CREATE | NLM_F_APPEND,
            ));
        }
    }
    transaction(INET, messages)
}

/// One transaction deleting `table` (family inet).
pub(crate) fn delete_table(table: &str) -> (Vec<u8>, Vec<u32>) {
    transaction(
        INET,
        vec![(
            NfTablesMessage::DeleteTable(TableMessage {
                attributes: vec![TableAttribute::Name(table.to_string())],
            }),
            0,
        )],
    )
}

/// One transaction creating `table` (family inet, owned by the sending socket) with `chains`,
/// all empty. Returns the batch and the sequence numbers the kernel acknowledges.
pub(crate) fn create_table(table: &str, chains: &[Chain]) -> (Vec<u8>, Vec<u32>) {
    let mut messages = vec![(
        NfTablesMessage::NewTable(TableMessage {
            attributes: vec![
                TableAttribute::Name(table.to_string()),
                TableAttribute::Flags(TableFlags::Owner),
            ],
        }),
        NLM_F_CREATE,
    )];
    for chain in chains {
        messages.push((
            NfTablesMessage::NewChain(ChainMessage {
                attributes: vec![
                    ChainAttribute::Table(table.to_string()),
                    ChainAttribute::Name(chain.name.to_string()),
                    ChainAttribute::Hook(vec![
                        Hook::Number(HookNumber::Inet(chain.hook)),
                        // The kernel reads the priority as a signed 32-bit number.
                        Hook::Priority(chain.priority as u32),
                    ]),
                    ChainAttribute::Type("filter".to_string()),
                ],
            }),
            NLM_F_CREATE,
        ));
    }
    transaction(INET, messages)
}

/// A GETRULE request for one rule, acknowledged.
pub(crate) fn get_rule(
    family: u8,
    table: &str,
    chain: &str,
    handle: u64,
    sequence: u32,
) -> Message {
    message(
        NetfilterProtoFamily::from(family),
        0,
        NfTablesMessage::GetRule(RuleMessage {
            attributes: vec![
                RuleAttribute::Table(table.to_string()),
                RuleAttribute::Chain(chain.to_string()),
                RuleAttribute::Handle(handle),
            ],
        }),
        NLM_F_REQUEST | NLM_F_ACK,
        sequence,
    )
}

/// Expressions that send a packet of their own (REJECT, any xtables target, duplication,
/// forwarding, SYN proxying) or hand it to user space: after them a DROP does not mean that
/// nothing more comes.
const SENDING: [&str; 6] = ["reject", "target", "dup", "fwd", "synproxy", "queue"];

/// Whether `rule`, which the trace says dropped, drops with a plain DROP verdict — an
/// `immediate` of NF_DROP (iptables' `-j DROP`, nftables' `drop`), or a verdict map's `drop`
/// element (`vmap`: the map gave the DROP, and an element holds a verdict only, never a
/// reject; kube-proxy's nftables `no-endpoint-services` drops so) — and has no expression that
/// sends anything.
pub(crate) fn is_plain_drop(rule: &RuleMessage) -> bool {
    let Some(expressions) = rule.attributes.iter().find_map(|a| match a {
        RuleAttribute::Expressions(e) => Some(e),
        _ => None,
    }) else {
        return false;
    };
    let mut drops = false;
    for expression in expressions {
        let ListAttribute::Element(fields) = expression else {
            continue;
        };
        for field in fields {
            match field {
                ExpressionAttribute::Name(name) if SENDING.contains(&name.as_str()) => {
                    return false
                }
                ExpressionAttribute::Data(Expressions::Other {
                    expression_type, ..
                }) if SENDING.contains(&expression_type.as_str()) => return false,
                ExpressionAttribute::Data(Expressions::Immediate(data)) => {
                    drops |= data.iter().any(|d| {
                        matches!(d, Immediate::Data(DataAttribute::Verdict(v))
                            if v.contains(&VerdictAttribute::Code(Verdict::from(NF_DROP))))
                    });
                }
                ExpressionAttribute::Data(Expressions::Lookup(data)) => {
                    drops |= data.contains(&Lookup::DestinationRegister(Register::Verdict));
                }
                _ => {}
            }
        }
    }
    drops
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netfilter::socket::{encode, hex};

    /// Every transaction is byte for byte what the hand-written codec this replaced sent (its
    /// encodings captured before it went), so the kernel is asked exactly what it was.
    #[test]
    fn transactions_are_the_bytes_nf_tables_was_always_sent() {
        let t = TABLE;
        assert_eq!(hex(&create_table(t, &CHAINS).0), CREATE);
        let shot = [Marking::TcpSequence(0x01020304), Marking::Icmp];
        assert_eq!(hex(&set_shot(t, &CHAINS, &shot).0), SHOT_TCP);
        let shot = [Marking::UdpSourcePort(40000)];
        assert_eq!(hex(&set_shot(t, &CHAINS, &shot).0), SHOT_UDP);
        assert_eq!(hex(&set_shot(t, &CHAINS, &[]).0), SHOT_NONE);
        assert_eq!(hex(&delete_table(t).0), DELETE);
        assert_eq!(
            hex(&encode(&[get_rule(2, "filter", "KUBE-X", 42, 1)])),
            GETRULE
        );
    }

    #[test]
    fn the_batches_acknowledge_every_message_but_begin_and_end() {
        assert_eq!(create_table("t", &CHAINS).1, vec![1, 2, 3, 4]);
        let shot = [Marking::TcpSequence(7), Marking::Icmp];
        // Two marking chains, each emptied and given three rules.
        assert_eq!(set_shot("t", &CHAINS, &shot).1, (1..=8).collect::<Vec<_>>());
        assert_eq!(set_shot("t", &CHAINS, &[]).1, vec![1, 2], "disarmed");
    }

    /// A rule whose expressions are `data`.
    fn rule_of(data: Vec<Expressions>) -> RuleMessage {
        RuleMessage {
            attributes: vec![
                RuleAttribute::Table("filter".into()),
                RuleAttribute::Expressions(data.into_iter().map(expression).collect()),
            ],
        }
    }

    fn verdict(code: u32) -> Expressions {
        Expressions::Immediate(vec![
            Immediate::DestinationRegister(Register::Verdict),
            Immediate::Data(DataAttribute::Verdict(vec![VerdictAttribute::Code(
                Verdict::from(code),
            )])),
        ])
    }

    #[test]
    fn a_drop_is_plain_only_without_anything_that_sends() {
        let counter = Expressions::Other {
            expression_type: "counter".into(),
            attributes: vec![],
        };
        assert!(is_plain_drop(&rule_of(vec![
            counter.clone(),
            verdict(NF_DROP)
        ])));
        // NF_ACCEPT
        assert!(!is_plain_drop(&rule_of(vec![verdict(1)])));
        let reject = Expressions::Other {
            expression_type: "reject".into(),
            attributes: vec![],
        };
        assert!(!is_plain_drop(&rule_of(vec![reject, verdict(NF_DROP)])));
        // iptables-nft's -j REJECT is an xtables target that answers, then drops; a copy sent
        // elsewhere before the drop.
        for sending in ["target", "dup"] {
            let e = Expressions::Other {
                expression_type: sending.into(),
                attributes: vec![],
            };
            assert!(
                !is_plain_drop(&rule_of(vec![e, verdict(NF_DROP)])),
                "{sending}"
            );
        }
        let vmap = Expressions::Lookup(vec![
            Lookup::Set("no-endpoint-services".into()),
            Lookup::SourceRegister(Register::Reg1),
            Lookup::DestinationRegister(Register::Verdict),
        ]);
        assert!(is_plain_drop(&rule_of(vec![vmap])));
        let set = Expressions::Lookup(vec![
            Lookup::Set("cluster-ips".into()),
            Lookup::SourceRegister(Register::Reg1),
        ]);
        assert!(!is_plain_drop(&rule_of(vec![set])));
        assert!(!is_plain_drop(&RuleMessage { attributes: vec![] }));
    }

    const CREATE: &str = "140000001000010000000000000000000000000a30000000000a0504010000000000000001000000120001006b7063742d766572646963747300000008000200000000025c000000030a0504020000000000000001000000120001006b7063742d7665726469637473000000120003006d61726b2d6172726976696e6700000014000480080001000000000008000200fffffe0c0b00070066696c746572000058000000030a0504030000000000000001000000120001006b7063742d76657264696374730000000e0003006d61726b2d73656e7400000014000480080001000000000308000200fffffe0c0b00070066696c746572000058000000030a0504040000000000000001000000120001006b7063742d76657264696374730000000d0003007365652d73656e740000000014000480080001000000000308000200000001f40b00070066696c7465720000140000001100010005000000000000000000000a";
    const SHOT_TCP: &str = "140000001000010000000000000000000000000a3c000000080a0500010000000000000001000000120001006b7063742d7665726469637473000000120002006d61726b2d6172726976696e6700000040010000060a050c020000000000000001000000120001006b7063742d7665726469637473000000120002006d61726b2d6172726976696e670000000401048024000180090001006d6574610000000014000280080001000000000108000200000000102c00018008000100636d700020000280080001000000000108000200000000000c0003800500010006000000340001800c0001007061796c6f6164002400028008000100000000010800020000000002080003000000000408000400000000042c00018008000100636d700020000280080001000000000108000200000000000c00038008000100010203042c0001800e000100696d6d6564696174650000001800028008000100000000010c000280050001000100000024000180090001006d6574610000000014000280080002000000000c0800030000000001e0000000060a050c030000000000000001000000120001006b7063742d7665726469637473000000120002006d61726b2d6172726976696e67000000a400048024000180090001006d6574610000000014000280080001000000000108000200000000102c00018008000100636d700020000280080001000000000108000200000000000c00038005000100010000002c0001800e000100696d6d6564696174650000001800028008000100000000010c000280050001000100000024000180090001006d6574610000000014000280080002000000000c0800030000000001e0000000060a050c040000000000000001000000120001006b7063742d7665726469637473000000120002006d61726b2d6172726976696e67000000a400048024000180090001006d6574610000000014000280080001000000000108000200000000102c00018008000100636d700020000280080001000000000108000200000000000c000380050001003a0000002c0001800e000100696d6d6564696174650000001800028008000100000000010c000280050001000100000024000180090001006d6574610000000014000280080002000000000c080003000000000138000000080a0500050000000000000001000000120001006b7063742d76657264696374730000000e0002006d61726b2d73656e740000003c010000060a050c060000000000000001000000120001006b7063742d76657264696374730000000e0002006d61726b2d73656e740000000401048024000180090001006d6574610000000014000280080001000000000108000200000000102c00018008000100636d700020000280080001000000000108000200000000000c0003800500010006000000340001800c0001007061796c6f6164002400028008000100000000010800020000000002080003000000000408000400000000042c00018008000100636d700020000280080001000000000108000200000000000c00038008000100010203042c0001800e000100696d6d6564696174650000001800028008000100000000010c000280050001000100000024000180090001006d6574610000000014000280080002000000000c0800030000000001dc000000060a050c070000000000000001000000120001006b7063742d76657264696374730000000e0002006d61726b2d73656e74000000a400048024000180090001006d6574610000000014000280080001000000000108000200000000102c00018008000100636d700020000280080001000000000108000200000000000c00038005000100010000002c0001800e000100696d6d6564696174650000001800028008000100000000010c000280050001000100000024000180090001006d6574610000000014000280080002000000000c0800030000000001dc000000060a050c080000000000000001000000120001006b7063742d76657264696374730000000e0002006d61726b2d73656e74000000a400048024000180090001006d6574610000000014000280080001000000000108000200000000102c00018008000100636d700020000280080001000000000108000200000000000c000380050001003a0000002c0001800e000100696d6d6564696174650000001800028008000100000000010c000280050001000100000024000180090001006d6574610000000014000280080002000000000c0800030000000001140000001100010009000000000000000000000a";
    const SHOT_UDP: &str = "140000001000010000000000000000000000000a3c000000080a0500010000000000000001000000120001006b7063742d7665726469637473000000120002006d61726b2d6172726976696e6700000040010000060a050c020000000000000001000000120001006b7063742d7665726469637473000000120002006d61726b2d6172726976696e670000000401048024000180090001006d6574610000000014000280080001000000000108000200000000102c00018008000100636d700020000280080001000000000108000200000000000c0003800500010011000000340001800c0001007061796c6f6164002400028008000100000000010800020000000002080003000000000008000400000000022c00018008000100636d700020000280080001000000000108000200000000000c000380060001009c4000002c0001800e000100696d6d6564696174650000001800028008000100000000010c000280050001000100000024000180090001006d6574610000000014000280080002000000000c080003000000000138000000080a0500030000000000000001000000120001006b7063742d76657264696374730000000e0002006d61726b2d73656e740000003c010000060a050c040000000000000001000000120001006b7063742d76657264696374730000000e0002006d61726b2d73656e740000000401048024000180090001006d6574610000000014000280080001000000000108000200000000102c00018008000100636d700020000280080001000000000108000200000000000c0003800500010011000000340001800c0001007061796c6f6164002400028008000100000000010800020000000002080003000000000008000400000000022c00018008000100636d700020000280080001000000000108000200000000000c000380060001009c4000002c0001800e000100696d6d6564696174650000001800028008000100000000010c000280050001000100000024000180090001006d6574610000000014000280080002000000000c0800030000000001140000001100010005000000000000000000000a";
    const SHOT_NONE: &str = "140000001000010000000000000000000000000a3c000000080a0500010000000000000001000000120001006b7063742d7665726469637473000000120002006d61726b2d6172726976696e6700000038000000080a0500020000000000000001000000120001006b7063742d76657264696374730000000e0002006d61726b2d73656e74000000140000001100010003000000000000000000000a";
    const DELETE: &str = "140000001000010000000000000000000000000a28000000020a0500010000000000000001000000120001006b7063742d7665726469637473000000140000001100010002000000000000000000000a";
    const GETRULE: &str = "38000000070a05000100000000000000020000000b00010066696c74657200000b0002004b5542452d5800000c000300000000000000002a";
}
