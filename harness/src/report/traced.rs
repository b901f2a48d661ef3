//! A failing probe traced again for the report (`operations::suite::traced` fires it): its
//! picture ([`super::picture`]), or why it could not be traced. The shot is a new one: its
//! picture says what that shot did, next to what the run observed.

use super::picture::Picture;

/// The traced path of one failing probe, or why it could not be traced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracedFailure {
    pub scenario: String,
    pub proxier: String,
    /// As the observation names it (`STEP/PROBE` for a step's probe).
    pub probe: String,
    pub picture: Result<Picture, String>,
}
