//! Echo servers in every pod, on every declared container port, and the nodes' health-check
//! listeners.
//!
//! For crafted probes the kernel does the answering (a listening socket makes it send SYN-ACK;
//! UDP probes are echoed back unchanged). For socket probes the servers answer like agnhost's
//! `netexec /clientip`: with the client address they saw, so an application-level check can tell
//! masquerade from source preservation.

use crate::netns::Netns;
use crate::scenario::Protocol;
use crate::topology::Topology;
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use tokio::io::AsyncWriteExt;
use tokio::task::JoinHandle;

/// Running servers; stopped when dropped.
pub struct Backends {
    /// Each server task with the pod (or `health-check@NODE`) it serves for.
    tasks: Vec<(String, JoinHandle<()>)>,
    /// The open connections of each TCP server, by the pod it serves for.
    connections: Vec<(String, OpenConnections)>,
    /// Listening SCTP sockets, by pod: the kernel answers an INIT itself, so holding them is
    /// serving.
    sctp_listeners: Vec<(String, OwnedFd)>,
}

impl Drop for Backends {
    fn drop(&mut self) {
        for (_, t) in &self.tasks {
            t.abort();
        }
    }
}

impl Backends {
    fn serve_tcp_for(&mut self, owner: String, listener: tokio::net::TcpListener) {
        let open = OpenConnections::default();
        self.connections.push((owner.clone(), open.clone()));
        self.tasks.push((
            owner.clone(),
            tokio::spawn(serve_tcp(listener, owner, open)),
        ));
    }
}

/// What a socket-probe server answers: the peer address it saw, who it is, and the port it was
/// reached on (`client=IP:PORT pod=NAME port=N`), so a flow kept across steps tells a backend
/// port from another on the same pod.
pub fn client_ip_answer(peer: std::net::SocketAddr, pod: &str, port: u16) -> String {
    format!("client={peer} pod={pod} port={port}\n")
}

/// Probe payloads are echoed verbatim so the crafted packet's reply can be matched.
fn udp_answer(payload: &[u8], peer: std::net::SocketAddr, pod: &str, port: u16) -> Vec<u8> {
    if payload.starts_with(b"kpct-probe") {
        payload.to_vec()
    } else {
        client_ip_answer(peer, pod, port).into_bytes()
    }
}

impl Backends {
    /// Starts a server for each container port of each pod of `topo`, as declared in `pods`.
    pub fn start(topo: &Topology, pods: &[crate::scenario::Pod]) -> Result<Backends> {
        let mut backends = Backends {
            tasks: Vec::new(),
            connections: Vec::new(),
            sctp_listeners: Vec::new(),
        };
        for pod in pods {
            backends.start_pod(topo, pod)?;
        }
        Ok(backends)
    }

    /// Starts a server for each container port `pod` declares, in its namespace of `topo`: a
    /// pod's containers starting (also for a pod a scenario step creates).
    pub fn start_pod(&mut self, topo: &Topology, pod: &crate::scenario::Pod) -> Result<()> {
        let pod_ns = topo.pod(&pod.name)?;
        let ns = &pod_ns.netns;
        // Every IPv4 address, and on a dual-stack pod its IPv6 address (bound as such:
        // `[::]` would take IPv4 too and clash with the first socket).
        let addresses =
            std::iter::once(IpAddr::V4(Ipv4Addr::UNSPECIFIED)).chain(pod_ns.ipv6.map(IpAddr::V6));
        for address in addresses {
            for port in &pod.ports {
                self.serve_port(
                    ns,
                    &pod.name,
                    SocketAddr::new(address, port.container_port),
                    port.protocol,
                )?;
            }
        }
        Ok(())
    }

    /// An echo server for `protocol` on `addr` in pod `pod`'s namespace.
    fn serve_port(
        &mut self,
        ns: &Netns,
        pod: &str,
        addr: SocketAddr,
        protocol: Protocol,
    ) -> Result<()> {
        let what = format!("{} {addr} of pod {pod}", protocol.upper());
        match protocol {
            Protocol::Tcp => {
                let listener =
                    tcp_listen(ns, addr).with_context(|| format!("listening on {what}"))?;
                self.serve_tcp_for(pod.to_string(), listener);
            }
            Protocol::Udp => {
                let socket = ns
                    .run(|| -> std::io::Result<std::net::UdpSocket> {
                        let s = std::net::UdpSocket::bind(addr)?;
                        s.set_nonblocking(true)?;
                        Ok(s)
                    })?
                    .with_context(|| format!("binding {what}"))?;
                let socket = tokio::net::UdpSocket::from_std(socket)?;
                self.tasks.push((
                    pod.to_string(),
                    tokio::spawn(serve_udp(socket, pod.to_string())),
                ));
            }
            Protocol::Sctp => {
                let SocketAddr::V4(addr) = addr else {
                    bail!("{what}: SCTP over IPv6 is not served yet");
                };
                let fd = ns
                    .run(|| sctp_listen(addr))?
                    .with_context(|| format!("listening on {what}"))?;
                self.sctp_listeners.push((pod.to_string(), fd));
            }
        }
        Ok(())
    }

