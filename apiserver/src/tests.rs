//! Tests of the server as a whole that need its insides (how many watch streams are open).

use super::ApiServer;
use crate::ClusterObjects;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A cluster of one Namespace, `default`.
pub(super) fn one_namespace() -> ClusterObjects {
    ClusterObjects {
        namespaces: vec![Namespace {
            metadata: ObjectMeta {
                name: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn server() -> (ApiServer, std::net::SocketAddr) {
    let server = ApiServer::start(one_namespace()).unwrap();
    let addr = server
        .listen_on("127.0.0.1:0".parse().unwrap(), "t")
        .unwrap();
    (server, addr)
}

fn open_watch(addr: std::net::SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /api/v1/namespaces?watch=1&resourceVersion=1 HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut first = [0u8; 12];
    s.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    s
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{what} within 5 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_client_that_hangs_up_mid_watch_ends_its_stream() {
    let (server, addr) = server();
    let watches: Vec<TcpStream> = (0..3).map(|_| open_watch(addr)).collect();
    wait_until("three open watches", || server.open_watches() == 3);
    drop(watches);
    wait_until("the streams of the gone clients end", || {
        server.open_watches() == 0
    });
    // The server still answers.
    let kept = open_watch(addr);
    wait_until("a new watch", || server.open_watches() == 1);
    server.stop_listening("t");
    wait_until("a stopped client's watch ends", || {
        server.open_watches() == 0
    });
    drop(kept);
}

#[test]
fn dropping_the_server_ends_everything() {
    let (server, addr) = server();
    let mut watch = open_watch(addr);
    drop(server);
    let mut rest = Vec::new();
    // The connection closes (EOF or reset), well before any timeout.
    let _ = watch.read_to_end(&mut rest);
    assert!(TcpStream::connect(addr).is_err());
}
