//! Deterministic conformance suite for Kubernetes service proxiers, run in network namespaces.
pub mod backends;
pub mod bench;
pub mod capture;
pub mod caps;
pub mod cluster;
pub mod conntrack;
pub mod docs;
pub mod netns;
pub mod observe;
pub mod probe;
pub mod programming;
pub mod proxier;
pub mod report;
pub mod run;
pub mod scenario;
pub mod soak;
pub mod topology;