    /// Stops the servers of pod `name` as its processes' exit would, and returns once every
    /// socket they held is closed and each connection's client has acknowledged the close, so
    /// the pod's namespace can really go away.
    pub async fn stop_pod(&mut self, name: &str) {
        let (stopping, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.tasks)
            .into_iter()
            .partition(|(owner, _)| owner == name);
        self.tasks = kept;
        for (_, task) in stopping {
            task.abort();
            // A cancelled task's future, and with it its listener and its connections' own
            // descriptors, is dropped before `await` returns.
            let _ = task.await;
        }
        let mut fds = Vec::new();
        self.connections.retain(|(owner, open)| {
            if owner == name {
                fds.extend(std::mem::take(&mut *lock(open)).into_values());
            }
            owner != name
        });
        let _ = tokio::task::spawn_blocking(move || close_lingering(fds)).await;
        self.sctp_listeners.retain(|(owner, _)| owner != name);
    }

    /// What a run serves: every pod's echo servers, and every Service's healthCheckNodePort
    /// on each node.
    pub fn for_scenario(
        topo: &Topology,
        scenario: &crate::scenario::Scenario,
        cluster: &crate::scenario::cluster::ClusterState,
    ) -> Result<Backends> {
        let mut backends = Backends::start(topo, &scenario.topology.pods)?;
        let health_checks = cluster.health_check_node_ports();
        let wildcard = |name: &str| -> Result<Vec<IpAddr>> {
            let node = topo.node(name)?;
            Ok(std::iter::once(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
                .chain(node.ipv6.map(IpAddr::V6))
                .collect())
        };
        backends.serve_health_checks(topo, &Vec::from_iter(health_checks), &wildcard)?;
        Ok(backends)
    }

    /// Listens on each node, on every healthCheckNodePort, at the addresses `addresses` gives
    /// for the node, as kube-proxy's health server (pkg/proxy/healthcheck) does: a probe of one
    /// is answered by the node itself, if the proxier lets it through.
    pub fn serve_health_checks(
        &mut self,
        topo: &Topology,
        ports: &[u16],
        addresses: &dyn Fn(&str) -> Result<Vec<IpAddr>>,
    ) -> Result<()> {
        if ports.is_empty() {
            return Ok(());
        }
        for node in topo.nodes() {
            for address in addresses(&node.name)? {
                for &port in ports {
                    let addr = SocketAddr::new(address, port);
                    let listener = tcp_listen(&node.netns, addr).with_context(|| {
                        format!(
                            "listening on healthCheckNodePort {addr} of node {}",
                            node.name
                        )
                    })?;
                    self.serve_tcp_for(format!("{HEALTH_CHECK_SERVER}{}", node.name), listener);
                }
            }
        }
        Ok(())
    }
}

/// What a node's health-check server calls itself in its answers (`pod=health-check@NODE`):
/// the node answered, no pod did.
pub const HEALTH_CHECK_SERVER: &str = "health-check@";

/// A non-blocking TCP listener on `addr` inside `ns`, handed to tokio. An IPv6 one takes
/// IPv6 only (`IPV6_V6ONLY`, as Go's `tcp6` listeners do), so `[::]:P` and `0.0.0.0:P` are two
/// listeners, one per family, as kube-proxy's per-family health servers are.
fn tcp_listen(ns: &Netns, addr: SocketAddr) -> Result<tokio::net::TcpListener> {
    let listener = ns.run(|| -> std::io::Result<std::net::TcpListener> {
        use nix::sys::socket::{
            bind, listen, setsockopt, socket, sockopt, AddressFamily, Backlog, SockFlag, SockType,
            SockaddrStorage,
        };
        let family = if addr.is_ipv4() {
            AddressFamily::Inet
        } else {
            AddressFamily::Inet6
        };
        let fd = socket(
            family,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            None,
        )?;
        setsockopt(&fd, sockopt::ReuseAddr, &true)?;
        if addr.is_ipv6() {
            setsockopt(&fd, sockopt::Ipv6V6Only, &true)?;
        }
        bind(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            &SockaddrStorage::from(addr),
        )?;
        listen(&fd, Backlog::new(128)?)?;
        Ok(std::net::TcpListener::from(fd))
    })??;
    Ok(tokio::net::TcpListener::from_std(listener)?)
}

/// A one-to-one SCTP socket (std has none), in the calling thread's namespace. Fails
/// (EPROTONOSUPPORT) when the kernel has no SCTP, as this suite's host has not (the VM's has).
pub(crate) fn sctp_socket() -> std::io::Result<std::os::fd::OwnedFd> {
    // SAFETY: socket(2) with constant arguments; the result is checked before it is owned.
    let raw = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            libc::IPPROTO_SCTP,
        )
    };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor nothing else owns.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(raw) })
}

