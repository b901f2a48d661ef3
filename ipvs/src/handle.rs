//! [`IpvsHandle`]: the typed operations, one netlink request each.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::Path;

use netlink_packet_generic::GenlMessage;
use nix::sched::{setns, CloneFlags};

use crate::error::{Error, Operation, Result};
use crate::nl::attrs::CmdAttr;
use crate::nl::constants::IPVS_GENL_NAME;
use crate::nl::convert;
use crate::nl::{IpvsCmd, IpvsMessage};
use crate::socket::{Failure, GenlSocket, Mode};
use crate::types::{
    Destination, DestinationKey, DestinationState, Info, Service, ServiceKey, ServiceState,
    Timeouts,
};

/// A service with its destinations, as dumped or as to be created.
pub type TableEntry = (ServiceState, Vec<DestinationState>);

/// A connection to the kernel's IPVS table of one network namespace.
///
/// The namespace is fixed when the handle is created (a netlink socket stays bound to the
/// namespace it was opened in), so a handle can be moved to and used from any thread.
pub struct IpvsHandle {
    socket: GenlSocket,
    family_id: u16,
}

impl IpvsHandle {
    /// Opens a handle on the calling thread's current network namespace.
    pub fn new() -> Result<Self> {
        let mut socket = GenlSocket::open()?;
        let family_id = match socket.resolve_family(IPVS_GENL_NAME) {
            Ok(id) => id,
            Err(Failure::Errno(libc::ENOENT)) => return Err(Error::FamilyMissing),
            Err(f) => return Err(f.into_error(Operation::ResolveFamily, None)),
        };
        Ok(IpvsHandle { socket, family_id })
    }

