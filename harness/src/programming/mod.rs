mod graceful;
pub mod model;
pub use graceful::graceful_termination_needed;
pub use model::*;
pub mod apply;
pub mod effective;
pub mod kube_ipvs0;
pub mod nft;
mod rollback;
pub(crate) mod rule_key;
pub mod source;
mod step;
pub mod text;
pub mod tools;
pub mod view;

pub use apply::{apply, AppliedReport, Applier, ApplyError, ApplyOptions, Step};
pub use effective::{
    builtin_chains, effective_state, EffectiveState, Missing, ReadError, ReadOptions,
    KERNEL_IPVS_TIMEOUTS,
};
pub use source::{Item, Origin, SourceMap};
pub use text::{parse_text, parse_text_with_sources, render_text, ParsedText, TextError};
