//! Builds a scenario's fake cluster out of network namespaces:
//!
//! ```text
//!   fabric netns: bridge underlay0 ─┬─ ul-n0 ══ eth0 [node-a netns] cni0 ─ vethNNNN ══ eth0 [pod]
//!                                   ├─ ul-n1 ══ eth0 [node-b netns] cni0 ─ …           flannel.1 (VXLAN VNI 1, :8472)
//!                                   └─ ul-ext ══ eth0 [external client netns]
//! ```
//!
//! Every node reaches every other node's pod CIDR over VXLAN the way flannel's vxlan backend
//! programs it: a route `podCIDR via <VTEP addr> dev flannel.1 onlink`, a permanent neighbour
//! for the VTEP address and an FDB entry sending that VTEP MAC to the node's underlay IP.
//! Nothing is created in the root namespace: the fabric itself is a namespace.

pub(crate) mod link;

pub use link::NetlinkNs;

use crate::netns::naming::*;
use crate::netns::{install_signal_cleanup, Netns};
use crate::scenario::{IpFamily, Ipv4Cidr, Ipv6Cidr, Scenario};
use anyhow::{anyhow, bail, Context, Result};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

/// The sysctl file that exists once br_netfilter is active in a namespace.
pub const BRIDGE_NF_CALL_IPTABLES: &str = "/proc/sys/net/bridge/bridge-nf-call-iptables";

/// A node namespace and what identifies it on the wire.
#[derive(Debug)]
pub struct NodeNs {
    pub name: String,
    /// The node's IPv4 underlay address; none in an IPv6-only underlay.
    pub ip: Option<Ipv4Addr>,
    /// Further eth0 addresses, each after the address of its family so that the node still
    /// sources its traffic from that one (see [`NodeNs::underlay_ips`]).
    pub secondary_ips: Vec<IpAddr>,
    /// The IPv4 podCIDR; none in an IPv6-only cluster.
    pub pod_cidr: Option<Ipv4Cidr>,
    /// The node's IPv6 underlay address, in a dual-stack or IPv6-only underlay.
    pub ipv6: Option<Ipv6Addr>,
    /// The IPv6 podCIDR of a dual-stack or IPv6-only node.
    pub pod_cidr_v6: Option<Ipv6Cidr>,
    /// The family the VXLAN overlay runs over: the underlay's first.
    pub overlay: IpFamily,
    pub vtep_mac: [u8; 6],
    pub netns: Netns,
}

impl NodeNs {
    /// The node's eth0 addresses: its IPv4 address, its IPv4 secondary ones, its IPv6 address,
    /// its IPv6 secondary ones.
    pub fn underlay_ips(&self) -> impl Iterator<Item = IpAddr> + '_ {
        let secondary = |family: IpFamily| {
            self.secondary_ips
                .iter()
                .copied()
                .filter(move |ip| IpFamily::of(*ip) == family)
        };
        self.ip
            .map(IpAddr::V4)
            .into_iter()
            .chain(secondary(IpFamily::Ipv4))
            .chain(self.ipv6.map(IpAddr::V6))
            .chain(secondary(IpFamily::Ipv6))
    }

    /// The node's underlay address of `family`, if it has one.
    pub fn ip_of(&self, family: IpFamily) -> Option<IpAddr> {
        pick(family, self.ip, self.ipv6)
    }

    /// The address the overlay's VXLAN packets leave from (`local`) and go to (peers' FDB).
    pub fn overlay_ip(&self) -> Result<IpAddr> {
        self.ip_of(self.overlay).ok_or_else(|| {
            anyhow!(
                "node {} has no {} underlay address for the overlay",
                self.name,
                self.overlay
            )
        })
    }

    /// The flannel.1 address: the pod CIDR's network address, as flannel assigns it.
    pub fn vtep_ip(&self) -> Option<Ipv4Addr> {
        self.pod_cidr.map(|c| c.network())
    }

    /// The cni0 bridge address, the pods' default gateway.
    pub fn gateway_ip(&self) -> Option<Ipv4Addr> {
        self.pod_cidr.map(|c| nth_or_network(c, 1))
    }

    /// The IPv6 flannel.1 address: the IPv6 podCIDR's network address, as for IPv4.
    pub fn vtep_ip_v6(&self) -> Option<Ipv6Addr> {
        self.pod_cidr_v6.map(|c| c.network())
    }

    /// The IPv6 cni0 address (`::1` of the IPv6 podCIDR), the pods' IPv6 default gateway.
    pub fn gateway_ip_v6(&self) -> Option<Ipv6Addr> {
        self.pod_cidr_v6.and_then(|c| c.nth(1))
    }
}

