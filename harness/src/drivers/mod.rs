//! How a run drives a proxier: the [`programmer`] a run points at its nodes (`NodeProgrammer`),
//! and the kinds of proxier behind it besides the pure built-ins of [`crate::proxier`]: an
//! `exec:` program ([`exec`]), a `replay:` capture ([`replay`]), and real proxiers watching an
//! API server kpct serves ([`real`]: kube-proxy itself, any `api:` proxier), each started in
//! the one [`confinement`]. [`spec`] is the one place a `--proxier` spec is read.

pub mod confinement;
pub mod exec;
pub mod programmer;
pub mod real;
pub mod replay;
pub mod spec;

pub use exec::ExecProxier;
pub use real::{ApiProxier, RealProxier, RealSpec};
pub use replay::Replay;
pub use spec::ProxierSpec;
