//! Errors, each naming the operation that failed and, for kernel refusals, the errno.

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::types::{DestinationKey, ServiceKey};

/// What the client was doing when something failed; part of every error message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    OpenSocket,
    ResolveFamily,
    AddService(ServiceKey),
    UpdateService(ServiceKey),
    DeleteService(ServiceKey),
    GetService(ServiceKey),
    ListServices,
    AddDestination(ServiceKey, DestinationKey),
    UpdateDestination(ServiceKey, DestinationKey),
    DeleteDestination(ServiceKey, DestinationKey),
    ListDestinations(ServiceKey),
    GetInfo,
    GetTimeouts,
    SetTimeouts,
    Flush,
    Zero(Option<ServiceKey>),
}

impl Operation {
    /// The service this operation is about, if any.
    pub fn service(&self) -> Option<&ServiceKey> {
        match self {
            Operation::AddService(s)
            | Operation::UpdateService(s)
            | Operation::DeleteService(s)
            | Operation::GetService(s)
            | Operation::ListDestinations(s)
            | Operation::AddDestination(s, _)
            | Operation::UpdateDestination(s, _)
            | Operation::DeleteDestination(s, _)
            | Operation::Zero(Some(s)) => Some(s),
            _ => None,
        }
    }

    /// The destination this operation is about, if any.
    pub fn destination(&self) -> Option<&DestinationKey> {
        match self {
            Operation::AddDestination(_, d)
            | Operation::UpdateDestination(_, d)
            | Operation::DeleteDestination(_, d) => Some(d),
            _ => None,
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operation::OpenSocket => write!(f, "open generic netlink socket"),
            Operation::ResolveFamily => write!(f, "resolve the IPVS generic netlink family"),
            Operation::AddService(s) => write!(f, "add service {s}"),
            Operation::UpdateService(s) => write!(f, "update service {s}"),
            Operation::DeleteService(s) => write!(f, "delete service {s}"),
            Operation::GetService(s) => write!(f, "get service {s}"),
            Operation::ListServices => write!(f, "list services"),
            Operation::AddDestination(s, d) => write!(f, "add destination {d} to service {s}"),
            Operation::UpdateDestination(s, d) => {
                write!(f, "update destination {d} of service {s}")
            }
            Operation::DeleteDestination(s, d) => {
                write!(f, "delete destination {d} from service {s}")
            }
            Operation::ListDestinations(s) => write!(f, "list destinations of service {s}"),
            Operation::GetInfo => write!(f, "get IPVS info"),
            Operation::GetTimeouts => write!(f, "get IPVS timeouts"),
            Operation::SetTimeouts => write!(f, "set IPVS timeouts"),
            Operation::Flush => write!(f, "flush the IPVS table"),
            Operation::Zero(None) => write!(f, "zero all counters"),
            Operation::Zero(Some(s)) => write!(f, "zero counters of service {s}"),
        }
    }
}