#[derive(Debug)]
pub struct PodNs {
    pub name: String,
    pub node: String,
    /// The pod's IPv4 address; none in an IPv6-only cluster.
    pub ip: Option<Ipv4Addr>,
    /// The pod's IPv6 address on a dual-stack node.
    pub ipv6: Option<Ipv6Addr>,
    pub mac: [u8; 6],
    /// The pod's veth on the node side (attached to cni0), where arriving packets are captured.
    pub host_veth: String,
    pub netns: Netns,
}

impl PodNs {
    /// The pod's address of `family`, if it has one.
    pub fn ip_of(&self, family: IpFamily) -> Option<IpAddr> {
        pick(family, self.ip, self.ipv6)
    }
}

impl ExternalNs {
    /// The client's address of `family`, if it has one.
    pub fn ip_of(&self, family: IpFamily) -> Option<IpAddr> {
        pick(family, self.ip, self.ipv6)
    }
}

fn pick(family: IpFamily, v4: Option<Ipv4Addr>, v6: Option<Ipv6Addr>) -> Option<IpAddr> {
    match family {
        IpFamily::Ipv4 => v4.map(IpAddr::V4),
        IpFamily::Ipv6 => v6.map(IpAddr::V6),
    }
}

#[derive(Debug)]
pub struct ExternalNs {
    pub name: String,
    pub ip: Option<Ipv4Addr>,
    pub ipv6: Option<Ipv6Addr>,
    pub mac: [u8; 6],
    pub netns: Netns,
}

/// How long building each part took (printed by the benchmark, never asserted).
#[derive(Debug, Clone, Default)]
pub struct BuildTimings {
    pub fabric: Duration,
    pub per_node: Vec<Duration>,
    pub overlay: Duration,
    pub per_pod: Vec<Duration>,
    pub external: Duration,
}

/// A built topology. Dropping it removes every namespace (and so every link) it created.
#[derive(Debug)]
pub struct Topology {
    prefix: RunPrefix,
    ipv6: Ipv6,
    // Field order is drop order: leaves first, the fabric last.
    pods: Vec<PodNs>,
    nodes: Vec<NodeNs>,
    external: Option<ExternalNs>,
    fabric: Netns,
    timings: BuildTimings,
}

impl Topology {
    /// Builds the topology of `scenario` (which must have passed validation).
    pub async fn build(scenario: &Scenario) -> Result<Topology> {
        Self::build_with_prefix(scenario, RunPrefix::next()).await
    }