/// A listening SCTP socket: the kernel answers INITs on it by itself.
fn sctp_listen(addr: SocketAddrV4) -> std::io::Result<OwnedFd> {
    use nix::sys::socket::{bind, listen, Backlog, SockaddrIn};
    let fd = sctp_socket().map_err(|e| {
        std::io::Error::other(format!(
            "this kernel has no SCTP (CONFIG_IP_SCTP, module sctp): socket(IPPROTO_SCTP): {e}"
        ))
    })?;
    bind(fd.as_raw_fd(), &SockaddrIn::from(addr))?;
    listen(&fd, Backlog::new(16).map_err(std::io::Error::other)?)?;
    Ok(fd)
}

/// How long (seconds) closing a connection of a stopping pod may wait for the client's
/// acknowledgement of its FIN.
const CLOSE_LINGER_S: i32 = 2;

/// A duplicate of each connection a TCP server holds open, by connection number: the
/// connection itself lives in the server's task, and a socket is only closed when its last
/// descriptor is, so stopping the task leaves these to close the way [`Backends::stop_pod`]
/// wants.
type OpenConnections = Arc<Mutex<BTreeMap<u64, OwnedFd>>>;

/// Answers each connection at once, then again for every chunk the client sends, until the
/// client closes: a one-shot probe reads the first line and closes, a flow kept across steps
/// asks again later and learns which backend holds it. Connections are futures of this task
/// rather than tasks of their own, so stopping the task ends every one at once.
async fn serve_tcp(listener: tokio::net::TcpListener, pod: String, open: OpenConnections) {
    use futures::stream::{FuturesUnordered, StreamExt};
    use std::os::fd::AsFd;
    let mut connections = FuturesUnordered::new();
    let mut next_id = 0u64;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Ok(dup) = stream.as_fd().try_clone_to_owned() else {
                        continue;
                    };
                    let id = next_id;
                    next_id += 1;
                    lock(&open).insert(id, dup);
                    let open = open.clone();
                    let pod = pod.clone();
                    connections.push(async move {
                        serve_tcp_connection(stream, peer, pod).await;
                        lock(&open).remove(&id);
                    });
                }
                Err(_) => return,
            },
            Some(()) = connections.next(), if !connections.is_empty() => {}
        }
    }
}

/// The map, even if a thread panicked holding it (it only holds descriptors).
fn lock(open: &OpenConnections) -> std::sync::MutexGuard<'_, BTreeMap<u64, OwnedFd>> {
    open.lock().unwrap_or_else(|e| e.into_inner())
}

/// Ends each connection as its process's exit would, and returns once its client has
/// acknowledged the FIN (at most [`CLOSE_LINGER_S`] each), so the client has learnt of the
/// close before anything can take the FIN away (the pod's veth going). Blocking: run it off
/// the async workers.
///
/// `shutdown` sends the FIN at once; the lingering `close` then waits for its acknowledgement.
/// `close` alone sends nothing until the socket's last descriptor goes, and a process the
/// harness forks in another thread holds a copy of every descriptor until it execs: the FIN
/// then left after the pod was gone, and the client never saw the connection end (2 runs in 40
/// of transition-pod-deleted-established at `-j 8`).
fn close_lingering(fds: Vec<OwnedFd>) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: CLOSE_LINGER_S,
    };
    for fd in fds {
        // A socket that refuses either is closed at once, as it would be anyway.
        let _ = nix::sys::socket::setsockopt(&fd, nix::sys::socket::sockopt::Linger, &linger);
        let _ = nix::sys::socket::shutdown(fd.as_raw_fd(), nix::sys::socket::Shutdown::Write);
        drop(fd);
    }
}

async fn serve_tcp_connection(
    mut stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    pod: String,
) {
    use tokio::io::AsyncReadExt;
    let port = stream.local_addr().map_or(0, |a| a.port());
    let answer = client_ip_answer(peer, &pod, port);
    let mut buf = [0u8; 512];
    loop {
        if stream.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    let _ = stream.shutdown().await;
}

async fn serve_udp(socket: tokio::net::UdpSocket, pod: String) {
    let port = socket.local_addr().map_or(0, |a| a.port());
    let mut buf = vec![0u8; 2048];
    while let Ok((n, peer)) = socket.recv_from(&mut buf).await {
        let _ = socket
            .send_to(&udp_answer(&buf[..n], peer, &pod, port), peer)
            .await;
    }
}
