//! Generated scenarios: random but valid, the same bytes for the same seed and case
//! ([`Generator::case`]), covering the scenario format.
//!
//! As Csmith makes only C programs free of undefined behaviour, the generator makes only cases
//! whose outcome Kubernetes decides, so that any difference between two proxiers is one of
//! theirs: a flow kept across steps goes to a Service with at most one endpoint (which backend
//! a connection to several picks is the proxier's choice, and the flow's later fate would
//! follow it), and every probe of a Service with session affinity is compared by how many
//! backends it reached, not which ([`super::compare`]).

mod addresses;
mod draw;
mod services;
mod steps;
mod targets;
pub mod weights;

pub use addresses::Families;
pub(crate) use services::target_number;
pub(crate) use targets::endpoint_addresses;
pub use weights::Weights;

use crate::scenario::{
    ContainerPort, EndpointSlice, External, Node, NodePortAddress, Pod, Probe, Protocol,
    ProxierOptions, Scenario, Service, Topology,
};
use draw::Draw;
use std::collections::BTreeMap;

/// The ports every server pod listens on (an echo server each): two TCP and two UDP, so a
/// Service's targetPort can move from one to the other on the same pod.
pub(crate) const POD_PORTS: [(&str, u16, Protocol); 4] = [
    ("http", 8080, Protocol::Tcp),
    ("alt", 9090, Protocol::Tcp),
    ("dns", 5353, Protocol::Udp),
    ("dns-alt", 5354, Protocol::Udp),
];

/// The SCTP port server pods also listen on when SCTP is drawn (IPv4 clusters only: kpct runs
/// SCTP over IPv4).
pub(crate) const SCTP_POD_PORT: (&str, u16, Protocol) = ("assoc", 7777, Protocol::Sctp);

/// Makes cases.
#[derive(Debug, Clone, Default)]
pub struct Generator {
    pub weights: Weights,
}

impl Generator {
    pub fn new(weights: Weights) -> Generator {
        Generator { weights }
    }

    /// Case `case` of `seed`: a valid scenario (it passes `kpct validate`), named
    /// `gen-SEED-CASE`, the same for the same seed, case and weights.
    pub fn case(&self, seed: u64, case: u64) -> Scenario {
        let mut g = Case::new(&self.weights, Draw::new(seed, case));
        g.build(format!("gen-{seed}-{case}"))
    }
}

/// An app: the label its server pods carry and the namespace they and its Services live in.
#[derive(Debug, Clone)]
pub(crate) struct App {
    pub label: String,
    pub namespace: String,
}

/// One case being made.
pub(crate) struct Case<'w> {
    pub w: &'w Weights,
    pub d: Draw,
    pub families: Families,
    pub apps: Vec<App>,
    /// Pods made so far on each node (their addresses count up from .10).
    pub pods_on_node: Vec<usize>,
    /// Server pods made so far per app (their names count up from 1).
    pub pods_of_app: BTreeMap<String, usize>,
    /// NodePorts handed out so far.
    pub node_ports: u16,
    /// Whether SCTP ports are made at all.
    pub sctp: bool,
    /// What Services deleted by earlier steps were reached at: (ClusterIP, port, protocol),
    /// literal destinations for later probes.
    pub gone: Vec<(std::net::IpAddr, u16, Protocol)>,
    /// How many steps the case gets (a flow is kept only where a later step can continue it).
    pub steps_planned: usize,
}

/// The node names, in order.
pub(crate) const NODE_NAMES: [&str; 3] = ["node-a", "node-b", "node-c"];

/// A name of 63 characters (a DNS label's most) starting with `stem`.
pub(crate) fn long_name(stem: &str) -> String {
    let mut name = format!("{stem}-");
    while name.len() < 62 {
        name.push_str("long");
    }
    name.truncate(62);
    name.push('x');
    name
}