    /// Builds under a given namespace prefix (labs use a stable one).
    pub async fn build_with_prefix(scenario: &Scenario, prefix: RunPrefix) -> Result<Topology> {
        install_signal_cleanup();
        let topo = &scenario.topology;
        let mut timings = BuildTimings::default();
        let ipv6 = Ipv6::of(topo);
        let new_ns = |name: &str| create_ns(name, ipv6);

        let started = Instant::now();
        let fabric = new_ns(&prefix.fabric())?;
        let fabric_nl = NetlinkNs::open(&fabric)?;
        fabric_nl.set_up("lo").await?;
        fabric_nl
            .add_bridge(FABRIC_BRIDGE, mac_for("fabric/underlay0"))
            .await?;
        fabric_nl.set_up(FABRIC_BRIDGE).await?;
        timings.fabric = started.elapsed();

        let mut nodes = Vec::with_capacity(topo.nodes.len());
        for (index, node) in topo.nodes.iter().enumerate() {
            let started = Instant::now();
            let netns = new_ns(&prefix.node(&node.name))?;
            let built = NodeNs {
                name: node.name.clone(),
                ip: node.ip.v4,
                secondary_ips: node.secondary_ips.clone(),
                pod_cidr: node.pod_cidr.v4,
                ipv6: node.ip.v6,
                pod_cidr_v6: node.pod_cidr.v6,
                overlay: topo.underlay.primary_family(),
                vtep_mac: mac_for(&format!("node/{}/{VXLAN_IF}", node.name)),
                netns,
            };
            build_node(&fabric_nl, index, &built, &topo.underlay).await?;
            add_existing_ipvs(&built, &node.existing_ipvs)?;
            nodes.push(built);
            timings.per_node.push(started.elapsed());
        }

        let started = Instant::now();
        for node in &nodes {
            wire_overlay(node, &nodes).await?;
        }
        timings.overlay = started.elapsed();

        let mut pods = Vec::with_capacity(topo.pods.len());
        let mut per_node_count = std::collections::BTreeMap::<&str, usize>::new();
        for pod in &topo.pods {
            let started = Instant::now();
            let node = nodes
                .iter()
                .find(|n| n.name == pod.node)
                .ok_or_else(|| anyhow!("pod {} is on unknown node {}", pod.name, pod.node))?;
            let slot = per_node_count.entry(pod.node.as_str()).or_default();
            let built = PodNs {
                name: pod.name.clone(),
                node: pod.node.clone(),
                ip: pod.ip.v4,
                ipv6: pod.ip.v6,
                mac: mac_for(&format!("pod/{}/{POD_IF}", pod.name)),
                host_veth: node_port_for_pod(*slot),
                netns: new_ns(&prefix.pod(&pod.name))?,
            };
            *slot += 1;
            build_pod(node, &built).await?;
            pods.push(built);
            timings.per_pod.push(started.elapsed());
        }

        let started = Instant::now();
        let external = match &topo.external {
            Some(ext) => {
                let built = ExternalNs {
                    name: ext.name.clone(),
                    ip: ext.ip.v4,
                    ipv6: ext.ip.v6,
                    mac: mac_for(&format!("external/{}/eth0", ext.name)),
                    netns: new_ns(&prefix.external(&ext.name))?,
                };
                build_external(&fabric_nl, &built, &topo.underlay).await?;
                Some(built)
            }
            None => None,
        };
        timings.external = started.elapsed();
        // The fabric's ends of the underlay's veths, each running (see netns/link.rs).
        let ports: Vec<String> = (0..nodes.len())
            .map(fabric_port_for_node)
            .chain(external.as_ref().map(|_| fabric_port_for_external()))
            .collect();
        fabric
            .ensure_links_up(&ports.iter().map(String::as_str).collect::<Vec<_>>())
            .context("the fabric")?;

        Ok(Topology {
            prefix,
            ipv6,
            pods,
            nodes,
            external,
            fabric,
            timings,
        })
    }

    pub fn prefix(&self) -> &str {
        self.prefix.as_str()
    }

    pub fn nodes(&self) -> &[NodeNs] {
        &self.nodes
    }

    pub fn pods(&self) -> &[PodNs] {
        &self.pods
    }

    pub fn node(&self, name: &str) -> Result<&NodeNs> {
        self.nodes
            .iter()
            .find(|n| n.name == name)
            .ok_or_else(|| anyhow!("no node `{name}` in this topology"))
    }

