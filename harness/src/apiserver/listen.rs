//! Listening sockets and the connections accepted on them, which a client's stop signal
//! ends at once (a node that goes away takes its proxier's connections with it; a graceful
//! HTTP shutdown would wait for watches that last half an hour).

use super::http::{self, ClientCtx};
use axum::Router;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A bound, non-blocking listener, ready to hand to the runtime.
pub(crate) fn bind(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Brings `lo` up in the calling thread's network namespace if it is down (a fresh
/// namespace's is), so that 127.0.0.1 works there.
pub(crate) fn loopback_up() -> io::Result<()> {
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

/// An accepted connection that fails every read and write once its client is stopped.
struct Conn {
    io: TcpStream,
    stop: Pin<Box<dyn Future<Output = ()> + Send>>,
    stopped: bool,
}

impl Conn {
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if !self.stopped && self.stop.as_mut().poll(cx).is_ready() {
            self.stopped = true;
        }
        if self.stopped {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "client no longer served",
            ));
        }
        Ok(())
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Err(e) = self.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if let Err(e) = self.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Err(e) = self.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

struct StoppableListener {
    inner: TcpListener,
    stop: watch::Receiver<bool>,
}

impl axum::serve::Listener for StoppableListener {
    type Io = Conn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Conn, SocketAddr) {
        loop {
            match self.inner.accept().await {
                Ok((io, addr)) => {
                    // Events go out as written, not after Nagle's delay.
                    let _ = io.set_nodelay(true);
                    let stop = Box::pin(stopped(self.stop.clone()));
                    return (
                        Conn {
                            io,
                            stop,
                            stopped: false,
                        },
                        addr,
                    );
                }
                // Out of descriptors and the like: wait and try again, as axum's own does.
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// Serves `listener` until the client is stopped; then the listener closes.
pub(crate) async fn serve(listener: TcpListener, ctx: Arc<ClientCtx>) {
    let stop = ctx.stop.clone();
    let router = Router::new().fallback(http::handle).with_state(ctx);
    let listener = StoppableListener {
        inner: listener,
        stop: stop.clone(),
    };
    tokio::select! {
        _ = axum::serve(listener, router) => {}
        () = stopped(stop) => {}
    }
}
