#[macro_use]
mod serde_string;
mod cidr;
pub mod cluster;
mod conventions;
mod family;
mod files;
mod kernel_needs;
mod load;
pub mod model;
mod recover;
pub mod reference;
mod resolve;
mod steps;
mod tags;
mod validate;

pub use conventions::conventions;
pub use family::{of_family, IpCidr, IpFamily, IpFamilyPolicy};
pub use files::{files, library, BUNDLED};
pub use load::{load, load_for, parse, parse_for, validate, Problem, ScenarioError};
pub use model::*;
pub(crate) use resolve::{affinity_timeout, externally_accessible, node_of_pod_ip, target_port};
pub use resolve::{cluster_state, node_context};
pub use steps::{first_probe_index, state_at, step_name, StepState};
pub use tags::{check_tags, TAGS};
pub use validate::KnownProxiers;
pub(crate) use validate::{selected_pods, service_ip_families};