    /// The pod `reference` names (`namespace/name` or `name`: pod names are unique across
    /// namespaces).
    pub fn pod(&self, reference: &str) -> Result<&PodNs> {
        let name = reference.rsplit('/').next().unwrap_or(reference);
        self.pods
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| anyhow!("no pod `{reference}` in this topology"))
    }

    /// Creates `pod` (of the scenario, validated) on its node as a kubelet and the CNI do when
    /// a pod is scheduled there after the cluster was built: its namespace, its veth on the
    /// node's bridge (the lowest `vethNNNN` slot the node has free) and its addresses and
    /// routes. What the node and its other pods remember of the pod's addresses goes (a
    /// deleted pod may have held one, behind another MAC).
    pub async fn add_pod(&mut self, pod: &crate::scenario::Pod) -> Result<()> {
        if self.pods.iter().any(|p| p.name == pod.name) {
            bail!("pod `{}` already exists in this topology", pod.name);
        }
        let node = self.node(&pod.node)?;
        let taken: std::collections::BTreeSet<&str> = self
            .pods
            .iter()
            .filter(|p| p.node == pod.node)
            .map(|p| p.host_veth.as_str())
            .collect();
        let host_veth = (0..)
            .map(node_port_for_pod)
            .find(|name| !taken.contains(name.as_str()))
            .expect("a free veth slot");
        let built = PodNs {
            name: pod.name.clone(),
            node: pod.node.clone(),
            ip: pod.ip.v4,
            ipv6: pod.ip.v6,
            mac: mac_for(&format!("pod/{}/{POD_IF}", pod.name)),
            host_veth,
            netns: create_ns(&self.prefix.pod(&pod.name), self.ipv6)?,
        };
        for ip in built
            .ip
            .map(IpAddr::V4)
            .into_iter()
            .chain(built.ipv6.map(IpAddr::V6))
        {
            NetlinkNs::open(&node.netns)?.forget_neighbour(ip).await?;
            for peer in self.pods.iter().filter(|p| p.node == pod.node) {
                NetlinkNs::open(&peer.netns)?.forget_neighbour(ip).await?;
            }
        }
        build_pod(node, &built)
            .await
            .with_context(|| format!("creating pod {}", pod.name))?;
        self.pods.push(built);
        Ok(())
    }

    /// Deletes pod `name` as a kubelet does when the pod goes: its veth is removed from the
    /// node's bridge (synchronously, so no later probe can still reach it), then its network
    /// namespace. Whatever still holds a socket in the namespace must be stopped first.
    pub async fn delete_pod(&mut self, name: &str) -> Result<()> {
        let index = self
            .pods
            .iter()
            .position(|p| p.name == name)
            .ok_or_else(|| anyhow!("no pod `{name}` in this topology"))?;
        let pod = &self.pods[index];
        let node = self.node(&pod.node)?;
        NetlinkNs::open(&node.netns)?
            .delete_link(&pod.host_veth)
            .await
            .with_context(|| format!("deleting pod {name}"))?;
        drop(self.pods.remove(index));
        Ok(())
    }

    /// A namespace standing for `node` as a freshly booted machine: no links, only the IPVS
    /// services another load balancer had put there (`existingIPVS`). What a proxier programs
    /// into it is what it programs into a fresh node; dropping it removes it.
    pub fn fresh_twin(&self, node: &crate::scenario::Node) -> Result<NodeNs> {
        let built = self.node(&node.name)?;
        let twin = NodeNs {
            name: node.name.clone(),
            ip: built.ip,
            secondary_ips: built.secondary_ips.clone(),
            pod_cidr: built.pod_cidr,
            ipv6: built.ipv6,
            pod_cidr_v6: built.pod_cidr_v6,
            overlay: built.overlay,
            vtep_mac: built.vtep_mac,
            netns: create_ns(&self.prefix.twin(&node.name), self.ipv6)?,
        };
        add_existing_ipvs(&twin, &node.existing_ipvs)?;
        Ok(twin)
    }

    /// [`Topology::fresh_twin`] with the node's devices and addresses (its `eth0` a bridge
    /// with no port, so nothing reaches it): for a proxier that reads the node's addresses
    /// from its interfaces, as kube-proxy does for `nodePortAddresses` and IPVS NodePorts.
    pub async fn fresh_addressed_twin(
        &self,
        node: &crate::scenario::Node,
        underlay: &crate::scenario::DualCidr,
    ) -> Result<NodeNs> {
        let twin = self.fresh_twin(node)?;
        NetlinkNs::open(&twin.netns)?
            .add_bridge(
                UNDERLAY_IF,
                mac_for(&format!("node/{}/{UNDERLAY_IF}", node.name)),
            )
            .await?;
        configure_node(&twin, underlay)
            .await
            .with_context(|| format!("giving the fresh twin of {} its addresses", node.name))?;
        Ok(twin)
    }

    pub fn external(&self) -> Result<&ExternalNs> {
        self.external
            .as_ref()
            .ok_or_else(|| anyhow!("this scenario has no external client"))
    }

    pub fn fabric(&self) -> &Netns {
        &self.fabric
    }

    /// Every namespace of the topology, fabric first.
    pub fn namespaces(&self) -> Vec<&Netns> {
        let mut all = vec![&self.fabric];
        all.extend(self.nodes.iter().map(|n| &n.netns));
        all.extend(self.pods.iter().map(|p| &p.netns));
        all.extend(self.external.iter().map(|e| &e.netns));
        all
    }

    pub fn timings(&self) -> &BuildTimings {
        &self.timings
    }

    /// Keeps every namespace after this process exits (for labs); returns (role, namespace).
    pub fn persist(self) -> Vec<(String, String)> {
        let mut out = vec![("fabric".to_string(), self.fabric.persist())];
        for n in self.nodes {
            out.push((format!("node {}", n.name), n.netns.persist()));
        }
        for p in self.pods {
            out.push((format!("pod {}", p.name), p.netns.persist()));
        }
        if let Some(e) = self.external {
            out.push((format!("external {}", e.name), e.netns.persist()));
        }
        out
    }

    /// Removes everything and reports how long it took. Dropping does the same, silently.
    pub fn teardown(self) -> Duration {
        let started = Instant::now();
        drop(self);
        started.elapsed()
    }
}