    /// Opens a handle on the network namespace at `path` (e.g. `/run/netns/NAME` or
    /// `/proc/PID/ns/net`) without changing the calling thread's namespace: a short-lived thread
    /// enters the namespace, opens the socket there and hands it back.
    pub fn in_netns(path: &Path) -> Result<Self> {
        let owned = path.to_path_buf();
        let netns_err = |source| Error::Netns {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(netns_err)?;
        std::thread::Builder::new()
            .name("ipvs-netns".into())
            .spawn(move || -> Result<Self> {
                setns(file.as_fd(), CloneFlags::CLONE_NEWNET).map_err(|errno| Error::Netns {
                    path: owned,
                    source: std::io::Error::from(errno),
                })?;
                IpvsHandle::new()
            })
            .map_err(netns_err)?
            .join()
            .unwrap_or_else(|_| {
                Err(netns_err(std::io::Error::other(
                    "namespace thread panicked",
                )))
            })
    }

    fn run(
        &mut self,
        op: Operation,
        cmd: IpvsCmd,
        attrs: Vec<CmdAttr>,
        mode: Mode,
        scheduler: Option<&str>,
    ) -> Result<Vec<IpvsMessage>> {
        let genl = GenlMessage::new(
            netlink_packet_generic::GenlHeader {
                cmd: cmd.into(),
                version: crate::nl::constants::IPVS_GENL_VERSION,
            },
            IpvsMessage::new(cmd, attrs),
            self.family_id,
        );
        self.socket
            .request(genl, mode)
            .map_err(|f| f.into_error(op, scheduler))
    }

    /// Kernel IPVS version and connection hash table size (`ipvsadm -Ln` header).
    pub fn info(&mut self) -> Result<Info> {
        let replies = self.run(
            Operation::GetInfo,
            IpvsCmd::GetInfo,
            vec![],
            Mode::Ack,
            None,
        )?;
        let attrs: Vec<CmdAttr> = replies.into_iter().flat_map(|m| m.attrs).collect();
        convert::info_from_attrs(&attrs).map_err(|reason| Error::Decode {
            op: Operation::GetInfo,
            reason,
        })
    }

    /// Connection timeouts (`ipvsadm -L --timeout`).
    pub fn timeouts(&mut self) -> Result<Timeouts> {
        let replies = self.run(
            Operation::GetTimeouts,
            IpvsCmd::GetConfig,
            vec![],
            Mode::Ack,
            None,
        )?;
        let attrs: Vec<CmdAttr> = replies.into_iter().flat_map(|m| m.attrs).collect();
        Ok(convert::timeouts_from_attrs(&attrs))
    }

    /// Sets connection timeouts (`ipvsadm --set`); zero fields are left unchanged by the kernel.
    pub fn set_timeouts(&mut self, timeouts: &Timeouts) -> Result<()> {
        self.run(
            Operation::SetTimeouts,
            IpvsCmd::SetConfig,
            convert::timeout_attrs(timeouts),
            Mode::Ack,
            None,
        )
        .map(drop)
    }

    /// Removes every service and destination (`ipvsadm -C`).
    pub fn flush(&mut self) -> Result<()> {
        let _tables = service_tables();
        self.run(Operation::Flush, IpvsCmd::Flush, vec![], Mode::Ack, None)
            .map(drop)
    }

    /// Zeroes the counters of one service, or of everything (`ipvsadm -Z`).
    pub fn zero(&mut self, service: Option<&ServiceKey>) -> Result<()> {
        let attrs = service
            .map(|key| vec![CmdAttr::Service(convert::service_key_attrs(key))])
            .unwrap_or_default();
        self.run(
            Operation::Zero(service.copied()),
            IpvsCmd::Zero,
            attrs,
            Mode::Ack,
            None,
        )
        .map(drop)
    }

    /// Creates a virtual service (`ipvsadm -A`).
    pub fn add_service(&mut self, service: &Service) -> Result<()> {
        let _tables = service_tables();
        self.run(
            Operation::AddService(service.key),
            IpvsCmd::NewService,
            vec![CmdAttr::Service(convert::service_attrs(service))],
            Mode::Ack,
            Some(&service.scheduler),
        )
        .map(drop)
    }

    /// Changes scheduler, flags, timeout and netmask of an existing service (`ipvsadm -E`).
    pub fn update_service(&mut self, service: &Service) -> Result<()> {
        self.run(
            Operation::UpdateService(service.key),
            IpvsCmd::SetService,
            vec![CmdAttr::Service(convert::service_attrs(service))],
            Mode::Ack,
            Some(&service.scheduler),
        )
        .map(drop)
    }

    /// Deletes a service and its destinations (`ipvsadm -D`).
    pub fn delete_service(&mut self, key: &ServiceKey) -> Result<()> {
        let _tables = service_tables();
        self.run(
            Operation::DeleteService(*key),
            IpvsCmd::DelService,
            vec![CmdAttr::Service(convert::service_key_attrs(key))],
            Mode::Ack,
            None,
        )
        .map(drop)
    }

    /// Reads one service.
    pub fn service(&mut self, key: &ServiceKey) -> Result<ServiceState> {
        let op = Operation::GetService(*key);
        let replies = self.run(
            op.clone(),
            IpvsCmd::GetService,
            vec![CmdAttr::Service(convert::service_key_attrs(key))],
            Mode::Ack,
            None,
        )?;
        let mut services = decode_services(op.clone(), replies)?;
        match services.len() {
            1 => Ok(services.remove(0)),
            n => Err(Error::Decode {
                op,
                reason: format!("expected one service in the reply, got {n}"),
            }),
        }
    }

    /// All services, in the kernel's dump order.
    ///
    /// A service dump that the kernel sends in several parts can be wrong when another
    /// namespace adds or removes IPVS services meanwhile: `ip_vs_genl_dump_services`
    /// (net/netfilter/ipvs/ip_vs_ctl.c) walks the hash tables every namespace shares, skipping
    /// other namespaces' entries, and resumes each part at an index counted over all of them.
    /// A service added elsewhere makes the next part repeat one of ours; one removed elsewhere
    /// makes it skip one. Within this process, every handle adds and deletes services, and
    /// dumps them, under one lock, so no handle of the process changes the tables while another
    /// dumps. Other processes may: a key is unique in a namespace, so a repeat is dropped, and
    /// every service a dump shows is ours, so while this namespace itself does not change, the
    /// services seen in successive dumps add up to the table: it is dumped until two dumps in a
    /// row show nothing new (three dumps in all when nothing elsewhere changes). A service is
    /// missed only if every one of those dumps skipped it, as a process deleting services
    /// elsewhere without pause can make happen.
    pub fn services(&mut self) -> Result<Vec<ServiceState>> {
        let _tables = service_tables();
        let mut seen = self.dump_services()?;
        let mut quiet = 0;
        for _ in 1..MAX_SERVICE_DUMPS {
            let next = self.dump_services()?;
            if merge_dump(&mut seen, next) {
                quiet = 0;
            } else {
                quiet += 1;
                if quiet == QUIET_DUMPS {
                    return Ok(seen);
                }
            }
        }
        Err(Error::Decode {
            op: Operation::ListServices,
            reason: format!(
                "{MAX_SERVICE_DUMPS} service dumps kept finding services the earlier ones had \
                 missed: other network namespaces keep adding or removing IPVS services"
            ),
        })
    }

    /// One service dump, without the repeats a shifted part adds (see [`Self::services`]).
    fn dump_services(&mut self) -> Result<Vec<ServiceState>> {
        let replies = self.run(
            Operation::ListServices,
            IpvsCmd::GetService,
            vec![],
            Mode::Dump,
            None,
        )?;
        decode_services(Operation::ListServices, replies).map(drop_repeats)
    }

    /// Adds a real server to a service (`ipvsadm -a`).
    pub fn add_destination(&mut self, service: &ServiceKey, dest: &Destination) -> Result<()> {
        self.dest_cmd(
            Operation::AddDestination(*service, dest.key()),
            IpvsCmd::NewDest,
            service,
            convert::dest_attrs(dest),
        )
    }

    /// Changes forwarding, weight, thresholds and tunnel settings of a real server
    /// (`ipvsadm -e`).
    pub fn update_destination(&mut self, service: &ServiceKey, dest: &Destination) -> Result<()> {
        self.dest_cmd(
            Operation::UpdateDestination(*service, dest.key()),
            IpvsCmd::SetDest,
            service,
            convert::dest_attrs(dest),
        )
    }

    /// Removes a real server from a service (`ipvsadm -d`).
    pub fn delete_destination(
        &mut self,
        service: &ServiceKey,
        dest: &DestinationKey,
    ) -> Result<()> {
        self.dest_cmd(
            Operation::DeleteDestination(*service, *dest),
            IpvsCmd::DelDest,
            service,
            convert::dest_key_attrs(&dest.addr, dest.port),
        )
    }

    fn dest_cmd(
        &mut self,
        op: Operation,
        cmd: IpvsCmd,
        service: &ServiceKey,
        dest: Vec<crate::nl::DestAttr>,
    ) -> Result<()> {
        self.run(
            op,
            cmd,
            vec![
                CmdAttr::Service(convert::service_key_attrs(service)),
                CmdAttr::Dest(dest),
            ],
            Mode::Ack,
            None,
        )
        .map(drop)
    }

    /// The real servers of a service, with their counters, in the kernel's dump order.
    pub fn destinations(&mut self, service: &ServiceKey) -> Result<Vec<DestinationState>> {
        let op = Operation::ListDestinations(*service);
        let replies = self.run(
            op.clone(),
            IpvsCmd::GetDest,
            vec![CmdAttr::Service(convert::service_key_attrs(service))],
            Mode::Dump,
            None,
        )?;
        if replies.is_empty() {
            // The kernel answers a dump for a missing service with an empty dump, not ESRCH;
            // telling "no destinations" from "no service" needs a lookup.
            self.service(service).map_err(|e| match e {
                Error::NoSuchService { errno, .. } => Error::NoSuchService {
                    op: op.clone(),
                    service: *service,
                    errno,
                },
                other => other,
            })?;
        }
        let ipv6 = service.is_ipv6();
        let mut out = Vec::new();
        for msg in replies {
            for attr in msg.attrs {
                if let CmdAttr::Dest(attrs) = attr {
                    out.push(
                        convert::destination_from_attrs(&attrs, ipv6).map_err(|reason| {
                            Error::Decode {
                                op: op.clone(),
                                reason,
                            }
                        })?,
                    );
                }
            }
        }
        Ok(out)
    }

    /// Every service with its destinations, in the kernel's dump order.
    pub fn table(&mut self) -> Result<Vec<TableEntry>> {
        let services = self.services()?;
        let mut out = Vec::with_capacity(services.len());
        for svc in services {
            let dests = self.destinations(&svc.service.key)?;
            out.push((svc, dests));
        }
        Ok(out)
    }
}

/// Held while a handle changes the service tables (add, delete, flush) or dumps them: the
/// tables are shared by every namespace, and a dump resumes at an index counted over all of
/// them ([`IpvsHandle::services`]), so no change by this process may come between its parts.
fn service_tables() -> std::sync::MutexGuard<'static, ()> {
    static TABLES: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // The lock guards no data: a panic while it was held leaves nothing inconsistent.
    TABLES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Holds off every change this process's handles make to IPVS services, in any namespace,
/// until the guard is dropped. Hold it while another program (`ipvsadm -Sn`, `-Ln`) lists
/// services: the kernel would shift its dump as it shifts ours ([`IpvsHandle::services`]), and
/// ipvsadm, unlike [`IpvsHandle::services`], takes the first dump as it comes.
pub fn hold_service_changes() -> std::sync::MutexGuard<'static, ()> {
    service_tables()
}

