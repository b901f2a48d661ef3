use std::net::IpAddr;

use super::*;
use crate::types::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn state(service: Service) -> ServiceState {
    ServiceState {
        service,
        stats: Stats::default(),
    }
}

fn dstate(destination: Destination) -> DestinationState {
    DestinationState {
        destination,
        active_conns: 0,
        inactive_conns: 0,
        persistent_conns: 0,
        stats: Stats::default(),
    }
}

fn tcp(addr: &str, port: u16) -> ServiceKey {
    ServiceKey::Addr {
        protocol: Protocol::Tcp,
        addr: ip(addr),
        port,
    }
}

fn sample() -> Vec<(ServiceState, Vec<DestinationState>)> {
    let mut persistent = Service::new(
        ServiceKey::Addr {
            protocol: Protocol::Udp,
            addr: ip("10.0.0.2"),
            port: 53,
        },
        "sh",
    );
    persistent.flags = ServiceFlags(
        ServiceFlags::HASHED
            | ServiceFlags::PERSISTENT
            | ServiceFlags::ONEPACKET
            | ServiceFlags::SCHED1
            | ServiceFlags::SCHED2,
    );
    persistent.timeout = 600;
    persistent.netmask_prefix = 24;

    let mut v6 = Service::new(
        ServiceKey::Addr {
            protocol: Protocol::Sctp,
            addr: ip("2001:db8::1"),
            port: 3868,
        },
        "mh",
    );
    v6.flags = ServiceFlags(ServiceFlags::PERSISTENT | ServiceFlags::SCHED2);
    v6.timeout = 30;
    v6.netmask_prefix = 64;

    let fwm = Service::new(
        ServiceKey::FwMark {
            ipv6: false,
            mark: 7,
        },
        "wlc",
    );
    let fwm6 = Service::new(
        ServiceKey::FwMark {
            ipv6: true,
            mark: 7,
        },
        "rr",
    );

    let masq = |a: &str, port, weight| Destination {
        forward: ForwardMethod::Masq,
        weight,
        ..Destination::new(ip(a), port)
    };
    let gue = Destination {
        forward: ForwardMethod::Tunnel,
        tunnel_type: TunnelType::Gue,
        tunnel_port: 6080,
        tunnel_flags: 2,
        ..Destination::new(ip("2001:db8::20"), 3868)
    };
    let gre = Destination {
        forward: ForwardMethod::Tunnel,
        tunnel_type: TunnelType::Gre,
        tunnel_flags: 1,
        ..Destination::new(ip("2001:db8::10"), 3868)
    };
    vec![
        (state(fwm6), vec![]),
        (
            state(Service::new(tcp("10.0.0.1", 80), "rr")),
            vec![
                dstate(masq("192.168.0.2", 8080, 0)),
                dstate(masq("192.168.0.1", 8080, 3)),
            ],
        ),
        (state(v6), vec![dstate(gue), dstate(gre)]),
        (
            state(persistent),
            vec![dstate(Destination {
                forward: ForwardMethod::Tunnel,
                ..Destination::new(ip("192.168.0.3"), 53)
            })],
        ),
        (
            state(fwm),
            vec![dstate(Destination::new(ip("192.168.0.4"), 0))],
        ),
    ]
}

/// Expected text written from ipvsadm 1.31's printf formats.
const SAMPLE_SAVE: &str = "\
-A -t 10.0.0.1:80 -s rr
-a -t 10.0.0.1:80 -r 192.168.0.1:8080 -m -w 3
-a -t 10.0.0.1:80 -r 192.168.0.2:8080 -m -w 0
-A -u 10.0.0.2:53 -s sh -p 600 -M 255.255.255.0 -o -b sh-fallback,sh-port
-a -u 10.0.0.2:53 -r 192.168.0.3:53 -i -w 1 --tun-type ipip
-A --sctp-service [2001:db8::1]:3868 -s mh -p 30 -M 64 -b mh-port
-a --sctp-service [2001:db8::1]:3868 -r [2001:db8::10]:3868 -i -w 1 --tun-type gre --tun-csum
-a --sctp-service [2001:db8::1]:3868 -r [2001:db8::20]:3868 -i -w 1 --tun-type gue --tun-port 6080 --tun-remcsum
-A -f 7 -s wlc
-a -f 7 -r 192.168.0.4:0 -g -w 1
-A -f 7 -6 -s rr
";

#[test]
fn save_format_matches_ipvsadm_layout() {
    assert_eq!(format_save(&sample()), SAMPLE_SAVE);
}

#[test]
fn list_format_matches_ipvsadm_layout() {
    let info = Info {
        version: 0x010201,
        conn_table_size: 4096,
    };
    let mut table = sample();
    table[1].1[1].active_conns = 12;
    table[1].1[1].inactive_conns = 3;
    let expected = "\
IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  10.0.0.1:80 rr
  -> 192.168.0.1:8080             Masq    3      12         3         
  -> 192.168.0.2:8080             Masq    0      0          0         
UDP  10.0.0.2:53 sh (sh-fallback,sh-port) persistent 600 mask 255.255.255.0 ops
  -> 192.168.0.3:53               Tunnel  1      0          0         
SCTP [2001:db8::1]:3868 mh (mh-port) persistent 30 mask 64
  -> [2001:db8::10]:3868          Tunnel  1      0          0         
  -> [2001:db8::20]:3868          Tunnel  1      0          0         
FWM  7 wlc
  -> 192.168.0.4:0                Route   1      0          0         
FWM  7 IPv6 rr
";
    assert_eq!(format_list(&info, &table), expected);
}