/// Whether a topology's namespaces run IPv6: only when the scenario has an IPv6 range, so an
/// IPv4 scenario's namespaces carry no IPv6 at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ipv6 {
    Off,
    On,
}

impl Ipv6 {
    fn of(topo: &crate::scenario::Topology) -> Ipv6 {
        if topo.underlay.v6.is_some() || topo.cluster_cidr.v6.is_some() {
            Ipv6::On
        } else {
            Ipv6::Off
        }
    }
}

/// Creates a namespace of the topology, setting IPv6 up before any link exists, as the
/// `default` values are what later links take.
///
/// Off, IPv6 is disabled. On, it is quiet and deterministic, so that what reaches the wire is
/// only what a probe sends and the neighbour discovery it needs:
/// - no duplicate address detection (it delays an address and solicits on the wire);
/// - no router solicitations, no router advertisements accepted;
/// - link-local addresses from the links' fixed MACs (EUI-64), so they are fixed too;
/// - MLD reports (the kernel's robustness count of them, `net.ipv6.mld_qrv`, which only the
///   host's namespace has) within a millisecond of a link coming up, during the build and
///   before any probe captures, instead of at random moments up to a second later.
fn create_ns(name: &str, ipv6: Ipv6) -> Result<Netns> {
    let ns = Netns::create(name)?;
    let settings: &[(&str, &str)] = match ipv6 {
        Ipv6::Off => &[
            ("net.ipv6.conf.all.disable_ipv6", "1"),
            ("net.ipv6.conf.default.disable_ipv6", "1"),
        ],
        Ipv6::On => &[
            ("net.ipv6.conf.all.disable_ipv6", "0"),
            ("net.ipv6.conf.default.disable_ipv6", "0"),
            ("net.ipv6.conf.all.accept_dad", "0"),
            ("net.ipv6.conf.default.accept_dad", "0"),
            ("net.ipv6.conf.default.dad_transmits", "0"),
            ("net.ipv6.conf.all.accept_ra", "0"),
            ("net.ipv6.conf.default.accept_ra", "0"),
            ("net.ipv6.conf.default.router_solicitations", "0"),
            ("net.ipv6.conf.default.addr_gen_mode", "0"),
            (
                "net.ipv6.conf.default.mldv2_unsolicited_report_interval",
                "1",
            ),
            (
                "net.ipv6.conf.default.mldv1_unsolicited_report_interval",
                "1",
            ),
        ],
    };
    // ICMP errors without the kernel's per-destination rate limit (a burst of 6, then one a
    // second, net/ipv4/icmp.c `icmpv4_xrlim_allow`, net/ipv6/icmp.c likewise): a probe fires
    // its shots back to back, so past the sixth the port-unreachable of a REJECT, a closed
    // port or a missing route came or not depending on how fast the shots went, and a shot
    // without one waited out the whole probe timeout. Each shot is answered alike now.
    let icmp: &[(&str, &str)] = match ipv6 {
        Ipv6::Off => &[("net.ipv4.icmp_ratelimit", "0")],
        Ipv6::On => &[
            ("net.ipv4.icmp_ratelimit", "0"),
            ("net.ipv6.icmp.ratelimit", "0"),
        ],
    };
    for (key, value) in settings.iter().chain(icmp) {
        ns.set_sysctl(key, value)
            .with_context(|| format!("setting {key}={value} in {name}"))?;
    }
    Ok(ns)
}

fn nth_or_network(cidr: Ipv4Cidr, n: u32) -> Ipv4Addr {
    cidr.nth(n).unwrap_or_else(|| cidr.network())
}

/// The node's IPVS services from before any proxier (`existingIPVS`).
fn add_existing_ipvs(node: &NodeNs, text: &str) -> Result<()> {
    let table = ipvs_genl::parse_save(text).map_err(|e| {
        anyhow::anyhow!(
            "node {}: existingIPVS line {}: {}",
            node.name,
            e.line,
            e.message
        )
    })?;
    if table.is_empty() {
        return Ok(());
    }
    let mut handle = ipvs_genl::IpvsHandle::in_netns(node.netns.path()).map_err(|e| {
        anyhow::anyhow!(
            "node {}: existingIPVS needs IP_VS in the kernel ({e}); `sudo ci/test.sh` and `ci/kpct.sh` use a VM that has it",
            node.name
        )
    })?;
    ipvs_genl::apply(&mut handle, &table)
        .with_context(|| format!("node {}: adding its existingIPVS services", node.name))?;
    // IPVS NAT on a node whose netfilter tracks connections (every Kubernetes node) needs
    // conntrack to see the translation, or the real server's reply is a SYN-ACK out of nowhere,
    // INVALID (and dropped by kube-proxy's KUBE-FORWARD). A load balancer that works on such a
    // node has set this, as kube-proxy's IPVS mode does (`sysctlVSConnTrack`).
    node.netns
        .set_sysctl("net.ipv4.vs.conntrack", "1")
        .with_context(|| format!("node {}: net.ipv4.vs.conntrack for existingIPVS", node.name))
}

