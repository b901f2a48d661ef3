//! Checks of the Services: names, ClusterIPs and their families, ports, NodePorts, target
//! ports and the options each type allows, as the API server validates them.

use super::*;

impl<'a> Checker<'a> {
    pub(super) fn services(&mut self) {
        let mut names: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        let mut cluster_ips: BTreeMap<IpAddr, usize> = BTreeMap::new();
        let mut node_ports: BTreeMap<(u16, Protocol), String> = BTreeMap::new();
        for (i, svc) in self.s.services.iter().enumerate() {
            let path = FieldPath::root("services").idx(i);
            let key = (svc.namespace.as_str(), svc.name.as_str());
            self.dns_label(path.key("namespace"), "namespace", &svc.namespace);
            self.dns_label(path.key("name"), "service name", &svc.name);
            if let Some(first) = names.insert(key, i) {
                names.insert(key, first);
                self.err(
                    path.key("name"),
                    format!(
                        "duplicate service `{}/{}` (also services[{first}])",
                        svc.namespace, svc.name
                    ),
                );
            }
            self.labels(&path.key("labels"), &svc.labels);
            self.annotations(&path.key("annotations"), &svc.annotations);
            let spec = path.key("spec");
            self.service_families(&spec, svc, i, &mut cluster_ips);
            self.service_ports(&spec, svc, &mut node_ports);
            self.service_options(&path, svc, &mut node_ports);
        }
    }

    pub(super) fn service_ports(
        &mut self,
        spec: &FieldPath,
        svc: &Service,
        node_ports: &mut BTreeMap<(u16, Protocol), String>,
    ) {
        let ports = &svc.spec.ports;
        let headless = svc.is_headless();
        if ports.is_empty() && !headless && svc.spec.type_ != ServiceType::ExternalName {
            self.err(spec.key("ports"), "a service needs at least one port");
        }
        let mut names = BTreeSet::new();
        let mut numbers = BTreeSet::new();
        for (j, port) in ports.iter().enumerate() {
            let path = spec.key("ports").idx(j);
            match &port.name {
                None if ports.len() > 1 => self.err(
                    path.clone(),
                    "every port needs a `name` when a service has more than one",
                ),
                Some(name) if !names.insert(name.as_str()) => {
                    self.err(path.key("name"), format!("duplicate port name `{name}`"))
                }
                _ => {}
            }
            if port.port == 0 {
                self.err(path.key("port"), "port must be 1-65535");
            } else if !numbers.insert((port.port, port.protocol)) {
                self.err(
                    path.key("port"),
                    format!("duplicate port {}/{}", port.port, port.protocol.upper()),
                );
            }
            self.node_port(&path, svc, port, node_ports);
            self.target_port(&path, svc, port);
        }
    }

    pub(super) fn node_port(
        &mut self,
        path: &FieldPath,
        svc: &Service,
        port: &ServicePort,
        seen: &mut BTreeMap<(u16, Protocol), String>,
    ) {
        let path = path.key("nodePort");
        let exposed = matches!(
            svc.spec.type_,
            ServiceType::NodePort | ServiceType::LoadBalancer
        );
        let Some(node_port) = port.node_port else {
            if exposed {
                self.err(
                    path,
                    format!(
                        "type {:?} needs a nodePort in {} (kpct does not allocate one)",
                        svc.spec.type_, self.s.topology.service_node_port_range
                    ),
                );
            }
            return;
        };
        if !exposed {
            self.err(
                path,
                format!(
                    "nodePort is only allowed for NodePort and LoadBalancer services, not {:?}",
                    svc.spec.type_
                ),
            );
            return;
        }
        let range = self.s.topology.service_node_port_range;
        if !range.contains(node_port) {
            self.err(
                path,
                format!("nodePort {node_port} is outside the node port range {range} (topology.serviceNodePortRange)"),
            );
            return;
        }
        let owner = format!("{}/{}:{}", svc.namespace, svc.name, port_label(port));
        if let Some(first) = seen.get(&(node_port, port.protocol)) {
            self.err(
                path,
                format!(
                    "nodePort {node_port}/{} is already used by {first}",
                    port.protocol.upper()
                ),
            );
        } else {
            seen.insert((node_port, port.protocol), owner);
        }
    }