#[test]
fn save_parse_round_trip() {
    let parsed = parse_save(SAMPLE_SAVE).unwrap();
    let expected: Vec<(Service, Vec<Destination>)> = sample()
        .into_iter()
        .map(|(s, d)| {
            (
                s.service.normalized(),
                d.into_iter().map(|d| d.destination).collect::<Vec<_>>(),
            )
        })
        .collect();
    // Same services and destinations, whatever the order.
    let canon = |mut t: Vec<(Service, Vec<Destination>)>| {
        for (_, d) in &mut t {
            d.sort();
        }
        t.sort();
        t
    };
    assert_eq!(canon(parsed.clone()), canon(expected));
    // And printing the parsed table gives the same text back.
    let table: Vec<_> = parsed
        .into_iter()
        .map(|(s, d)| (state(s), d.into_iter().map(dstate).collect()))
        .collect();
    assert_eq!(format_save(&table), SAMPLE_SAVE);
}

#[test]
fn parse_defaults_follow_ipvsadm() {
    let t = parse_save(
        "# comment\n\n-A -t 1.2.3.4:80\n-a -t 1.2.3.4:80 -r 5.6.7.8\n-a -t 1.2.3.4:80 -r 5.6.7.9:99 -g\n\
         -A -u [::1]:53 -s rr -p\n-A --fwmark-service=9 -6 -s wrr -p 10 -M 96\n",
    )
    .unwrap();
    let (svc, dests) = &t[0];
    assert_eq!(svc.scheduler, "wlc");
    assert_eq!(svc.netmask_prefix, 32);
    assert_eq!(dests[0], Destination::new(ip("5.6.7.8"), 80));
    // Direct routing cannot change the port: ipvsadm forces the service port.
    assert_eq!(dests[1].port, 80);
    assert_eq!(t[1].0.timeout, 300);
    assert_eq!(t[1].0.netmask_prefix, 128);
    assert_eq!(
        t[2].0.key,
        ServiceKey::FwMark {
            ipv6: true,
            mark: 9
        }
    );
    assert_eq!(t[2].0.netmask_prefix, 96);
}

#[test]
fn parse_errors_name_the_line() {
    let cases: &[(&str, usize, &str)] = &[
        (
            "-A -t 1.2.3.4:80\n-a -t 9.9.9.9:80 -r 1.1.1.1",
            2,
            "no earlier -A",
        ),
        (
            "-A -t 1.2.3.4:80 -s rr --bogus",
            1,
            "unknown or unsupported option `--bogus`",
        ),
        ("\n\n-A -t 1.2.3.4:99999", 3, "illegal port"),
        ("-A -t 1.2.3.4:0 -s rr", 1, "zero port"),
        (
            "-A -t 1.2.3.4:80 -s rr -b sh-port",
            1,
            "incompatible scheduler flag",
        ),
        ("-A -t 1.2.3.4:80 -o", 1, "only for UDP"),
        (
            "-A -t 1.2.3.4:80\n-a -t 1.2.3.4:80 -r [::1]:80 -m",
            2,
            "different address family",
        ),
        (
            "-A -t 1.2.3.4:80\n-a -t 1.2.3.4:80 -r 2.2.2.2 -i --tun-type gue",
            2,
            "needs --tun-port",
        ),
        (
            "-A -t 1.2.3.4:80\n-a -t 1.2.3.4:80 -r 2.2.2.2 -m --tun-type gre",
            2,
            "tunnel options",
        ),
        (
            "-A -t 1.2.3.4:80\n-a -t 1.2.3.4:80 -r 2.2.2.2 -w 70000",
            2,
            "illegal weight",
        ),
        ("-A -t 1.2.3.4:80 -s", 1, "needs a scheduler"),
        ("-t 1.2.3.4:80", 1, "neither -A"),
    ];
    for (text, line, needle) in cases {
        let err = parse_save(text).unwrap_err();
        assert_eq!(err.line, *line, "{text:?}: {err}");
        assert!(err.to_string().contains(needle), "{text:?}: {err}");
    }
}

#[test]
fn ordering_follows_ipvsadm_wrapping_comparator() {
    // 10.0.0.1 and 200.0.0.1 are more than 2^31 apart: ipvsadm's (int)(a - b) says
    // 10.0.0.1 > 200.0.0.1, and glibc's merge sort makes the output depend on input order.
    let svc = |a: &str| (state(Service::new(tcp(a, 80), "rr")), vec![]);
    let table = vec![
        svc("10.0.0.1"),
        svc("200.0.0.1"),
        svc("100.0.0.1"),
        svc("10.0.0.2"),
    ];
    let text = format_save(&table);
    let order: Vec<&str> = text
        .lines()
        .map(|l| l.split_whitespace().nth(2).unwrap())
        .collect();
    assert_eq!(
        order,
        ["200.0.0.1:80", "10.0.0.1:80", "10.0.0.2:80", "100.0.0.1:80"]
    );
}

/// The kernel keeps any IPv4 persistence mask, and so does ipvsadm (`inet_aton`): one that is no
/// prefix, as kube-router's 32.0.0.0, reads back and prints as it is.
#[test]
fn a_persistence_mask_that_is_no_prefix_round_trips() {
    let text = "-A -t 1.2.3.4:80 -s rr -p 5 -M 32.0.0.0\n";
    let parsed = parse_save(text).unwrap();
    assert_eq!(
        parsed[0].0.odd_netmask,
        Some(std::net::Ipv4Addr::new(32, 0, 0, 0))
    );
    let table: Vec<_> = parsed
        .into_iter()
        .map(|(s, d)| (state(s), d.into_iter().map(dstate).collect()))
        .collect();
    assert_eq!(format_save(&table), text);
}