async fn build_node(
    fabric: &NetlinkNs,
    index: usize,
    node: &NodeNs,
    underlay: &crate::scenario::DualCidr,
) -> Result<()> {
    let port = fabric_port_for_node(index);
    fabric
        .add_veth(
            &port,
            mac_for(&format!("fabric/{port}")),
            UNDERLAY_IF,
            mac_for(&format!("node/{}/{UNDERLAY_IF}", node.name)),
            &node.netns,
        )
        .await?;
    fabric.enslave(&port, FABRIC_BRIDGE).await?;
    fabric.set_up(&port).await?;
    configure_node(node, underlay).await?;
    // Both ends are up now: each is running before anything is sent (see netns/link.rs).
    node.netns
        .ensure_links_up(&[UNDERLAY_IF])
        .with_context(|| format!("node {}", node.name))
}

/// A node's addresses, devices, routes and sysctls, on an `eth0` that exists already.
async fn configure_node(node: &NodeNs, underlay: &crate::scenario::DualCidr) -> Result<()> {
    // No ICMP redirects from nodes: a redirect updates the per-peer ICMP rate state
    // (net/ipv4/route.c ip_rt_send_redirect), so the port-unreachable of a kube-proxy REJECT
    // for traffic forwarded back out the interface it came in on would be rate-limited away,
    // hiding the proxier's behaviour behind node routing noise. `default` covers interfaces
    // created later (cni0, flannel.1, pod veths); eth0 exists already.
    for key in [
        "net.ipv4.conf.all.send_redirects",
        "net.ipv4.conf.default.send_redirects",
        "net.ipv4.conf.eth0.send_redirects",
    ] {
        node.netns
            .set_sysctl(key, "0")
            .with_context(|| format!("disabling redirects on node {}", node.name))?;
    }
    let nl = NetlinkNs::open(&node.netns)?;
    nl.set_up("lo").await?;
    // In this order, so the kernel keeps `ip` primary (IPv4); IPv6 secondaries are deprecated,
    // which source address selection avoids.
    for ip in node.underlay_ips() {
        if let Some(range) = underlay.of(IpFamily::of(ip)) {
            if node.secondary_ips.contains(&ip) {
                nl.add_secondary_address(UNDERLAY_IF, ip, range.prefix_len())
                    .await?;
            } else {
                nl.add_address(UNDERLAY_IF, ip, range.prefix_len()).await?;
            }
        }
    }
    nl.set_up(UNDERLAY_IF).await?;
    for family in IpFamily::ALL
        .into_iter()
        .filter(|f| node.ip_of(*f).is_some())
    {
        nl.add_default_dev_route(UNDERLAY_IF, family).await?;
    }

    nl.add_bridge(
        BRIDGE_IF,
        mac_for(&format!("node/{}/{BRIDGE_IF}", node.name)),
    )
    .await?;
    if let (Some(gateway), Some(range)) = (node.gateway_ip(), node.pod_cidr) {
        nl.add_address(BRIDGE_IF, gateway, range.prefix_len).await?;
    }
    if let (Some(gateway), Some(range)) = (node.gateway_ip_v6(), node.pod_cidr_v6) {
        nl.add_address(BRIDGE_IF, gateway, range.prefix_len).await?;
    }
    nl.set_up(BRIDGE_IF).await?;
    let ipv4 = node.ip.is_some() || node.pod_cidr.is_some();
    let ipv6 = node.ipv6.is_some() || node.pod_cidr_v6.is_some();
    for dev in [UNDERLAY_IF, BRIDGE_IF] {
        unanswered_neighbours_fail_fast(&node.netns, dev, ipv4, ipv6)?;
    }

    nl.add_vxlan(
        VXLAN_IF,
        node.vtep_mac,
        VXLAN_VNI,
        node.overlay_ip()?,
        UNDERLAY_IF,
        VXLAN_PORT,
    )
    .await?;
    if let Some(vtep) = node.vtep_ip() {
        nl.add_address(VXLAN_IF, vtep, 32).await?;
    }
    if let Some(vtep) = node.vtep_ip_v6() {
        nl.add_address(VXLAN_IF, vtep, 128).await?;
    }
    nl.set_up(VXLAN_IF).await?;

    // A node routes between pods, the overlay and the underlay, as every Kubernetes node does.
    node.netns
        .set_sysctl("net.ipv4.ip_forward", "1")
        .with_context(|| format!("enabling forwarding on node {}", node.name))?;
    if node.ipv6.is_some() || node.pod_cidr_v6.is_some() {
        node.netns
            .set_sysctl("net.ipv6.conf.all.forwarding", "1")
            .with_context(|| format!("enabling IPv6 forwarding on node {}", node.name))?;
    }
    // kubeadm's preflight requires bridged traffic to pass iptables; without it, a reply from a
    // pod to a client on the same bridge skips service reverse-NAT. `kernel_features` reports when the
    // kernel lacks it (then same-node service probes show untranslated replies).
    if node
        .netns
        .run(|| std::path::Path::new(BRIDGE_NF_CALL_IPTABLES).exists())?
    {
        node.netns
            .set_sysctl("net.bridge.bridge-nf-call-iptables", "1")
            .with_context(|| format!("enabling bridge-nf-call-iptables on node {}", node.name))?;
        if node.pod_cidr_v6.is_some() {
            node.netns
                .set_sysctl("net.bridge.bridge-nf-call-ip6tables", "1")
                .with_context(|| {
                    format!("enabling bridge-nf-call-ip6tables on node {}", node.name)
                })?;
        }
    }
    Ok(())
}

