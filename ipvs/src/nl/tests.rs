//! Golden-byte tests: layouts derived by hand from include/uapi/linux/ip_vs.h and the netlink
//! attribute rules (4-byte header, 4-byte alignment, network-order ports).

use std::net::IpAddr;

use netlink_packet_core::{Emitable, ParseableParametrized};
use netlink_packet_generic::{GenlHeader, GenlMessage};

use super::attrs::*;
use super::convert;
use super::{IpvsCmd, IpvsMessage};
use crate::types::*;

fn emit(msg: &IpvsMessage) -> Vec<u8> {
    let genl = GenlMessage::from_payload(msg.clone());
    let mut buf = vec![0u8; genl.buffer_len()];
    genl.emit(&mut buf);
    buf
}

fn parse(bytes: &[u8]) -> IpvsMessage {
    let header = GenlHeader {
        cmd: bytes[0],
        version: bytes[1],
    };
    IpvsMessage::parse_with_param(&bytes[4..], header).unwrap()
}

fn tcp_svc() -> Service {
    Service::new(
        ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: "10.0.0.1".parse().unwrap(),
            port: 80,
        },
        "rr",
    )
}

#[rustfmt::skip]
const ADD_TCP_SERVICE: &[u8] = &[
    // genlmsghdr: cmd IPVS_CMD_NEW_SERVICE, version 1
    0x01, 0x01, 0x00, 0x00,
    // IPVS_CMD_ATTR_SERVICE | NLA_F_NESTED, 84 bytes
    0x54, 0x00, 0x01, 0x80,
    // IPVS_SVC_ATTR_AF = AF_INET (u16, host order) + padding
    0x06, 0x00, 0x01, 0x00, 0x02, 0x00, 0x00, 0x00,
    // IPVS_SVC_ATTR_PROTOCOL = IPPROTO_TCP
    0x06, 0x00, 0x02, 0x00, 0x06, 0x00, 0x00, 0x00,
    // IPVS_SVC_ATTR_ADDR: union nf_inet_addr, 10.0.0.1 in the first 4 bytes
    0x14, 0x00, 0x03, 0x00, 0x0a, 0x00, 0x00, 0x01,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    // IPVS_SVC_ATTR_PORT = 80, network order
    0x06, 0x00, 0x04, 0x00, 0x00, 0x50, 0x00, 0x00,
    // IPVS_SVC_ATTR_SCHED_NAME = "rr\0"
    0x07, 0x00, 0x06, 0x00, b'r', b'r', 0x00, 0x00,
    // IPVS_SVC_ATTR_FLAGS = struct ip_vs_flags { flags 0, mask ~0 }
    0x0c, 0x00, 0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff,
    // IPVS_SVC_ATTR_TIMEOUT = 0
    0x08, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00,
    // IPVS_SVC_ATTR_NETMASK = 255.255.255.255 (raw network-order bytes)
    0x08, 0x00, 0x09, 0x00, 0xff, 0xff, 0xff, 0xff,
];

#[test]
fn add_service_golden() {
    let msg = IpvsMessage::new(
        IpvsCmd::NewService,
        vec![CmdAttr::Service(convert::service_attrs(&tcp_svc()))],
    );
    assert_eq!(emit(&msg), ADD_TCP_SERVICE);
    assert_eq!(parse(ADD_TCP_SERVICE), msg);
}

#[test]
fn persistent_service_netmask_and_flags() {
    let mut svc = tcp_svc();
    svc.flags = ServiceFlags(ServiceFlags::PERSISTENT | ServiceFlags::HASHED);
    svc.timeout = 300;
    svc.netmask_prefix = 24;
    let attrs = convert::service_attrs(&svc);
    // HASHED is never sent: the kernel refuses to hash an already-hashed service.
    assert!(attrs.contains(&SvcAttr::Flags(FlagsMask {
        flags: ServiceFlags::PERSISTENT,
        mask: u32::MAX
    })));
    let mut buf = vec![0u8; 8];
    let netmask = attrs
        .iter()
        .find(|a| matches!(a, SvcAttr::Netmask(_)))
        .unwrap();
    netlink_packet_core::Emitable::emit(netmask, &mut buf);
    assert_eq!(buf, [0x08, 0x00, 0x09, 0x00, 0xff, 0xff, 0xff, 0x00]);

    // IPv6 carries the prefix length itself.
    let v6 = Service {
        key: ServiceKey::FwMark {
            ipv6: true,
            mark: 7,
        },
        netmask_prefix: 64,
        ..svc
    };
    let attrs = convert::service_attrs(&v6);
    assert_eq!(attrs[0], SvcAttr::Af(10));
    assert_eq!(attrs[1], SvcAttr::Fwmark(7));
    assert!(attrs.contains(&SvcAttr::Netmask(64)));
}