impl<'w> Case<'w> {
    fn new(w: &'w Weights, d: Draw) -> Case<'w> {
        Case {
            w,
            d,
            families: Families::IPV4,
            apps: Vec::new(),
            pods_on_node: Vec::new(),
            pods_of_app: BTreeMap::new(),
            node_ports: 0,
            sctp: false,
            gone: Vec::new(),
            steps_planned: 0,
        }
    }

    /// A weighted choice among the knobs `prefix.NAME`, as the value of `choices` paired with
    /// each NAME.
    pub fn choose<T: Copy>(&mut self, prefix: &str, choices: &[(&str, T)]) -> T {
        let weighted: Vec<(T, u32)> = choices
            .iter()
            .map(|(name, value)| (*value, self.w.get(&format!("{prefix}.{name}"))))
            .collect();
        self.d.weighted(&weighted)
    }

    /// Whether the percentage knob `name` (without its `%`) comes up.
    pub fn chance(&mut self, name: &str) -> bool {
        let percent = self.w.get(&format!("{name}%"));
        self.d.chance(percent)
    }

    fn build(&mut self, name: String) -> Scenario {
        self.families = self.choose(
            "family",
            &[
                ("ipv4", Families::IPV4),
                ("ipv6", Families::IPV6),
                ("dual", Families::DUAL),
            ],
        );
        self.sctp = self.families == Families::IPV4 && self.w.get("protocol.sctp") > 0;
        let node_count = self.choose("nodes", &[("1", 1), ("2", 2), ("3", 3)]);
        let topology = self.topology(node_count);
        let mut scenario = Scenario {
            name,
            description: "a generated case (kpct explore)".into(),
            topology,
            services: Vec::new(),
            endpoint_slices: Vec::new(),
            proxier: self.options(),
            probes: Vec::new(),
            steps: Vec::new(),
        };
        let service_count = self.choose("services", &[("1", 1), ("2", 2), ("3", 3)]);
        for i in 0..service_count {
            let (service, slices) = self.service(&scenario, i);
            scenario.services.push(service);
            scenario.endpoint_slices.extend(slices);
        }
        let step_count = self.choose("steps", &[("0", 0), ("1", 1), ("2", 2)]);
        self.steps_planned = step_count;
        let count = self.d.between(2, 4);
        scenario.probes = self.probes(&scenario, "p", count, step_count > 0);
        for k in 0..step_count {
            let step = self.step(&scenario, k);
            scenario.steps.push(step);
        }
        scenario
    }

    fn topology(&mut self, node_count: usize) -> Topology {
        let f = self.families;
        let nodes: Vec<Node> = (0..node_count)
            .map(|k| Node {
                name: NODE_NAMES[k].into(),
                ip: f.node_ip(k),
                secondary_ips: Vec::new(),
                pod_cidr: f.pod_cidr(k),
                existing_ipvs: String::new(),
            })
            .collect();
        self.pods_on_node = vec![0; node_count];
        let long = self.chance("long-names");
        let app_count = self.d.between(1, 2);
        self.apps = (0..app_count)
            .map(|i| {
                let label = ["a", "b"][i].to_string();
                let namespace = if long && i == 0 {
                    long_name("team")
                } else {
                    "default".into()
                };
                App { label, namespace }
            })
            .collect();
        let mut pods = Vec::new();
        for k in 0..node_count {
            if self.d.chance(70) {
                pods.push(self.client_pod(k));
            }
        }
        for _ in 0..self.d.between(1, 4) {
            let app = self.d.below(self.apps.len());
            let node = self.d.below(node_count);
            pods.push(self.server_pod(app, node));
        }
        Topology {
            underlay: f.underlay(),
            cluster_cidr: f.cluster_cidr(),
            service_cidr: f.service_cidr(),
            service_node_port_range: crate::scenario::PortRange::DEFAULT_NODE_PORTS,
            nodes,
            pods,
            external: Some(External {
                name: "client".into(),
                ip: f.external(),
            }),
        }
    }

    /// The next address of node `k`'s pods.
    fn next_pod_ip(&mut self, k: usize) -> crate::scenario::DualIp {
        let j = self.pods_on_node[k];
        self.pods_on_node[k] += 1;
        self.families.pod_ip(k, j)
    }

    fn client_pod(&mut self, k: usize) -> Pod {
        Pod {
            name: format!("client-{}", &NODE_NAMES[k][5..]),
            namespace: "default".into(),
            node: NODE_NAMES[k].into(),
            ip: self.next_pod_ip(k),
            labels: BTreeMap::new(),
            ports: Vec::new(),
        }
    }

    /// A new server pod of app `app` on node `k`, listening on every pod port.
    pub fn server_pod(&mut self, app: usize, k: usize) -> Pod {
        let App { label, namespace } = self.apps[app].clone();
        let n = self.pods_of_app.entry(label.clone()).or_default();
        *n += 1;
        let name = format!("{label}-{n}");
        let ports = POD_PORTS
            .iter()
            .chain(self.sctp.then_some(&SCTP_POD_PORT))
            .map(|(name, port, protocol)| ContainerPort {
                name: Some((*name).into()),
                container_port: *port,
                protocol: *protocol,
            })
            .collect();
        Pod {
            name,
            namespace,
            node: NODE_NAMES[k].into(),
            ip: self.next_pod_ip(k),
            labels: BTreeMap::from([("app".to_string(), label)]),
            ports,
        }
    }

    fn options(&mut self) -> ProxierOptions {
        let mut o = ProxierOptions::default();
        if self.chance("option.node-port-addresses") {
            let f = self.families;
            let underlay: Vec<NodePortAddress> = f
                .list()
                .into_iter()
                .filter_map(|fam| f.underlay().of(fam))
                .map(NodePortAddress::Cidr)
                .collect();
            let loopback: Vec<NodePortAddress> = f
                .list()
                .into_iter()
                .map(|fam| match fam {
                    crate::scenario::IpFamily::Ipv4 => "127.0.0.0/8",
                    crate::scenario::IpFamily::Ipv6 => "::1/128",
                })
                .map(|c| NodePortAddress::Cidr(c.parse().expect("a fixed CIDR")))
                .collect();
            let first_node: Vec<NodePortAddress> = f
                .node_ip(0)
                .all()
                .map(|ip| NodePortAddress::Cidr(crate::scenario::IpCidr::host(ip)))
                .collect();
            o.node_port_addresses = match self.d.below(4) {
                0 => vec![NodePortAddress::Primary],
                1 => underlay,
                2 => loopback,
                _ => first_node,
            };
        }
        o.localhost_node_ports = !self.chance("option.no-localhost-node-ports");
        o.masquerade_all = self.chance("option.masquerade-all");
        if self.chance("option.masquerade-bit") {
            o.masquerade_bit = *self.d.pick(&[0, 5, 13, 20, 31]);
        }
        o.cluster_cidr = !self.chance("option.no-cluster-cidr");
        o.tcp_be_liberal = self.chance("option.tcp-be-liberal");
        o
    }

    /// `count` probes of `state` named `PREFIX1`…, one of them keeping its flow when `keep`
    /// and the knob say so.
    fn probes(&mut self, state: &Scenario, prefix: &str, count: usize, keep: bool) -> Vec<Probe> {
        let mut probes = Vec::new();
        let keeper = keep && self.chance("keep");
        for k in 0..count {
            let name = format!("{prefix}{}", k + 1);
            let want_keep = keeper && k == 0;
            if let Some(probe) = self.probe(state, &name, want_keep) {
                probes.push(probe);
            }
        }
        probes
    }
}

/// The explicit slices `slices` holds for `service` in `namespace`.
pub(crate) fn slices_of<'a>(
    slices: &'a [EndpointSlice],
    service: &'a Service,
) -> impl Iterator<Item = &'a EndpointSlice> {
    slices
        .iter()
        .filter(move |sl| sl.service == service.name && sl.namespace == service.namespace)
}

#[cfg(test)]
mod tests;
