//! Replies as the kernel sends them to each of kpct's nfnetlink readers, built with the crate's
//! own types: the fuzz target `netfilter_netlink`'s seeds.

use super::conntrack::Tuple;
use super::socket::{encode, message, Message};
use super::verdict_table::NF_DROP;
use netlink_packet_core::{
    DefaultNla, DoneMessage, ErrorMessage, NetlinkHeader, NetlinkMessage, NetlinkPayload,
    NLM_F_MULTIPART,
};
use netlink_packet_netfilter::conntrack::{
    ConntrackAttribute, ConntrackMessage, IPTuple, ProtoInfo, ProtoInfoTCP, ProtoTuple, Protocol,
    Status, Tuple as TupleAttribute,
};
use netlink_packet_netfilter::nftables::{
    DataAttribute, Expressions, Immediate, ListAttribute, Lookup, NfTablesMessage, Register,
    RuleAttribute, RuleMessage, TableAttribute, TableFlags, TableMessage, Verdict,
    VerdictAttribute,
};
use netlink_packet_netfilter::NetfilterProtoFamily;
use std::num::NonZeroI32;

fn done() -> Message {
    let mut m = NetlinkMessage::new(
        NetlinkHeader::default(),
        NetlinkPayload::Done(DoneMessage::default()),
    );
    m.finalize();
    m
}

fn error(errno: i32) -> Message {
    let mut e = ErrorMessage::default();
    e.code = NonZeroI32::new(-errno);
    let mut m = NetlinkMessage::new(NetlinkHeader::default(), NetlinkPayload::Error(e));
    m.finalize();
    m
}

fn tuple(t: &Tuple) -> Vec<TupleAttribute> {
    let mut proto = vec![ProtoTuple::Protocol(Protocol::from(t.protocol))];
    if t.sport != 0 {
        proto.push(ProtoTuple::SourcePort(t.sport));
        proto.push(ProtoTuple::DestinationPort(t.dport));
    }
    vec![
        TupleAttribute::Ip(vec![
            IPTuple::SourceAddress(t.src),
            IPTuple::DestinationAddress(t.dst),
        ]),
        TupleAttribute::Proto(proto),
    ]
}

fn entry(original: Tuple, reply: Tuple, tcp: bool) -> Message {
    let mut attributes = vec![
        ConntrackAttribute::CtaTupleOrig(tuple(&original)),
        ConntrackAttribute::CtaTupleReply(tuple(&reply)),
        ConntrackAttribute::CtaStatus(Status::from_bits_retain(0x1ba)),
        ConntrackAttribute::CtaTimeout(120),
        ConntrackAttribute::CtaMark(0x4000),
    ];
    if tcp {
        attributes.push(ConntrackAttribute::CtaProtoInfo(vec![ProtoInfo::TCP(
            vec![
                ProtoInfoTCP::State(3),
                ProtoInfoTCP::OriginalWindowScale(7),
                ProtoInfoTCP::ReplyWindowScale(7),
            ],
        )]));
    }
    let family = match original.src {
        std::net::IpAddr::V4(_) => NetfilterProtoFamily::IPv4,
        std::net::IpAddr::V6(_) => NetfilterProtoFamily::IPv6,
    };
    message(
        family,
        0,
        ConntrackMessage::New(attributes),
        NLM_F_MULTIPART,
        1,
    )
}

fn t(protocol: u8, src: &str, dst: &str, sport: u16, dport: u16) -> Tuple {
    Tuple {
        protocol,
        src: src.parse().expect("a seed's address"),
        dst: dst.parse().expect("a seed's address"),
        sport,
        dport,
    }
}

fn trace(attributes: Vec<DefaultNla>) -> Message {
    message(
        NetfilterProtoFamily::Inet,
        0,
        NfTablesMessage::Trace(attributes),
        0,
        0,
    )
}

fn string(kind: u16, s: &str) -> DefaultNla {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    DefaultNla::new(kind, v)
}

