//! Deterministic conformance suite for Kubernetes service proxiers, run in network namespaces.
//!
//! The face: load a scenario ([`load`]), pick a proxier ([`builtin`], or any [`ProxierSpec`]
//! built into a [`NodeProgrammer`]: `exec:`, `replay:`, a real kube-proxy, an `api:` proxier),
//! run it ([`run_scenario`]) and read what the kernel did ([`ScenarioRun`]: its
//! [`ScenarioObservation`], the document the goldens hold, and every violated expectation).
//! The `kpct` CLI and the tests reach further in, through the modules below, which are hidden
//! from the documentation: they are the house's rooms, not its front door.
//!
//! The map, from the ground floor up. Each floor uses only its own and the floors below it, and
//! no room reaches back into one that reaches it: the rooms make no circle.

pub use document::ScenarioObservation;
pub use drivers::ProxierSpec;
pub use proxier::{builtin, Proxier};
pub use run::{run_scenario, NodeProgrammer, ScenarioRun};
pub use scenario::{load, Scenario, ScenarioError};

// Ground floor: the kernel. Namespaces and their names, every nfnetlink conversation, the
// processes kpct starts in a namespace, a run's scratch files (`netns::scratch`); and the one
// list of built-in proxiers (`builtins`) with the kube-proxy releases they model (`release`),
// which the scenario validator and the test generator read too.
#[doc(hidden)]
pub mod builtins;
#[doc(hidden)]
pub mod netfilter;
#[doc(hidden)]
pub mod netns;
mod process_groups;
#[doc(hidden)]
pub mod proxier_kinds;
#[doc(hidden)]
pub mod release;
#[doc(hidden)]
pub mod repository;

// First floor: what a user hands kpct and what kpct hands back. Scenario files, read safely and
// quoted back safely, and the cluster state each step describes (`scenario::cluster`); the
// observation document a run produces, the goldens' contract (`document`).
#[doc(hidden)]
pub mod document;
#[doc(hidden)]
pub mod input_file;
mod quote;
#[doc(hidden)]
pub mod scenario;

// Second floor: a cluster on the machine. The topology of namespaces, what this kernel can do,
// the cluster as Kubernetes objects (which the API server, the `kpct-apiserver` crate, serves
// to real proxiers), programming and the applier that puts it into a node, backends in the
// pods, captures.
#[doc(hidden)]
pub mod api_objects;
#[doc(hidden)]
pub mod backends;
#[doc(hidden)]
pub mod capture;
#[doc(hidden)]
pub mod kernel_features;
#[doc(hidden)]
pub mod programming;
#[doc(hidden)]
pub mod topology;

// Third floor: a run. Proxiers and how a run drives them (`NodeProgrammer`), probes and the
// packets they fire, drops decided at their verdict (`probe::drop_verdicts`), kept flows, IPVS
// draining, observations, expectations, convergence, evidence, and a shot traced through the
// kernel (`trace`: `kpct trace`, and the report's pictures).
mod convergence;
mod draining;
#[doc(hidden)]
pub mod drivers;
mod evidence;
mod expectation_check;
mod ipvs_connections;
mod kept_flows;
#[doc(hidden)]
pub mod observe;
#[doc(hidden)]
pub mod probe;
#[doc(hidden)]
pub mod proxier;
#[doc(hidden)]
pub mod run;
#[doc(hidden)]
pub mod trace;

// Top floor: what is made of runs. Reports and baselines (`report::baseline`), programming
// compared, what a result was produced on, output paths checked before a run, the fuzzed input
// surfaces, and the operations behind the CLI's commands (the suite run, lab, soak, bench,
// record, the README's tables).
#[doc(hidden)]
pub mod fuzz_surfaces;
#[doc(hidden)]
pub mod operations;
#[doc(hidden)]
pub mod output_paths;
#[doc(hidden)]
pub mod programming_diff;
#[doc(hidden)]
pub mod provenance;
#[doc(hidden)]
pub mod report;
