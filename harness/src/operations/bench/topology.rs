//! `kpct bench topology`: setup and teardown cost of nodes and pods.

use super::ms;
use crate::scenario::{DualCidr, DualIp, Ipv4Cidr, Node, Pod, Scenario, Topology as TopologySpec};
use crate::topology::Topology;
use anyhow::Result;
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::time::Duration;

/// A synthetic scenario of `nodes` nodes with `pods_per_node` pods each.
pub fn synthetic_scenario(nodes: u8, pods_per_node: u8) -> Scenario {
    let node_specs: Vec<Node> = (0..nodes)
        .map(|i| Node {
            name: format!("node-{i}"),
            ip: DualIp::v4(Ipv4Addr::new(192, 168, 1, 10 + i)),
            secondary_ips: Vec::new(),
            existing_ipvs: String::new(),
            pod_cidr: DualCidr::v4(Ipv4Cidr {
                addr: Ipv4Addr::new(10, 244, i, 0),
                prefix_len: 24,
            }),
        })
        .collect();
    let pods = (0..nodes)
        .flat_map(|i| {
            (0..pods_per_node).map(move |j| Pod {
                name: format!("pod-{i}-{j}"),
                namespace: "default".into(),
                node: format!("node-{i}"),
                ip: DualIp::v4(Ipv4Addr::new(10, 244, i, 10 + j)),
                labels: Default::default(),
                ports: Vec::new(),
            })
        })
        .collect();
    Scenario {
        name: format!("bench-{nodes}x{pods_per_node}"),
        description: String::new(),
        topology: TopologySpec {
            underlay: DualCidr::v4(Ipv4Cidr {
                addr: Ipv4Addr::new(192, 168, 1, 0),
                prefix_len: 24,
            }),
            cluster_cidr: DualCidr::v4(Ipv4Cidr {
                addr: Ipv4Addr::new(10, 244, 0, 0),
                prefix_len: 16,
            }),
            service_cidr: DualCidr::v4(Ipv4Cidr {
                addr: Ipv4Addr::new(10, 96, 0, 0),
                prefix_len: 12,
            }),
            service_node_port_range: crate::scenario::PortRange::DEFAULT_NODE_PORTS,
            nodes: node_specs,
            pods,
            external: None,
        },
        services: Vec::new(),
        endpoint_slices: Vec::new(),
        proxier: Default::default(),
        probes: Vec::new(),
        steps: Vec::new(),
    }
}

fn stats(samples: &[Duration]) -> String {
    if samples.is_empty() {
        return "-".into();
    }
    let total: Duration = samples.iter().sum();
    let mean = total / samples.len() as u32;
    let min = samples.iter().min().copied().unwrap_or_default();
    let max = samples.iter().max().copied().unwrap_or_default();
    format!(
        "mean {:>7.2} ms  min {:>7.2} ms  max {:>7.2} ms  (n={})",
        ms(mean),
        ms(min),
        ms(max),
        samples.len()
    )
}

/// Builds and tears down a synthetic topology `rounds` times and reports setup and teardown
/// cost per node and per pod.
pub async fn topology(nodes: u8, pods_per_node: u8, rounds: u32) -> Result<String> {
    let scenario = synthetic_scenario(nodes, pods_per_node);
    let (mut per_node, mut per_pod, mut overlay, mut fabric, mut teardown) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let namespaces = 1 + usize::from(nodes) + usize::from(nodes) * usize::from(pods_per_node);
    for _ in 0..rounds {
        let topo = Topology::build(&scenario).await?;
        let t = topo.timings().clone();
        per_node.extend(t.per_node);
        per_pod.extend(t.per_pod);
        overlay.push(t.overlay);
        fabric.push(t.fabric);
        teardown.push(topo.teardown() / namespaces as u32);
    }
    let mut out = String::new();
    writeln!(
        out,
        "topology: {nodes} nodes x {pods_per_node} pods, {rounds} round(s)"
    )?;
    writeln!(out, "  fabric setup         {}", stats(&fabric))?;
    writeln!(out, "  node setup           {}", stats(&per_node))?;
    writeln!(out, "  overlay wiring       {}", stats(&overlay))?;
    writeln!(out, "  pod setup            {}", stats(&per_pod))?;
    writeln!(out, "  teardown/namespace   {}", stats(&teardown))?;
    Ok(out)
}
