//! The operations behind the CLI's commands, one room each, so that a command file only reads
//! its arguments, calls one of these and prints (as cargo's `ops` serve its `commands/`).
//!
//! - `suite`: `kpct run`, scenarios × proxiers on parallel workers (`parallel`, `progress`),
//!   the runs this kernel cannot hold shared with a VM, the results and every file written of
//!   them;
//! - `lab`, `soak`, `bench`, `record`: the commands of those names (`kpct trace` is thin over
//!   the tracer, [`crate::trace`], which the report uses too);
//! - `scenario_table`: the README's scenario table and field reference.

pub mod bench;
pub mod cpu_load;
pub mod explore;
pub mod lab;
pub mod parallel;
pub mod progress;
pub mod record;
pub mod scenario_table;
pub mod soak;
pub mod suite;
