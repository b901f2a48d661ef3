use super::*;

/// A node's connect that gets no answer is a timeout, which observe judges `dropped`.
#[test]
fn a_connect_timed_out_by_its_send_timeout_is_a_timeout() {
    let e = std::io::Error::from_raw_os_error(libc::EINPROGRESS);
    assert_eq!(socket_error_kind(&e), "timeout");
    let refused = std::io::Error::from_raw_os_error(libc::ECONNREFUSED);
    assert_eq!(socket_error_kind(&refused), "refused");
}

/// A namespace with a veth pair `wa`/`wb`, both up: frames sent on `wa` by one packet
/// socket are queued on every other one of `wa` before `send` returns.
fn veth_ns(tag: &str) -> Netns {
    let ns = Netns::create(&format!("kpct-{tag}-{}", std::process::id())).expect("netns");
    ns.run(|| {
        for args in [
            &["link", "add", "wa", "type", "veth", "peer", "name", "wb"][..],
            &["link", "set", "wa", "up"],
            &["link", "set", "wb", "up"],
        ] {
            let status = std::process::Command::new("ip").args(args).status();
            assert!(status.expect("ip").success(), "ip {args:?}");
        }
        for iface in ["wa", "wb"] {
            assert!(has_link(iface), "{iface} has its peer up");
        }
    })
    .expect("in the namespace");
    ns
}

/// Whether `iface` (of this thread's namespace) has link (see netns/link.rs).
fn has_link(iface: &str) -> bool {
    crate::netns::has_link(iface).expect("ETHTOOL_GLINK")
}

fn udp_probe(seq: u32) -> ProbePacket {
    ProbePacket {
        protocol: Protocol::Udp,
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        src: "10.244.1.10".parse().unwrap(),
        sport: 40000,
        dst: "10.244.2.20".parse().unwrap(),
        dport: 8080,
        seq,
    }
}

/// A wait past its deadline reads on through unrelated frames to the one it waits for,
/// however long this thread was away between two reads (the predicate stands in for a
/// starved thread): it was queued in time.
#[test]
fn a_starved_wait_reads_past_unrelated_frames_to_the_one_queued_in_time() {
    let ns = veth_ns("starved");
    let mut watcher = Capture::open(&ns, "wa").expect("capture");
    let mut sender = Capture::open(&ns, "wa").expect("capture");
    let (unrelated, wanted) = (udp_probe(1), udp_probe(2));
    sender.send(&unrelated.frame()).expect("send");
    sender.send(&wanted.frame()).expect("send");
    let found = watcher
        .wait_for(Duration::ZERO, |f| {
            if unrelated.is_forward(f, unrelated.dst_mac) {
                std::thread::sleep(Duration::from_millis(150));
            }
            wanted.is_forward(f, wanted.dst_mac)
        })
        .expect("read");
    assert!(found.is_some(), "the frame queued behind the unrelated one");
}

/// A frame queued before the deadline is read by a watcher that starts after it.
#[test]
fn a_watcher_scheduled_after_the_deadline_still_reads_the_delivery_queued_in_time() {
    let ns = veth_ns("watch");
    let packet = udp_probe(7);
    let mut watcher = Capture::open(&ns, "wa").expect("capture");
    let mut sender = Capture::open(&ns, "wa").expect("capture");
    // Another packet socket on the sending device gets its copy before `send` returns.
    sender.send(&packet.frame()).expect("send");
    let past = Instant::now() - Duration::from_secs(1);
    let flow = watch_for_forward(&mut watcher, &packet, packet.dst_mac, past, || false)
        .expect("watch")
        .expect("the frame queued before the deadline");
    assert_eq!(flow.dst, packet.dst);
    assert_eq!(
        watch_for_forward(&mut watcher, &packet, packet.dst_mac, past, || true).expect("watch"),
        None,
        "nothing else was sent"
    );
}

/// A veth whose peer is down has no link, and the topology's check says so rather than let a
/// shot be dropped for it; with the peer up it passes.
#[test]
fn a_veth_without_its_peer_up_fails_the_link_check() {
    let ns = Netns::create(&format!("kpct-peerdown-{}", std::process::id())).expect("netns");
    ns.run(|| {
        for args in [
            &["link", "add", "wa", "type", "veth", "peer", "name", "wb"][..],
            &["link", "set", "wa", "up"],
        ] {
            let status = std::process::Command::new("ip").args(args).status();
            assert!(status.expect("ip").success(), "ip {args:?}");
        }
    })
    .expect("in the namespace");
    let err = ns.ensure_links_up(&["wa"]).unwrap_err();
    assert!(format!("{err:#}").contains("wa has no link"), "{err:#}");
    ns.run(|| {
        let status = std::process::Command::new("ip")
            .args(["link", "set", "wb", "up"])
            .status();
        assert!(status.expect("ip").success());
    })
    .expect("in the namespace");
    ns.ensure_links_up(&["wa", "wb"]).expect("both ends up");
}