#[rustfmt::skip]
const ADD_TUNNEL_DEST: &[u8] = &[
    // IPVS_CMD_NEW_DEST
    0x05, 0x01, 0x00, 0x00,
    // IPVS_CMD_ATTR_SERVICE (fwmark 5, IPv6): AF + FWMARK
    0x14, 0x00, 0x01, 0x80,
    0x06, 0x00, 0x01, 0x00, 0x0a, 0x00, 0x00, 0x00,
    0x08, 0x00, 0x05, 0x00, 0x05, 0x00, 0x00, 0x00,
    // IPVS_CMD_ATTR_DEST | NLA_F_NESTED, 96 bytes
    0x60, 0x00, 0x02, 0x80,
    // ADDR_FAMILY = AF_INET6
    0x06, 0x00, 0x0b, 0x00, 0x0a, 0x00, 0x00, 0x00,
    // ADDR = 2001:db8::2
    0x14, 0x00, 0x01, 0x00,
    0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02,
    // PORT = 8080 (0x1f90), network order
    0x06, 0x00, 0x02, 0x00, 0x1f, 0x90, 0x00, 0x00,
    // FWD_METHOD = IP_VS_CONN_F_TUNNEL
    0x08, 0x00, 0x03, 0x00, 0x02, 0x00, 0x00, 0x00,
    // WEIGHT = 0
    0x08, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00,
    // TUN_TYPE = GUE (u8)
    0x05, 0x00, 0x0d, 0x00, 0x01, 0x00, 0x00, 0x00,
    // TUN_PORT = 6080 (0x17c0), network order
    0x06, 0x00, 0x0e, 0x00, 0x17, 0xc0, 0x00, 0x00,
    // TUN_FLAGS = IP_VS_TUNNEL_ENCAP_FLAG_CSUM (u16, host order)
    0x06, 0x00, 0x0f, 0x00, 0x01, 0x00, 0x00, 0x00,
    // U_THRESH = 100, L_THRESH = 10
    0x08, 0x00, 0x05, 0x00, 0x64, 0x00, 0x00, 0x00,
    0x08, 0x00, 0x06, 0x00, 0x0a, 0x00, 0x00, 0x00,
];

#[test]
fn add_destination_golden() {
    let dest = Destination {
        addr: "2001:db8::2".parse().unwrap(),
        port: 8080,
        forward: ForwardMethod::Tunnel,
        weight: 0,
        upper_threshold: 100,
        lower_threshold: 10,
        tunnel_type: TunnelType::Gue,
        tunnel_port: 6080,
        tunnel_flags: 1,
    };
    let key = ServiceKey::FwMark {
        ipv6: true,
        mark: 5,
    };
    let msg = IpvsMessage::new(
        IpvsCmd::NewDest,
        vec![
            CmdAttr::Service(convert::service_key_attrs(&key)),
            CmdAttr::Dest(convert::dest_attrs(&dest)),
        ],
    );
    assert_eq!(emit(&msg), ADD_TUNNEL_DEST);
    assert_eq!(parse(ADD_TUNNEL_DEST), msg);
}

#[test]
fn config_and_flush_golden() {
    let msg = IpvsMessage::new(
        IpvsCmd::SetConfig,
        convert::timeout_attrs(&Timeouts {
            tcp: 900,
            tcp_fin: 120,
            udp: 300,
        }),
    );
    #[rustfmt::skip]
    let golden: &[u8] = &[
        0x0c, 0x01, 0x00, 0x00,
        0x08, 0x00, 0x04, 0x00, 0x84, 0x03, 0x00, 0x00,
        0x08, 0x00, 0x05, 0x00, 0x78, 0x00, 0x00, 0x00,
        0x08, 0x00, 0x06, 0x00, 0x2c, 0x01, 0x00, 0x00,
    ];
    assert_eq!(emit(&msg), golden);
    assert_eq!(
        emit(&IpvsMessage::new(IpvsCmd::Flush, vec![])),
        [0x11, 0x01, 0x00, 0x00]
    );
}

