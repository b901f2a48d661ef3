//! Every input the fuzzers have kept (`fuzz/corpus/TARGET/`) and every input that once made a
//! target fail (`fuzz/artifacts/TARGET/`), run through the same surface as the fuzz target, as
//! an ordinary test: a parser that panics, or answers an error without its place, on any of
//! them fails here, on stable Rust and without a fuzzer.

use kpct::fuzz_surfaces::TARGETS;
use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// The files of `dir`, sorted (none when it does not exist).
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Runs every kept input of every target; names each input that fails, all in one pass.
#[test]
fn every_kept_fuzz_input_is_handled() {
    let mut failures = Vec::new();
    let mut counts = Vec::new();
    for (target, run) in TARGETS {
        let corpus = inputs(&fuzz_dir().join("corpus").join(target));
        let artifacts = inputs(&fuzz_dir().join("artifacts").join(target));
        assert!(
            !corpus.is_empty(),
            "no corpus for fuzz target {target} in fuzz/corpus/{target}"
        );
        counts.push(format!("{target}: {} + {}", corpus.len(), artifacts.len()));
        for input in corpus.iter().chain(&artifacts) {
            let data = std::fs::read(input).unwrap();
            if let Err(panic) = std::panic::catch_unwind(|| run(&data)) {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failures.push(format!("{target} {}: {message}", input.display()));
            }
        }
    }
    println!("inputs run (corpus + artifacts): {}", counts.join(", "));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
