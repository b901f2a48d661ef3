mod load;
pub mod model;
mod resolve;
mod validate;

pub use model::*;