/// A kernel errno with its symbolic name for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.0 {
            libc::EPERM => "EPERM",
            libc::ENOENT => "ENOENT",
            libc::ESRCH => "ESRCH",
            libc::ENOMEM => "ENOMEM",
            libc::EEXIST => "EEXIST",
            libc::EINVAL => "EINVAL",
            libc::ERANGE => "ERANGE",
            libc::ENOPROTOOPT => "ENOPROTOOPT",
            libc::EOPNOTSUPP => "EOPNOTSUPP",
            libc::EAFNOSUPPORT => "EAFNOSUPPORT",
            libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
            libc::EMSGSIZE => "EMSGSIZE",
            libc::EBUSY => "EBUSY",
            _ => return write!(f, "errno {}", self.0),
        };
        write!(f, "{name}, errno {}", self.0)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "IPVS is not available in this kernel (no \"IPVS\" generic netlink family: is the ip_vs \
         module loaded?)"
    )]
    FamilyMissing,

    #[error("{op}: service {service} already exists ({errno})")]
    ServiceExists {
        op: Operation,
        service: ServiceKey,
        errno: Errno,
    },

    #[error("{op}: no such service {service} ({errno})")]
    NoSuchService {
        op: Operation,
        service: ServiceKey,
        errno: Errno,
    },

    #[error("{op}: destination {destination} already exists in service {service} ({errno})")]
    DestinationExists {
        op: Operation,
        service: ServiceKey,
        destination: DestinationKey,
        errno: Errno,
    },

    #[error("{op}: no such destination {destination} in service {service} ({errno})")]
    NoSuchDestination {
        op: Operation,
        service: ServiceKey,
        destination: DestinationKey,
        errno: Errno,
    },

    #[error(
        "{op}: scheduler {scheduler:?} or persistence engine not found (is the ip_vs_{scheduler} \
         module available?) ({errno})"
    )]
    SchedulerNotFound {
        op: Operation,
        scheduler: String,
        errno: Errno,
    },

    #[error("{op}: permission denied: CAP_NET_ADMIN is required ({errno})")]
    PermissionDenied { op: Operation, errno: Errno },

    #[error("{op}: the kernel rejected the request: {message} ({errno})")]
    Kernel {
        op: Operation,
        message: String,
        errno: Errno,
    },

    #[error("{op}: netlink socket error: {source}")]
    Io {
        op: Operation,
        #[source]
        source: io::Error,
    },

    #[error("{op}: could not decode the kernel's reply: {reason}")]
    Decode { op: Operation, reason: String },

    #[error("cannot use network namespace {path}: {source}")]
    Netns {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl Error {
    /// The kernel's errno, for errors that are a kernel refusal.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::ServiceExists { errno, .. }
            | Error::NoSuchService { errno, .. }
            | Error::DestinationExists { errno, .. }
            | Error::NoSuchDestination { errno, .. }
            | Error::SchedulerNotFound { errno, .. }
            | Error::PermissionDenied { errno, .. }
            | Error::Kernel { errno, .. } => Some(errno.0),
            Error::Io { source, .. } | Error::Netns { source, .. } => source.raw_os_error(),
            Error::FamilyMissing | Error::Decode { .. } => None,
        }
    }

    /// Maps a kernel errno to the error a caller can act on. `scheduler` is the scheduler the
    /// request named, used to explain ENOENT on service add/update.
    pub fn from_errno(op: Operation, errno: i32, scheduler: Option<&str>) -> Error {
        let e = Errno(errno);
        if errno == libc::ESRCH {
            if let Some(service) = op.service().copied() {
                return Error::NoSuchService {
                    service,
                    op,
                    errno: e,
                };
            }
        }
        match (errno, &op) {
            (libc::EEXIST, Operation::AddService(s)) => Error::ServiceExists {
                service: *s,
                op,
                errno: e,
            },
            (libc::EEXIST, Operation::AddDestination(s, d)) => Error::DestinationExists {
                service: *s,
                destination: *d,
                op,
                errno: e,
            },
            (libc::ENOENT, Operation::AddService(_) | Operation::UpdateService(_)) => {
                Error::SchedulerNotFound {
                    scheduler: scheduler.unwrap_or("?").to_string(),
                    op,
                    errno: e,
                }
            }
            (
                libc::ENOENT,
                Operation::UpdateDestination(s, d) | Operation::DeleteDestination(s, d),
            ) => Error::NoSuchDestination {
                service: *s,
                destination: *d,
                op,
                errno: e,
            },
            (libc::EPERM, _) => Error::PermissionDenied { op, errno: e },
            (libc::EINVAL, Operation::AddDestination(..) | Operation::UpdateDestination(..)) => {
                Error::Kernel {
                    message: "invalid destination (the address must be unicast and not \
                              link-local; in a fresh network namespace bring `lo` up first, \
                              or the kernel sees every address as broadcast)"
                        .to_string(),
                    op,
                    errno: e,
                }
            }
            _ => Error::Kernel {
                message: kernel_message(errno),
                op,
                errno: e,
            },
        }
    }
}