    pub(super) fn target_port(&mut self, path: &FieldPath, svc: &Service, port: &ServicePort) {
        let path = path.key("targetPort");
        let name = match &port.target_port {
            Some(TargetPort::Number(0)) => {
                self.err(path, "targetPort must be 1-65535");
                return;
            }
            Some(TargetPort::Name(name)) => name,
            _ => return,
        };
        if name.is_empty() {
            self.err(path, "targetPort name must not be empty");
            return;
        }
        let has_slice = self
            .s
            .endpoint_slices
            .iter()
            .any(|sl| sl.namespace == svc.namespace && sl.service == svc.name);
        if has_slice || svc.spec.type_ == ServiceType::ExternalName {
            return;
        }
        let pods = selected_pods(self.s, svc);
        if pods
            .iter()
            .any(|pod| named_port(pod, name, port.protocol).is_some())
        {
            return;
        }
        let message = if pods.is_empty() {
            format!(
                "targetPort `{name}` cannot be resolved: the selector matches no pod \
                 (and no endpoint slice is given for the service)"
            )
        } else {
            let pod_names: Vec<&str> = pods.iter().map(|p| p.name.as_str()).collect();
            format!(
                "targetPort `{name}` names no {} container port on any selected pod ({})",
                port.protocol.upper(),
                pod_names.join(", ")
            )
        };
        self.err(path, message);
    }

    pub(super) fn service_options(
        &mut self,
        path: &FieldPath,
        svc: &Service,
        node_ports: &mut BTreeMap<(u16, Protocol), String>,
    ) {
        let spec = path.key("spec");
        let lb = svc.spec.type_ == ServiceType::LoadBalancer;
        if let Some(hc) = svc.spec.health_check_node_port {
            let path = spec.key("healthCheckNodePort");
            if !lb || svc.spec.external_traffic_policy != Some(TrafficPolicy::Local) {
                self.err(
                    path,
                    "healthCheckNodePort needs type LoadBalancer with externalTrafficPolicy Local",
                );
            } else if !self.s.topology.service_node_port_range.contains(hc) {
                self.err(
                    path,
                    format!(
                        "healthCheckNodePort {hc} is outside the node port range {} (topology.serviceNodePortRange)",
                        self.s.topology.service_node_port_range
                    ),
                );
            } else if let Some(first) = node_ports.get(&(hc, Protocol::Tcp)) {
                self.err(
                    path,
                    format!("healthCheckNodePort {hc} is already used by {first}"),
                );
            } else {
                let owner = format!("{}/{} (healthCheckNodePort)", svc.namespace, svc.name);
                node_ports.insert((hc, Protocol::Tcp), owner);
            }
        }
        if let Some(config) = &svc.spec.session_affinity_config {
            if svc.spec.session_affinity != SessionAffinity::ClientIP {
                self.err(
                    spec.key("sessionAffinityConfig"),
                    "sessionAffinityConfig needs sessionAffinity: ClientIP",
                );
            }
            let timeout = config.client_ip.timeout_seconds;
            if !(1..=86400).contains(&timeout) {
                self.err(
                    spec.key("sessionAffinityConfig")
                        .key("clientIP")
                        .key("timeoutSeconds"),
                    format!("timeoutSeconds {timeout} must be 1-86400"),
                );
            }
        }
        if !lb && !svc.spec.load_balancer_source_ranges.is_empty() {
            self.err(
                spec.key("loadBalancerSourceRanges"),
                "loadBalancerSourceRanges may only be used with type LoadBalancer",
            );
        }
        if !lb && !svc.status.load_balancer.ingress.is_empty() {
            self.err(
                path.key("status").key("loadBalancer").key("ingress"),
                "status.loadBalancer.ingress may only be set for type LoadBalancer",
            );
        }
    }
}
