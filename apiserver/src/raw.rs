//! One connection's bytes, answered by a server of its own in virtual time: the API server's
//! request handling (HTTP/1 parsing, routing, queries, selectors, lists, watches, writes) as
//! the fuzz target and its corpus test run it. Virtual time, so that what waits in a real
//! server (a resourceVersion from the future, a watch until its timeout) ends at once and the
//! same bytes always get the same answer.

use super::reply::ClientCtx;
use super::Shared;
use crate::ClusterObjects;
use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How much of an answer is kept: enough for every frame of a watch of a small cluster.
const ANSWER_LIMIT: u64 = 16 << 20;

/// Serves `objects` to one client that sends `request` (any bytes, possibly several requests)
/// and closes its side; returns everything the server wrote before it closed the connection.
pub fn answer_raw(objects: ClusterObjects, request: &[u8]) -> Result<Vec<u8>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .context("building a runtime")?;
    let shared = Arc::new(Shared::default());
    shared.publish(objects)?;
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let ctx = Arc::new(ClientCtx {
        shared,
        client: "raw".to_string(),
        stop,
        local: SocketAddr::from(([127, 0, 0, 1], super::API_PORT)),
    });
    let answer = runtime.block_on(async move {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let serving = tokio::spawn(super::listen::serve_connection(server, ctx, true));
        let mut answer = Vec::new();
        let (mut reader, mut writer) = tokio::io::split(&mut client);
        let write = async {
            // The server may answer and close before it has read everything.
            let _ = writer.write_all(request).await;
            let _ = writer.shutdown().await;
        };
        let mut limited = (&mut reader).take(ANSWER_LIMIT);
        let read = limited.read_to_end(&mut answer);
        let (_, read) = tokio::join!(write, read);
        stop_tx.send_replace(true);
        // The connection's task ends once the answer has: a panic in it (which tokio would
        // keep to the task, as the real server keeps it to the connection) is a finding.
        if let Err(e) = serving.await {
            if e.is_panic() {
                std::panic::resume_unwind(e.into_panic());
            }
        }
        read.map(|_| answer)
    });
    answer.context("reading the answer")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(request: &str) -> String {
        String::from_utf8(answer_raw(crate::tests::one_namespace(), request.as_bytes()).unwrap())
            .unwrap()
    }

    /// Two requests on one connection get two answers, the second after the first.
    #[test]
    fn requests_on_one_connection_are_answered_in_order() {
        let text = answer(
            "GET /api/v1/namespaces/default HTTP/1.1\r\nHost: x\r\n\r\n\
             GET /api/v1/namespaces/nope HTTP/1.1\r\nHost: x\r\n\r\n",
        );
        let ok = text.find("HTTP/1.1 200 OK").unwrap();
        let missing = text.find("HTTP/1.1 404 Not Found").unwrap();
        assert!(ok < missing, "{text}");
        assert!(text.contains(r#""name":"default""#), "{text}");
        assert!(text.contains(r#"namespaces \"nope\" not found"#), "{text}");
    }

    /// A watch ends at its timeout at once in virtual time, after its initial events and the
    /// end-of-initial-events bookmark; a resourceVersion from the future answers after the
    /// server's wait, without waiting in real time; bytes that are no HTTP get a 400.
    #[test]
    fn what_waits_in_a_real_server_ends_at_once() {
        let started = std::time::Instant::now();
        let watch = answer(
            "GET /api/v1/namespaces?watch=true&sendInitialEvents=true&allowWatchBookmarks=true\
             &resourceVersionMatch=NotOlderThan&timeoutSeconds=600 HTTP/1.1\r\nHost: x\r\n\r\n",
        );
        assert!(watch.contains(r#""type":"ADDED""#), "{watch}");
        assert!(watch.contains("k8s.io/initial-events-end"), "{watch}");
        assert!(watch.ends_with("0\r\n\r\n"), "the stream ended: {watch}");
        let future = answer("GET /api/v1/namespaces?resourceVersion=99&resourceVersionMatch=NotOlderThan HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(
            future.starts_with("HTTP/1.1 504") || future.contains("Too large resource version"),
            "{future}"
        );
        assert!(answer("\x00\x01garbage\r\n\r\n").starts_with("HTTP/1.1 400"));
        assert!(
            started.elapsed() < std::time::Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
    }
}
