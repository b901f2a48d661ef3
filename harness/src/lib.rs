//! Deterministic conformance suite for Kubernetes service proxiers, run in network namespaces.
pub mod cluster;
pub mod programming;
pub mod proxier;
pub mod scenario;
