//! Deterministic conformance suite for Kubernetes service proxiers, run in network namespaces.
pub mod programming;
pub mod scenario;
