//! How often the generator makes each thing: every knob with its default, set from the command
//! line as `--weight NAME=VALUE`. A knob named `…%` is a percentage (how often a thing is there);
//! the others are relative weights among the choices of one draw.

use std::collections::BTreeMap;

/// Every knob: (name, default, what it weighs).
pub const KNOBS: &[(&str, u32, &str)] = &[
    ("family.ipv4", 6, "an IPv4 cluster"),
    ("family.ipv6", 2, "an IPv6-only cluster"),
    ("family.dual", 2, "a dual-stack cluster"),
    ("nodes.1", 2, "one node"),
    ("nodes.2", 5, "two nodes"),
    ("nodes.3", 2, "three nodes"),
    ("services.1", 4, "one Service"),
    ("services.2", 4, "two Services"),
    ("services.3", 2, "three Services"),
    ("type.clusterip", 4, "a ClusterIP Service"),
    ("type.nodeport", 3, "a NodePort Service"),
    ("type.loadbalancer", 3, "a LoadBalancer Service"),
    ("type.headless", 1, "a headless Service"),
    ("type.externalname", 1, "an ExternalName Service"),
    ("ports.1", 7, "a Service with one port"),
    ("ports.2", 3, "a Service with two ports"),
    ("protocol.tcp", 6, "a TCP port"),
    ("protocol.udp", 4, "a UDP port"),
    (
        "protocol.sctp",
        0,
        "an SCTP port (only where the kernel has SCTP: the VM)",
    ),
    ("target.number", 5, "a numeric targetPort"),
    ("target.name", 4, "a named targetPort"),
    (
        "target.none",
        1,
        "no targetPort (the port itself, where no pod listens)",
    ),
    ("external-ips%", 20, "a Service with externalIPs"),
    (
        "etp-local%",
        30,
        "externalTrafficPolicy: Local where it applies",
    ),
    (
        "health-check%",
        70,
        "a healthCheckNodePort where eTP Local allows one",
    ),
    ("itp-local%", 15, "internalTrafficPolicy: Local"),
    ("affinity%", 15, "sessionAffinity: ClientIP"),
    (
        "source-ranges%",
        30,
        "loadBalancerSourceRanges on a LoadBalancer",
    ),
    (
        "ipmode-proxy%",
        20,
        "a load balancer ingress with ipMode Proxy",
    ),
    (
        "label.proxy-name%",
        5,
        "a Service labelled service.kubernetes.io/service-proxy-name",
    ),
    (
        "label.headless%",
        5,
        "a Service labelled service.kubernetes.io/headless",
    ),
    (
        "slice-label.headless%",
        3,
        "an explicit EndpointSlice labelled service.kubernetes.io/headless",
    ),
    (
        "long-names%",
        5,
        "a Service and namespace with 63-character names",
    ),
    (
        "explicit-slices%",
        40,
        "explicit EndpointSlices instead of the selector's",
    ),
    ("endpoint.ready", 6, "a ready endpoint"),
    (
        "endpoint.serving-terminating",
        2,
        "a terminating endpoint still serving",
    ),
    (
        "endpoint.terminating",
        1,
        "a terminating endpoint no longer serving",
    ),
    (
        "endpoint.not-ready",
        1,
        "an endpoint neither ready nor serving",
    ),
    (
        "duplicate-endpoint%",
        3,
        "a pod's address in a second slice with other conditions",
    ),
    (
        "option.node-port-addresses%",
        15,
        "proxier.nodePortAddresses",
    ),
    (
        "option.no-localhost-node-ports%",
        10,
        "proxier.localhostNodePorts: false",
    ),
    ("option.masquerade-all%", 10, "proxier.masqueradeAll"),
    (
        "option.masquerade-bit%",
        10,
        "a proxier.masqueradeBit other than 14",
    ),
    ("option.no-cluster-cidr%", 10, "proxier.clusterCIDR: false"),
    ("option.tcp-be-liberal%", 10, "proxier.tcpBeLiberal"),
    ("steps.0", 4, "no steps"),
    ("steps.1", 4, "one step"),
    ("steps.2", 2, "two steps"),
    (
        "step.churn",
        4,
        "a step changing an explicit slice's endpoints",
    ),
    ("step.pod-delete", 2, "a step deleting a pod"),
    ("step.pod-create", 2, "a step creating a pod"),
    ("step.service-change", 3, "a step changing a Service"),
    ("step.service-delete", 1, "a step deleting a Service"),
    ("step.label-toggle", 1, "a step toggling a Service's label"),
    (
        "step.wait",
        1,
        "a step letting time pass (affinity timeouts)",
    ),
    ("step.restart", 1, "a step restarting the proxier"),
    (
        "keep%",
        35,
        "a probe that keeps its flow across steps (TCP or UDP)",
    ),
    ("from.pod", 5, "a probe from a pod"),
    ("from.node", 3, "a probe from a node"),
    ("from.localhost", 1, "a probe from a node's 127.0.0.1 / ::1"),
    ("from.external", 3, "a probe from the external client"),
];

