//! Baselines: an earlier run's results document as the accepted state, so that a proxier's CI
//! fails only on what got worse. A probe that passed there and fails now is a regression; one
//! that failed there and still fails is accepted (and reported); one that failed there and
//! passes now is a fix. `kpct run --baseline FILE` judges a run so; `kpct compare OLD NEW`
//! compares two documents.

mod checks;
mod compare;
#[cfg(test)]
mod tests;

pub use checks::{Check, CheckKey, CheckResult, Checks, Outcome};
pub use compare::{compare, Change, Comparison, Entry};