fn kernel_message(errno: i32) -> String {
    match errno {
        // ipvsadm's wording for the catch-all EINVAL: the kernel validates a lot in one place.
        libc::EINVAL => "invalid argument (address not unicast, bad flags/netmask, tunnel \
                         options without tunnel forwarding, ...)"
            .to_string(),
        libc::ERANGE => "value out of range (negative weight or lower threshold above upper \
                         threshold?)"
            .to_string(),
        _ => io::Error::from_raw_os_error(errno).to_string(),
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Protocol;

    fn svc() -> ServiceKey {
        ServiceKey::Addr {
            protocol: Protocol::Tcp,
            addr: "10.0.0.1".parse().unwrap(),
            port: 80,
        }
    }

    fn dest() -> DestinationKey {
        DestinationKey {
            addr: "2001:db8::1".parse().unwrap(),
            port: 8080,
        }
    }

    #[test]
    fn errno_mapping_and_messages() {
        let e = Error::from_errno(Operation::AddService(svc()), libc::EEXIST, Some("rr"));
        assert!(matches!(e, Error::ServiceExists { .. }));
        assert_eq!(
            e.to_string(),
            "add service TCP 10.0.0.1:80: service TCP 10.0.0.1:80 already exists (EEXIST, errno 17)"
        );
        assert_eq!(e.errno(), Some(libc::EEXIST));

        let e = Error::from_errno(Operation::DeleteService(svc()), libc::ESRCH, None);
        assert_eq!(
            e.to_string(),
            "delete service TCP 10.0.0.1:80: no such service TCP 10.0.0.1:80 (ESRCH, errno 3)"
        );

        let e = Error::from_errno(
            Operation::DeleteDestination(svc(), dest()),
            libc::ENOENT,
            None,
        );
        assert_eq!(
            e.to_string(),
            "delete destination [2001:db8::1]:8080 from service TCP 10.0.0.1:80: no such \
             destination [2001:db8::1]:8080 in service TCP 10.0.0.1:80 (ENOENT, errno 2)"
        );

        let e = Error::from_errno(Operation::AddDestination(svc(), dest()), libc::ESRCH, None);
        assert!(matches!(e, Error::NoSuchService { .. }), "{e}");

        let e = Error::from_errno(Operation::AddDestination(svc(), dest()), libc::EEXIST, None);
        assert!(matches!(e, Error::DestinationExists { .. }), "{e}");

        let e = Error::from_errno(Operation::AddService(svc()), libc::ENOENT, Some("nosuch"));
        assert!(e.to_string().contains("scheduler \"nosuch\""), "{e}");

        let e = Error::from_errno(Operation::Flush, libc::EPERM, None);
        assert!(matches!(e, Error::PermissionDenied { .. }));

        let e = Error::from_errno(Operation::SetTimeouts, libc::EINVAL, None);
        assert!(e.to_string().starts_with("set IPVS timeouts: "), "{e}");
        assert_eq!(e.errno(), Some(libc::EINVAL));

        assert_eq!(
            Error::FamilyMissing.to_string(),
            "IPVS is not available in this kernel (no \"IPVS\" generic netlink family: is the \
             ip_vs module loaded?)"
        );
    }

    #[test]
    fn family_missing_on_this_host() {
        // Hosts without ip_vs (like the one this suite builds on) must get the clear message,
        // not a raw ENOENT. Where IPVS exists this just succeeds.
        match crate::IpvsHandle::new() {
            Ok(_) => println!("IPVS is available here"),
            Err(e @ Error::FamilyMissing) => println!("{e}"),
            // Unprivileged sandboxes may not even open the socket; that is not what we test.
            Err(Error::Io { .. }) => {}
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
}