/// flannel's vxlan backend state on `node` for every other node.
async fn wire_overlay(node: &NodeNs, all: &[NodeNs]) -> Result<()> {
    let nl = NetlinkNs::open(&node.netns)?;
    for peer in all.iter().filter(|p| p.name != node.name) {
        nl.add_fdb(VXLAN_IF, peer.vtep_mac, peer.overlay_ip()?)
            .await?;
        if let (Some(vtep), Some(range)) = (peer.vtep_ip(), peer.pod_cidr) {
            nl.add_neighbour(VXLAN_IF, vtep, peer.vtep_mac).await?;
            nl.add_onlink_route(range.network(), range.prefix_len, vtep, VXLAN_IF)
                .await?;
        }
        // IPv6 pod traffic rides the same VXLAN device and tunnel, as flannel's dual-stack
        // vxlan backend does: the inner frame is IPv6, the VTEP MAC the same. (flannel names
        // the device of an IPv6-only underlay flannel-v6.1; here it stays flannel.1.)
        if let (Some(vtep), Some(range)) = (peer.vtep_ip_v6(), peer.pod_cidr_v6) {
            if node.pod_cidr_v6.is_some() {
                nl.add_neighbour(VXLAN_IF, vtep, peer.vtep_mac).await?;
                nl.add_onlink_route(range.network(), range.prefix_len, vtep, VXLAN_IF)
                    .await?;
            }
        }
    }
    Ok(())
}

/// How long each of the (3) neighbour solicitations of an address waits for an answer, in
/// milliseconds, on every interface of the suite that resolves addresses (the kernel's
/// default is 1000).
const NEIGHBOUR_RETRANS_MS: &str = "100";

/// Resolution of an address nobody answers for on `dev` fails in 0.3 s, well within a probe's
/// timeout, instead of 3 s, past it. A node has such destinations: its default route is the
/// underlay itself, so a ClusterIP port no rule takes, an external IP or a pod address no one
/// holds is resolved on the link. While a resolution is pending the packet waits in the
/// neighbour's queue; when it fails the kernel answers it with a host (ICMPv6: address)
/// unreachable (net/core/neighbour.c `neigh_invalidate`, `arp_error_report`,
/// `ndisc_error_report`), and the entry stays FAILED for a while. With the default timers the
/// first probe to such an address timed out (dropped) before that answer, and the next,
/// meeting the leftover entry, was rejected: one probe's outcome depended on the one before.
/// Now every shot meets the same thing: the failure, and its unreachable, within the probe.
fn unanswered_neighbours_fail_fast(ns: &Netns, dev: &str, ipv4: bool, ipv6: bool) -> Result<()> {
    let families = [("ipv4", ipv4), ("ipv6", ipv6)];
    for (family, _) in families.iter().filter(|(_, on)| *on) {
        let key = format!("net.{family}.neigh.{dev}.retrans_time_ms");
        ns.set_sysctl(&key, NEIGHBOUR_RETRANS_MS)
            .with_context(|| format!("{dev}: quick neighbour resolution failures"))?;
    }
    Ok(())
}

