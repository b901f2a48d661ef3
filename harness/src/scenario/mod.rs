mod files;
mod load;
pub mod model;
mod resolve;
mod validate;

pub use files::{files, BUNDLED};
pub use load::{load, parse, validate, Problem, ScenarioError};
pub use model::*;
pub use resolve::{cluster_state, node_context};