fn be32(kind: u16, v: u32) -> DefaultNla {
    DefaultNla::new(kind, v.to_be_bytes().to_vec())
}

/// Every seed: (file name, bytes of one read).
pub(super) fn all() -> Vec<(&'static str, Vec<u8>)> {
    let conntrack = encode(&[
        entry(
            t(6, "10.244.1.5", "10.96.0.10", 40000, 80),
            t(6, "10.244.2.10", "10.244.1.5", 8080, 40000),
            true,
        ),
        entry(
            t(17, "fd00:10:244:1::5", "fd00:10:96::a", 5353, 53),
            t(17, "fd00:10:244:2::a", "fd00:10:244:1::5", 53, 5353),
            false,
        ),
        entry(
            t(1, "10.244.1.5", "10.96.0.10", 0, 0),
            t(1, "10.96.0.10", "10.244.1.5", 0, 0),
            false,
        ),
        done(),
    ]);
    let tables = encode(&[
        message(
            NetfilterProtoFamily::Inet,
            0,
            NfTablesMessage::NewTable(TableMessage {
                attributes: vec![
                    TableAttribute::Name("kube-proxy".into()),
                    TableAttribute::Flags(TableFlags::empty()),
                    TableAttribute::Use(12),
                    TableAttribute::Handle(3),
                ],
            }),
            NLM_F_MULTIPART,
            1,
        ),
        message(
            NetfilterProtoFamily::IPv4,
            0,
            NfTablesMessage::NewTable(TableMessage {
                attributes: vec![
                    TableAttribute::Name("nat".into()),
                    TableAttribute::Owner(4242),
                ],
            }),
            NLM_F_MULTIPART,
            1,
        ),
        done(),
    ]);
    let mut verdict = 8u16.to_ne_bytes().to_vec();
    verdict.extend(1u16.to_ne_bytes());
    verdict.extend(NF_DROP.to_be_bytes());
    let traces = encode(&[
        trace(vec![
            string(1, "filter"),
            string(2, "KUBE-FIREWALL"),
            DefaultNla::new(3, 7u64.to_be_bytes().to_vec()),
            be32(4, 3),
            DefaultNla::new(5 | 0x8000, verdict),
            be32(6, 0xabcd),
            DefaultNla::new(8, vec![0x45; 20]),
            DefaultNla::new(9, vec![1; 20]),
        ]),
        trace(vec![be32(4, 1), be32(6, 1), be32(16, NF_DROP)]),
    ]);
    let drop = Expressions::Immediate(vec![
        Immediate::DestinationRegister(Register::Verdict),
        Immediate::Data(DataAttribute::Verdict(vec![VerdictAttribute::Code(
            Verdict::from(NF_DROP),
        )])),
    ]);
    let vmap = Expressions::Lookup(vec![
        Lookup::Set("no-endpoint-services".into()),
        Lookup::SourceRegister(Register::Reg1),
        Lookup::DestinationRegister(Register::Verdict),
    ]);
    let rule = |expressions: Vec<Expressions>| {
        message(
            NetfilterProtoFamily::IPv4,
            0,
            NfTablesMessage::NewRule(RuleMessage {
                attributes: vec![
                    RuleAttribute::Table("filter".into()),
                    RuleAttribute::Chain("KUBE-FIREWALL".into()),
                    RuleAttribute::Handle(7),
                    RuleAttribute::Expressions(
                        expressions.into_iter().map(ListAttribute::from).collect(),
                    ),
                ],
            }),
            0,
            1,
        )
    };
    let rules = encode(&[
        rule(vec![
            Expressions::Other {
                expression_type: "counter".into(),
                attributes: vec![],
            },
            drop,
        ]),
        rule(vec![vmap]),
        error(0),
    ]);
    vec![
        ("conntrack-dump", conntrack),
        ("table-dump", tables),
        ("trace-events", traces),
        ("rule-replies", rules),
        ("refused", encode(&[error(libc::EPERM)])),
    ]
}