/// How many dumps [`IpvsHandle::services`] makes at most.
const MAX_SERVICE_DUMPS: usize = 32;

/// How many dumps in a row must show no service the earlier ones missed.
const QUIET_DUMPS: usize = 2;

/// The services without a later repeat of a key: the first comes from the part that was
/// consistent, a repeat from a part resumed at a shifted index.
fn drop_repeats(services: Vec<ServiceState>) -> Vec<ServiceState> {
    let mut seen = std::collections::HashSet::new();
    services
        .into_iter()
        .filter(|s| seen.insert(s.service.key))
        .collect()
}

/// Adds to `seen` the services of a later dump it lacks, each right after the service that
/// precedes it in that dump (every dump is the kernel's order with some services skipped), and
/// takes the later dump's counters for the others. Whether any service was new.
fn merge_dump(seen: &mut Vec<ServiceState>, next: Vec<ServiceState>) -> bool {
    let mut grew = false;
    let mut after: Option<usize> = None;
    for state in next {
        match seen.iter().position(|s| s.service.key == state.service.key) {
            Some(i) => {
                seen[i] = state;
                after = Some(i);
            }
            None => {
                let at = after.map_or(0, |i| i + 1);
                seen.insert(at, state);
                after = Some(at);
                grew = true;
            }
        }
    }
    grew
}

