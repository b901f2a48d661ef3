//! Checks of the probes: where a probe comes from, what it targets and through which port, and
//! whether that path can exist in this topology.

use super::*;

impl<'a> Checker<'a> {
    pub(super) fn probes(&mut self) {
        let mut names: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, probe) in self.s.probes.iter().enumerate() {
            let path = FieldPath::root("probes").idx(i);
            // Probe names are printed in tables and reports and typed into `--probe` and
            // `kpct trace`: the same alphabet as object names.
            self.dns_label(path.key("name"), "probe name", &probe.name);
            if let Some(first) = names.insert(&probe.name, i) {
                names.insert(&probe.name, first);
                self.err(
                    path.key("name"),
                    format!(
                        "duplicate probe name `{}` (also probes[{first}])",
                        probe.name
                    ),
                );
            }
            if probe.protocol == Protocol::Sctp
                && (probe.from.node.is_some() || probe.from.node_localhost.is_some())
            {
                self.err(
                    path.key("protocol"),
                    "SCTP probes are crafted INITs: send them from a `pod` or the `external` \
                     client (node probes are sockets, and the suite makes no SCTP client socket)",
                );
            }
            // A continued flow's source, target and ports are its kept probe's.
            if probe.continues.is_none() {
                self.probe_source(&path, probe);
                self.probe_target(&path, probe);
                self.probe_ports(&path, probe, i);
            }
            self.expectations(&path, probe);
        }
    }

    pub(super) fn probe_source(&mut self, path: &FieldPath, probe: &Probe) {
        let path = path.key("from");
        let from = &probe.from;
        let set: Vec<&str> = [
            ("pod", from.pod.is_some()),
            ("node", from.node.is_some()),
            ("nodeLocalhost", from.node_localhost.is_some()),
            ("external", from.external),
        ]
        .into_iter()
        .filter_map(|(field, is_set)| is_set.then_some(field))
        .collect();
        if set.len() != 1 {
            let found = if set.is_empty() {
                "none".to_owned()
            } else {
                set.iter()
                    .map(|f| format!("`{f}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            self.err(
                path.clone(),
                format!(
                    "exactly one of `pod`, `node`, `nodeLocalhost`, `external` must be set \
                     (found {found})"
                ),
            );
        }
        if let Some(pod) = &from.pod {
            if self.pod(pod).is_none() {
                self.err(path.key("pod"), format!("unknown pod `{pod}`"));
            }
        }
        for (field, node) in [
            ("node", &from.node),
            ("nodeLocalhost", &from.node_localhost),
        ] {
            if let Some(node) = node {
                if self.node(node).is_none() {
                    self.err(path.key(field), format!("unknown node `{node}`"));
                }
            }
        }
        if from.external && self.s.topology.external.is_none() {
            self.err(
                path.key("external"),
                "no external client: set topology.external",
            );
        }
        if let Some(address) = from.address {
            self.source_address(&path.key("address"), probe, address);
        }
    }

    /// `from.address`: a load balancer IP a node sends from, of the family of the target.
    pub(super) fn source_address(&mut self, path: &FieldPath, probe: &Probe, address: IpAddr) {
        if probe.from.node.is_none() {
            self.err(path.clone(), "`address` is only for a `node` source");
        }
        if probe.keep.is_some() {
            // The address is the node's only while the probe's own shots are fired.
            self.err(
                path.clone(),
                "a probe with `address` cannot `keep` its flow",
            );
        }
        let lb_ip = self.s.services.iter().any(|svc| {
            svc.status
                .load_balancer
                .ingress
                .iter()
                .any(|i| i.ip == address)
        });
        if !lb_ip {
            self.err(
                path.clone(),
                format!(
                    "{address} is no Service's load balancer IP (status.loadBalancer.ingress): \
                     a node sends only from its own addresses or from such an IP"
                ),
            );
        }
        let target = probe.to.ip.map(IpFamily::of).or(probe.to.family);
        if let Some(family) = target.filter(|f| *f != IpFamily::of(address)) {
            self.err(
                path.clone(),
                format!("{address} cannot send to the probe's {family} destination"),
            );
        }
    }

    pub(super) fn probe_target(&mut self, path: &FieldPath, probe: &Probe) {
        let path = path.key("to");
        let to = &probe.to;
        if let Some(node) = &to.node {
            if self.node(node).is_none() {
                self.err(path.key("node"), format!("unknown node `{node}`"));
            }
        }
        match (&to.service, to.ip) {
            (Some(_), Some(_)) => {
                self.err(path, "set either `service` or `ip`, not both");
            }
            (None, None) => {
                self.err(
                    path,
                    "set `service` (with `via`) or a literal `ip` and `dport`",
                );
            }
            (None, Some(ip)) => {
                self.literal_target(&path, to);
                self.source_family(path.key("ip"), probe, IpFamily::of(ip));
                let a_node_owns = self.s.topology.nodes.iter().any(|n| n.owns(ip));
                if probe.from.external && to.node.is_none() && !a_node_owns {
                    self.err(
                        path.key("node"),
                        format!(
                            "an external packet to {ip} enters through a node: say which with \
                             `node`"
                        ),
                    );
                }
            }
            (Some(reference), None) => {
                let (namespace, name) = split_ref(reference);
                match self.service(namespace, name) {
                    None => self.err(
                        path.key("service"),
                        format!("unknown service `{namespace}/{name}`"),
                    ),
                    Some(svc) => self.service_target(&path, probe, svc),
                }
            }
        }
    }

    pub(super) fn literal_target(&mut self, path: &FieldPath, to: &ProbeTarget) {
        if to.dport.is_none() {
            self.err(path.key("dport"), "a literal `ip` target needs `dport`");
        }
        if to.family.is_some() {
            self.err(
                path.key("family"),
                "a literal `ip` target has its own family: `family` picks a Service's address",
            );
        }
        // `node` stays allowed: it names the node an external packet enters through.
        for (field, set) in [("port", to.port.is_some()), ("via", to.via.is_some())] {
            if set {
                self.err(
                    path.key(field),
                    format!("`{field}` is only used with a `service` target"),
                );
            }
        }
    }

    pub(super) fn service_target(&mut self, path: &FieldPath, probe: &Probe, svc: &'a Service) {
        let to = &probe.to;
        if to.dport.is_some() {
            self.err(
                path.key("dport"),
                "`dport` is only used with a literal `ip` target",
            );
        }
        if svc.spec.type_ == ServiceType::ExternalName {
            self.err(path.key("service"), "ExternalName services are not proxied");
            return;
        }
        let Some(port) = self.probed_port(path, probe, svc) else {
            return;
        };
        let via = to.via.unwrap_or(Via::ClusterIP);
        let cluster_ips = svc.cluster_ips();
        let family = self.s.probe_family(probe);
        let has = |ips: Vec<IpAddr>| ips.into_iter().any(|ip| IpFamily::of(ip) == family);
        let problem = match via {
            Via::ClusterIP if svc.is_headless() => {
                Some("a headless service has no ClusterIP".to_string())
            }
            Via::ClusterIP => (!has(cluster_ips.clone()))
                .then(|| format!("the service has no {family} ClusterIP")),
            Via::NodePort => port
                .node_port
                .is_none()
                .then(|| "the service port has no nodePort".to_string()),
            Via::ExternalIP => (!has(svc.spec.external_ips.clone()))
                .then(|| format!("the service has no {family} externalIPs")),
            Via::LoadBalancer => (!has(svc
                .status
                .load_balancer
                .ingress
                .iter()
                .map(|i| i.ip)
                .collect()))
            .then(|| format!("the service has no {family} status.loadBalancer.ingress")),
            Via::HealthCheckNodePort => svc
                .spec
                .health_check_node_port
                .is_none()
                .then(|| "the service has no healthCheckNodePort".to_string()),
        };
        if let Some(problem) = problem {
            let at = if to.family.is_some() && problem.contains(&family.to_string()) {
                path.key("family")
            } else {
                path.key("via")
            };
            self.err(at, format!("via {}: {problem}", via_name(via)));
        }
        self.target_node(path, probe, via);
        self.source_family(path.key("family"), probe, family);
    }

    /// A probe's source sends from its address of the target's family: it must have one.
    /// The probe's source has an address of the family it sends (`at`: the field that picks it).
    pub(super) fn source_family(&mut self, at: FieldPath, probe: &Probe, family: IpFamily) {
        let from = &probe.from;
        let lacking = if let Some(pod) = from.pod.as_deref().and_then(|p| self.pod(p)) {
            (!pod.ip.has(family)).then(|| format!("pod `{}`", pod.name))
        } else if let Some(node) = from.node.as_deref().and_then(|n| self.node(n)) {
            (!node.ip.has(family)).then(|| format!("node `{}`", node.name))
        } else if from.external {
            self.s
                .topology
                .external
                .as_ref()
                .filter(|e| !e.ip.has(family))
                .map(|e| format!("the external client `{}`", e.name))
        } else {
            None
        };
        if let Some(who) = lacking {
            self.err(
                at,
                format!("{who} has no {family} address to send an {family} probe from"),
            );
        }
    }

    /// The service port a probe aims at: by name or number, else the only port.
    pub(super) fn probed_port(
        &mut self,
        path: &FieldPath,
        probe: &Probe,
        svc: &'a Service,
    ) -> Option<&'a ServicePort> {
        let ports = &svc.spec.ports;
        let found = match &probe.to.port {
            None if ports.len() == 1 => ports.first(),
            None => {
                self.err(
                    path.key("port"),
                    format!(
                        "service `{}/{}` has {} ports: say which with `port`",
                        svc.namespace,
                        svc.name,
                        ports.len()
                    ),
                );
                return None;
            }
            Some(TargetPort::Name(name)) => ports
                .iter()
                .find(|p| p.name.as_deref() == Some(name.as_str())),
            Some(TargetPort::Number(n)) => ports
                .iter()
                .find(|p| p.port == *n && p.protocol == probe.protocol)
                .or_else(|| ports.iter().find(|p| p.port == *n)),
        };
        let Some(port) = found else {
            self.err(
                path.key("port"),
                format!("service `{}/{}` has no such port", svc.namespace, svc.name),
            );
            return None;
        };
        if port.protocol != probe.protocol {
            self.err(
                path.key("port"),
                format!(
                    "probe protocol {} does not match the service port's {}",
                    probe.protocol.upper(),
                    port.protocol.upper()
                ),
            );
        }
        Some(port)
    }

    pub(super) fn target_node(&mut self, path: &FieldPath, probe: &Probe, via: Via) {
        match (&probe.to.node, via) {
            // nodePort: whose node IP to send to; externalIP / loadBalancer: which node an
            // external packet enters through (as an upstream router would pick).
            // Whether it exists is checked for every target, in `probe_target`.
            (
                Some(_),
                Via::NodePort | Via::ExternalIP | Via::LoadBalancer | Via::HealthCheckNodePort,
            ) => {}
            (Some(_), Via::ClusterIP) => self.err(
                path.key("node"),
                "`node` is not used with `via: clusterIP` (ClusterIPs are reached from inside the cluster)",
            ),
            (None, Via::NodePort) if probe.from.node_localhost.is_none() => self.err(
                path.key("node"),
                "via nodePort needs `node`: the node whose IP to send to",
            ),
            (None, Via::HealthCheckNodePort) => self.err(
                path.key("node"),
                "via healthCheckNodePort needs `node`: the node whose IP to send to",
            ),
            (None, _) => {}
        }
        if probe.from.external && via == Via::ClusterIP {
            self.err(
                path.key("via"),
                "an external client does not reach ClusterIPs (they are reached from inside the \
                 cluster): probe an externalIP, a load balancer IP or a NodePort, or a literal \
                 `ip` with the `node` it enters",
            );
        }
    }

    pub(super) fn probe_ports(&mut self, path: &FieldPath, probe: &Probe, index: usize) {
        if probe.repeat == 0 {
            self.err(path.key("repeat"), "repeat must be at least 1");
        } else if probe.repeat > MAX_REPEAT {
            self.err(
                path.key("repeat"),
                format!(
                    "repeat {} is more than {MAX_REPEAT} shots (each may wait the probe \
                     timeout)",
                    probe.repeat
                ),
            );
        }
        let first = probe.first_source_port(index);
        if first == 0 {
            self.err(path.key("sourcePort"), "sourcePort must be 1-65535");
        } else if first.saturating_add(probe.repeat.saturating_sub(1)) > 65535 {
            self.err(
                path.key("repeat"),
                format!(
                    "sourcePort {first} + repeat {} runs past port 65535",
                    probe.repeat
                ),
            );
        }
    }
}