/// A service as the kernel dumps it: 16-byte address, HASHED flag, legacy stats and 64-bit
/// stats padded with IPVS_STATS_ATTR_PAD.
#[test]
fn decode_kernel_service_reply() {
    let mut bytes = vec![0x01, 0x01, 0x00, 0x00];
    let stats = StatsNest {
        width: StatsWidth::Legacy,
        stats: Stats {
            conns: 3,
            inbytes: 1 << 40,
            ..Stats::default()
        },
    };
    let stats64 = StatsNest {
        width: StatsWidth::Wide,
        stats: Stats {
            conns: 3,
            inbytes: 1 << 40,
            ..Stats::default()
        },
    };
    let mut svc_attrs = vec![
        SvcAttr::Af(2),
        SvcAttr::Protocol(17),
        SvcAttr::Addr(convert::addr_bytes(&"192.168.1.1".parse().unwrap())),
        SvcAttr::Port(53),
        SvcAttr::SchedName("sh".into()),
        SvcAttr::Flags(FlagsMask {
            flags: ServiceFlags::HASHED | ServiceFlags::SCHED1 | ServiceFlags::SCHED2,
            mask: u32::MAX,
        }),
        SvcAttr::Timeout(0),
        SvcAttr::Netmask(u32::MAX),
        SvcAttr::Stats(stats),
    ];
    // PAD attribute as nla_put_u64_64bit inserts it, then STATS64.
    svc_attrs.push(SvcAttr::Other(netlink_packet_core::DefaultNla::new(
        IPVS_STATS_ATTR_PAD_FOR_TEST,
        vec![],
    )));
    svc_attrs.push(SvcAttr::Stats64(stats64));
    let top = CmdAttr::Service(svc_attrs);
    let mut buf = vec![0u8; top.buffer_len()];
    top.emit(&mut buf);
    bytes.extend_from_slice(&buf);

    let msg = parse(&bytes);
    let CmdAttr::Service(attrs) = &msg.attrs[0] else {
        panic!("not a service: {msg:?}")
    };
    let state = convert::service_from_attrs(attrs).unwrap();
    assert_eq!(
        state.service.key,
        ServiceKey::Addr {
            protocol: Protocol::Udp,
            addr: "192.168.1.1".parse::<IpAddr>().unwrap(),
            port: 53
        }
    );
    assert!(state.service.flags.contains(ServiceFlags::HASHED));
    assert_eq!(
        state.service.normalized().flags,
        ServiceFlags(ServiceFlags::SCHED1 | ServiceFlags::SCHED2)
    );
    assert_eq!(state.service.netmask_prefix, 32);
    assert_eq!(state.stats.conns, 3);
    assert_eq!(state.stats.inbytes, 1 << 40);
}

const IPVS_STATS_ATTR_PAD_FOR_TEST: u16 = 11;

#[test]
fn decode_info_reply_uses_info_namespace() {
    // IPVS_CMD_SET_INFO reply: VERSION (1) and CONN_TAB_SIZE (2) reuse the numbers of
    // IPVS_CMD_ATTR_SERVICE/DEST, so they must not be parsed as nests.
    #[rustfmt::skip]
    let bytes: &[u8] = &[
        0x0e, 0x01, 0x00, 0x00,
        0x08, 0x00, 0x01, 0x00, 0x01, 0x02, 0x01, 0x00,
        0x08, 0x00, 0x02, 0x00, 0x00, 0x10, 0x00, 0x00,
    ];
    let msg = parse(bytes);
    let info = convert::info_from_attrs(&msg.attrs).unwrap();
    assert_eq!(info.version_triple(), (1, 2, 1));
    assert_eq!(info.conn_table_size, 4096);
}

#[test]
fn decode_destination_without_family_uses_service_family() {
    let attrs = vec![
        DestAttr::Addr(convert::addr_bytes(&"2001:db8::9".parse().unwrap())),
        DestAttr::Port(443),
        DestAttr::FwdMethod(0),
        DestAttr::Weight(5),
        DestAttr::ActiveConns(2),
        DestAttr::InactConns(1),
        DestAttr::PersistConns(4),
    ];
    let d = convert::destination_from_attrs(&attrs, true).unwrap();
    assert_eq!(d.destination.addr, "2001:db8::9".parse::<IpAddr>().unwrap());
    assert_eq!(d.destination.forward, ForwardMethod::Masq);
    assert_eq!(
        (d.active_conns, d.inactive_conns, d.persistent_conns),
        (2, 1, 4)
    );
}

