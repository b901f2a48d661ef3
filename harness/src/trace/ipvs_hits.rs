//! Which IPVS virtual service and real server a probe went through. IPVS acts between the
//! netfilter hooks, so the packet trace cannot show it; its connection table can, at once and
//! per connection (the per-service counters would not do: since Linux 6.2-era estimator changes
//! they are folded in by a kthread every couple of seconds, and the suite awaits events, not
//! timers). A trace runs one shot in a fresh topology, so every connection is the probe's.

use crate::netns::Netns;
use anyhow::{Context, Result};
use ipvs_genl::{IpvsHandle, TableEntry};
use std::fmt;

/// A connection IPVS holds, with the service and real server it is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpvsHit {
    /// `TCP`, `UDP`, `SCTP`.
    pub protocol: String,
    /// `SYN_RECV`, `ESTABLISHED`, … (IPVS's own connection state).
    pub state: String,
    pub client: String,
    /// `192.168.1.10:30080`.
    pub virtual_service: String,
    /// `10.244.1.11:8080`.
    pub real_server: String,
    /// The service's scheduler, from the IPVS table (`?` if the service is gone).
    pub scheduler: String,
    /// The real server's forwarding method, from the IPVS table.
    pub forward: String,
}

impl fmt::Display for IpvsHit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "IPVS {} {} {} -> {} {}",
            self.protocol, self.virtual_service, self.scheduler, self.real_server, self.forward
        )
    }
}

/// The node's IPVS connections (`ipvsadm -Lnc`), resolved against its IPVS table; `None` when
/// the namespace has no IPVS at all. Also returns the `ipvsadm -Lnc` text, for the record.
pub fn read(ns: &Netns) -> Result<Option<(Vec<IpvsHit>, String)>> {
    let table = match IpvsHandle::in_netns(ns.path()) {
        Ok(mut h) => h
            .table()
            .with_context(|| format!("reading the IPVS table of namespace {}", ns.name()))?,
        Err(ipvs_genl::Error::FamilyMissing) => return Ok(None),
        Err(e) => {
            return Err(e).with_context(|| format!("opening IPVS in namespace {}", ns.name()))
        }
    };
    let text = ns
        .exec("ipvsadm", &["-Lnc"])
        .with_context(|| format!("listing IPVS connections in namespace {}", ns.name()))?;
    Ok(Some((parse_connections(&text, &table), text)))
}

/// Parses `ipvsadm -Lnc` (`pro expire state source virtual destination` rows).
pub fn parse_connections(text: &str, table: &[TableEntry]) -> Vec<IpvsHit> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let [protocol, _expire, state, client, virtual_service, real_server] = f[..] else {
                return None;
            };
            if !["TCP", "UDP", "SCTP"].contains(&protocol) {
                return None;
            }
            let entry = table.iter().find(|(svc, _)| {
                svc.service.key.to_string() == format!("{protocol} {virtual_service}")
            });
            let scheduler = entry.map_or("?".to_string(), |(s, _)| s.service.scheduler.clone());
            let forward = entry
                .and_then(|(_, dests)| {
                    dests
                        .iter()
                        .find(|d| d.destination.key().to_string() == real_server)
                })
                .map_or("?".to_string(), |d| format!("{:?}", d.destination.forward));
            Some(IpvsHit {
                protocol: protocol.to_string(),
                state: state.to_string(),
                client: client.to_string(),
                virtual_service: virtual_service.to_string(),
                real_server: real_server.to_string(),
                scheduler,
                forward,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_connection_table() {
        let text = "IPVS connection entries\n\
            pro expire state       source             virtual            destination\n\
            TCP 00:59  SYN_RECV    192.168.1.100:21000 192.168.1.10:30080 10.244.1.11:8080\n";
        let hits = parse_connections(text, &[]);
        assert_eq!(
            hits[0].scheduler, "?",
            "a connection of a service no longer in the table"
        );
        assert_eq!(
            hits,
            vec![IpvsHit {
                protocol: "TCP".into(),
                state: "SYN_RECV".into(),
                client: "192.168.1.100:21000".into(),
                virtual_service: "192.168.1.10:30080".into(),
                real_server: "10.244.1.11:8080".into(),
                scheduler: "?".into(),
                forward: "?".into(),
            }]
        );
        let key = ipvs_genl::ServiceKey::Addr {
            protocol: ipvs_genl::Protocol::Tcp,
            addr: "192.168.1.10".parse().unwrap(),
            port: 30080,
        };
        // Destination::new defaults to ipvsadm's default, direct routing; kube-proxy uses NAT.
        let mut masq = ipvs_genl::Destination::new("10.244.1.11".parse().unwrap(), 8080);
        masq.forward = ipvs_genl::ForwardMethod::Masq;
        let table = vec![(
            ipvs_genl::ServiceState {
                service: ipvs_genl::Service::new(key, "rr"),
                stats: Default::default(),
            },
            vec![ipvs_genl::DestinationState {
                destination: masq,
                active_conns: 0,
                inactive_conns: 0,
                persistent_conns: 0,
                stats: Default::default(),
            }],
        )];
        assert_eq!(
            parse_connections(text, &table)[0].to_string(),
            "IPVS TCP 192.168.1.10:30080 rr -> 10.244.1.11:8080 Masq"
        );
    }
}