fn decode_services(op: Operation, replies: Vec<IpvsMessage>) -> Result<Vec<ServiceState>> {
    let mut out = Vec::new();
    for msg in replies {
        for attr in msg.attrs {
            if let CmdAttr::Service(attrs) = attr {
                out.push(
                    convert::service_from_attrs(&attrs).map_err(|reason| Error::Decode {
                        op: op.clone(),
                        reason,
                    })?,
                );
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Stats;

    fn state(mark: u32, conns: u64) -> ServiceState {
        let key = ServiceKey::FwMark { ipv6: false, mark };
        ServiceState {
            service: crate::types::Service::new(key, "rr"),
            stats: Stats {
                conns,
                ..Stats::default()
            },
        }
    }

    /// The failure seen in the VM: a second part resumed two entries early repeats the last
    /// two services; the first of each is kept, in order.
    #[test]
    fn a_repeated_key_is_the_shifted_part_and_goes() {
        let dumped = vec![
            state(1, 0),
            state(2, 0),
            state(3, 5),
            state(2, 0),
            state(3, 6),
        ];
        let kept = drop_repeats(dumped);
        assert_eq!(kept, vec![state(1, 0), state(2, 0), state(3, 5)]);
    }

    /// A later dump brings the services an earlier one skipped, in the kernel's order, and its
    /// counters; one that shows nothing new leaves the set as it is.
    #[test]
    fn dumps_add_up_to_the_table_in_order() {
        let mut seen = vec![state(1, 0), state(3, 0)];
        assert!(merge_dump(
            &mut seen,
            vec![state(1, 4), state(2, 1), state(3, 2)]
        ));
        assert_eq!(seen, vec![state(1, 4), state(2, 1), state(3, 2)]);
        assert!(merge_dump(&mut seen, vec![state(0, 0), state(2, 5)]));
        assert_eq!(
            seen,
            vec![state(0, 0), state(1, 4), state(2, 5), state(3, 2)]
        );
        assert!(!merge_dump(&mut seen, vec![state(1, 7), state(3, 7)]));
        assert_eq!(
            seen,
            vec![state(0, 0), state(1, 7), state(2, 5), state(3, 7)]
        );
    }
}