#[test]
fn netmask_conversions() {
    for prefix in 0..=32u8 {
        let v = convert::netmask_value(false, prefix);
        assert_eq!(convert::netmask_prefix(false, v), Ok(prefix));
    }
    // 255.0.255.0 has no prefix length.
    let odd = u32::from_ne_bytes([255, 0, 255, 0]);
    assert!(convert::netmask_prefix(false, odd).is_err());
    // The kernel keeps it, and it reads back as it is and goes out again unchanged.
    let (_, mask) = convert::netmask_of(false, odd).unwrap();
    assert_eq!(mask, Some(std::net::Ipv4Addr::new(255, 0, 255, 0)));
    let mut svc = Service::new(
        ServiceKey::FwMark {
            ipv6: false,
            mark: 1,
        },
        "rr",
    );
    svc.odd_netmask = mask;
    assert!(convert::service_attrs(&svc).contains(&SvcAttr::Netmask(odd)));
    assert_eq!(convert::netmask_prefix(true, 96), Ok(96));
    assert!(convert::netmask_prefix(true, 129).is_err());
}

/// Writes seed inputs for kpct's `ipvs_netlink` fuzz target into `$KPCT_FUZZ_SEEDS` (run by
/// `ci/fuzz.sh --seed`): whole netlink messages of the IPVS family as the kernel's replies
/// carry them — services of each key kind and family, destinations, timeouts, info.
#[test]
#[ignore = "writes files; run by ci/fuzz.sh --seed"]
fn write_fuzz_seeds() {
    use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload};
    let Ok(dir) = std::env::var("KPCT_FUZZ_SEEDS") else {
        panic!("KPCT_FUZZ_SEEDS names the directory to write into");
    };
    let mut persistent = tcp_svc();
    persistent.flags = ServiceFlags(ServiceFlags::PERSISTENT | ServiceFlags::HASHED);
    persistent.timeout = 10800;
    let services = [
        tcp_svc(),
        persistent,
        Service::new(
            ServiceKey::Addr {
                protocol: Protocol::Udp,
                addr: "fd00:10:96::a".parse().unwrap(),
                port: 53,
            },
            "sh",
        ),
        Service::new(
            ServiceKey::FwMark {
                ipv6: false,
                mark: 7,
            },
            "wrr",
        ),
    ];
    let mut messages: Vec<IpvsMessage> = services
        .iter()
        .map(|s| {
            IpvsMessage::new(
                IpvsCmd::NewService,
                vec![CmdAttr::Service(convert::service_attrs(s))],
            )
        })
        .collect();
    for addr in ["10.244.1.10", "fd00:10:244:1::10"] {
        let dest = Destination::new(addr.parse::<IpAddr>().unwrap(), 8080);
        messages.push(IpvsMessage::new(
            IpvsCmd::NewDest,
            vec![CmdAttr::Dest(convert::dest_attrs(&dest))],
        ));
    }
    messages.push(IpvsMessage::new(
        IpvsCmd::SetConfig,
        convert::timeout_attrs(&Timeouts {
            tcp: 900,
            tcp_fin: 120,
            udp: 300,
        }),
    ));
    messages.push(IpvsMessage::new(
        IpvsCmd::SetInfo,
        vec![
            CmdAttr::Info(InfoAttr::Version(0x010203)),
            CmdAttr::Info(InfoAttr::ConnTabSize(4096)),
        ],
    ));
    std::fs::create_dir_all(&dir).unwrap();
    for (i, msg) in messages.into_iter().enumerate() {
        let mut nl = NetlinkMessage::new(
            NetlinkHeader::default(),
            NetlinkPayload::InnerMessage(GenlMessage::from_payload(msg)),
        );
        nl.header.message_type = 0x20;
        nl.finalize();
        let mut buf = vec![0u8; nl.buffer_len()];
        nl.serialize(&mut buf);
        std::fs::write(format!("{dir}/seed-{i:02}"), buf).unwrap();
    }
}