/// `2`: syncookies on every SYN, not only when the SYN queue overflows.
pub const TCP_SYNCOOKIES: &str = "net.ipv4.tcp_syncookies";

async fn build_pod(node: &NodeNs, pod: &PodNs) -> Result<()> {
    let inside = match (pod.ip, node.pod_cidr) {
        (Some(ip), Some(range)) => range.contains(ip),
        (Some(_), None) => false,
        (None, _) => true,
    };
    if !inside {
        bail!(
            "pod {} address {:?} is outside node {}'s podCIDR {:?}",
            pod.name,
            pod.ip,
            node.name,
            node.pod_cidr
        );
    }
    let node_nl = NetlinkNs::open(&node.netns)?;
    node_nl
        .add_veth(
            &pod.host_veth,
            mac_for(&format!("node/{}/{}", node.name, pod.host_veth)),
            POD_IF,
            pod.mac,
            &pod.netns,
        )
        .await?;
    node_nl.enslave(&pod.host_veth, BRIDGE_IF).await?;
    node_nl.set_hairpin(&pod.host_veth).await?;
    node_nl.set_up(&pod.host_veth).await?;

    // Backends answer every SYN with a syncookie and keep no half-open connection. A crafted
    // SYN whose SYN-ACK never meets the client's RST (a proxier that breaks the reply path, or
    // an RST lost to the next probe's conntrack flush) would otherwise leave a request socket
    // for a minute, and a later probe that the node masquerades to the same address and
    // random port would get that old SYN-ACK, for another sequence number, instead of its own.
    pod.netns
        .set_sysctl(TCP_SYNCOOKIES, "2")
        .with_context(|| format!("making pod {}'s listeners stateless", pod.name))?;
    let nl = NetlinkNs::open(&pod.netns)?;
    nl.set_up("lo").await?;
    if let (Some(ip), Some(range)) = (pod.ip, node.pod_cidr) {
        nl.add_address(POD_IF, ip, range.prefix_len).await?;
    }
    if let (Some(ip), Some(range)) = (pod.ipv6, node.pod_cidr_v6) {
        nl.add_address(POD_IF, ip, range.prefix_len).await?;
    }
    nl.set_up(POD_IF).await?;
    node.netns
        .ensure_links_up(&[&pod.host_veth])
        .with_context(|| format!("node {}", node.name))?;
    pod.netns
        .ensure_links_up(&[POD_IF])
        .with_context(|| format!("pod {}", pod.name))?;
    unanswered_neighbours_fail_fast(&pod.netns, POD_IF, pod.ip.is_some(), pod.ipv6.is_some())?;
    if let Some(gateway) = node.gateway_ip().filter(|_| pod.ip.is_some()) {
        nl.add_default_route(gateway).await?;
    }
    if let Some(gateway) = node.gateway_ip_v6().filter(|_| pod.ipv6.is_some()) {
        nl.add_default_route(gateway).await?;
    }
    Ok(())
}

async fn build_external(
    fabric: &NetlinkNs,
    ext: &ExternalNs,
    underlay: &crate::scenario::DualCidr,
) -> Result<()> {
    let port = fabric_port_for_external();
    fabric
        .add_veth(
            &port,
            mac_for(&format!("fabric/{port}")),
            "eth0",
            ext.mac,
            &ext.netns,
        )
        .await?;
    fabric.enslave(&port, FABRIC_BRIDGE).await?;
    fabric.set_up(&port).await?;
    let nl = NetlinkNs::open(&ext.netns)?;
    nl.set_up("lo").await?;
    if let (Some(ip), Some(range)) = (ext.ip, underlay.v4) {
        nl.add_address("eth0", ip, range.prefix_len).await?;
    }
    if let (Some(ip), Some(range)) = (ext.ipv6, underlay.v6) {
        nl.add_address("eth0", ip, range.prefix_len).await?;
    }
    nl.set_up("eth0").await?;
    ext.netns
        .ensure_links_up(&["eth0"])
        .with_context(|| format!("external {}", ext.name))?;
    unanswered_neighbours_fail_fast(&ext.netns, "eth0", ext.ip.is_some(), ext.ipv6.is_some())
}