/// The knobs, each at its default unless set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Weights {
    values: BTreeMap<&'static str, u32>,
}

impl Default for Weights {
    fn default() -> Weights {
        Weights {
            values: KNOBS.iter().map(|(k, v, _)| (*k, *v)).collect(),
        }
    }
}

impl Weights {
    /// The value of knob `name` (which must be one of [`KNOBS`]).
    pub fn get(&self, name: &str) -> u32 {
        self.values.get(name).copied().unwrap_or_else(|| {
            debug_assert!(false, "no knob {name}");
            0
        })
    }

    /// The defaults with `settings` (`NAME=VALUE` each) applied; every bad setting in one error.
    pub fn with(settings: &[String]) -> Result<Weights, String> {
        let mut weights = Weights::default();
        let mut problems = Vec::new();
        for setting in settings {
            match weights.set(setting) {
                Ok(()) => {}
                Err(e) => problems.push(e),
            }
        }
        for group in [
            "family.",
            "nodes.",
            "services.",
            "type.",
            "ports.",
            "protocol.",
        ] {
            let total: u32 = KNOBS
                .iter()
                .filter(|(k, _, _)| k.starts_with(group))
                .map(|(k, _, _)| weights.get(k))
                .sum();
            if total == 0 {
                problems.push(format!(
                    "every `{group}*` weight is 0: nothing can be drawn"
                ));
            }
        }
        if problems.is_empty() {
            Ok(weights)
        } else {
            Err(problems.join("; "))
        }
    }

    fn set(&mut self, setting: &str) -> Result<(), String> {
        let (name, value) = setting.split_once('=').ok_or_else(|| {
            format!("`{setting}`: expected NAME=VALUE (`kpct explore --list-weights`)")
        })?;
        let (knob, _, _) = KNOBS
            .iter()
            .find(|(k, _, _)| *k == name.trim())
            .ok_or_else(|| format!("`{name}` is no weight (`kpct explore --list-weights`)"))?;
        let value: u32 = value
            .trim()
            .parse()
            .map_err(|_| format!("`{setting}`: the value must be a whole number"))?;
        if knob.ends_with('%') && value > 100 {
            return Err(format!("`{setting}`: a percentage is at most 100"));
        }
        self.values.insert(knob, value);
        Ok(())
    }

    /// Every knob and its value, one per line, for `--list-weights`.
    pub fn listing(&self) -> String {
        KNOBS
            .iter()
            .map(|(k, _, what)| format!("{k:<32} {:>4}  {what}\n", self.get(k)))
            .collect()
    }

    /// The settings that differ from the defaults, as `--weight` takes them.
    pub fn changed(&self) -> Vec<String> {
        KNOBS
            .iter()
            .filter(|(k, default, _)| self.get(k) != *default)
            .map(|(k, _, _)| format!("{k}={}", self.get(k)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_change_knobs_and_every_bad_one_is_named() {
        let w = Weights::with(&["family.ipv6=0".into(), "keep%=100".into()]).unwrap();
        assert_eq!(w.get("family.ipv6"), 0);
        assert_eq!(w.get("keep%"), 100);
        assert_eq!(w.changed(), ["family.ipv6=0", "keep%=100"]);
        let e = Weights::with(&[
            "nosuch=1".into(),
            "keep%=101".into(),
            "nodes.1".into(),
            "nodes.2=x".into(),
        ])
        .unwrap_err();
        for part in [
            "`nosuch` is no weight",
            "at most 100",
            "expected NAME=VALUE",
            "whole number",
        ] {
            assert!(e.contains(part), "{part}: {e}");
        }
        let e = Weights::with(&[
            "family.ipv4=0".into(),
            "family.ipv6=0".into(),
            "family.dual=0".into(),
        ])
        .unwrap_err();
        assert!(e.contains("every `family.*` weight is 0"), "{e}");
        assert!(Weights::default().listing().lines().count() == KNOBS.len());
    }
}
