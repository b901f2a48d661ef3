//! Listening sockets, which a client's stop signal closes together with every connection
//! accepted on them (a node that goes away takes its proxier's connections with it).

use super::http;
use super::reply::ClientCtx;
use axum::body::Body;
use axum::extract::State;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// A bound, non-blocking listener, ready to hand to the runtime.
pub fn bind(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Brings `lo` up in the calling thread's network namespace if it is down (a fresh
/// namespace's is), so that 127.0.0.1 works there.
pub fn loopback_up() -> io::Result<()> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: socket(2) has no memory arguments; the descriptor is owned (closed) below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nothing else owns.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain data, for which all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = libc::c_char::from_ne_bytes([*src]);
    }
    // SAFETY: SIOCGIFFLAGS reads the name from and writes the flags into `req`, which lives
    // for the call.
    if unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    let up = libc::c_short::try_from(libc::IFF_UP).unwrap_or(1);
    if flags & up != 0 {
        return Ok(());
    }
    req.ifr_ifru.ifru_flags = flags | up;
    // SAFETY: as above; SIOCSIFFLAGS only reads `req`.
    if unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Resolves once `stop` turns true or its sender is gone.
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Serves HTTP/1 on one connection until the client closes it. With `half_close`, a client
/// that has shut its sending side still gets the answers to what it sent.
pub(crate) async fn serve_connection<Io>(io: Io, ctx: Arc<ClientCtx>, half_close: bool)
where
    Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let ctx = Arc::clone(&ctx);
        async move { Ok::<_, Infallible>(http::handle(State(ctx), req.map(Body::new)).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .half_close(half_close)
        .serve_connection(TokioIo::new(io), service)
        .await;
}

/// Serves `listener` until the client is stopped. Then the listener closes and every
/// connection accepted on it is dropped at once, idle, half-sent or in the middle of a watch:
/// a graceful shutdown (axum's `serve`) would let a half-sent request hold its connection open
/// until it completes, and a node that goes away answers nothing more.
pub(crate) async fn serve(listener: TcpListener, ctx: Arc<ClientCtx>) {
    let stop = ctx.stop.clone();
    // Dropped with this future: aborts every connection's task, which closes its socket.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((io, _)) = accepted else { continue };
                // Events go out as written, not after Nagle's delay.
                let _ = io.set_nodelay(true);
                connections.spawn(serve_connection(io, Arc::clone(&ctx), false));
            }
            // Reap finished connections so a long run does not accumulate them.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            () = stopped(stop.clone()) => return,
        }
    }
}
