//! `kpct validate`: every problem of every scenario file, in one pass.

use anyhow::Result;

#[derive(clap::Args)]
pub struct Args {
    /// Scenario files or globs. Default: scenarios/*.yaml.
    files: Vec<String>,
}

pub fn run(Args { files }: Args) -> Result<()> {
    let files = kpct::scenario::files(&files)?;
    let problems = checked(&files)?.problems;
    for p in &problems {
        crate::stdout::emit(&format!("{p}\n"))?;
    }
    if problems.is_empty() {
        println!("{} scenario file(s), no problems", files.len());
        Ok(())
    } else {
        eprintln!(
            "kpct: {} problem(s) in {} scenario file(s)",
            problems.len(),
            files.len()
        );
        std::process::exit(1)
    }
}

/// Scenario files checked as `kpct validate` checks them.
pub struct Checked {
    /// The files that parse, with their scenarios.
    pub scenarios: Vec<(std::path::PathBuf, kpct::Scenario)>,
    /// Every problem of every file: the format's, then the library's rules.
    pub problems: Vec<kpct::scenario::Problem>,
}

pub fn checked(files: &[std::path::PathBuf]) -> Result<Checked> {
    let mut scenarios = Vec::new();
    let mut problems = Vec::new();
    for file in files {
        use kpct::input_file::{read_text, SCENARIO_LIMIT};
        // An unreadable file is one more problem: the others are still checked.
        let text = match read_text(file, SCENARIO_LIMIT, "scenario") {
            Ok(text) => text,
            Err(e) => {
                problems.push(kpct::scenario::Problem {
                    origin: file.display().to_string(),
                    location: None,
                    path: String::new(),
                    message: format!("cannot read scenario file: {e}"),
                });
                continue;
            }
        };
        match kpct::scenario::parse(&text, &file.display().to_string()) {
            Ok(s) => {
                problems.extend(kpct::scenario::conventions(file, &text, &s));
                scenarios.push((file.clone(), s));
            }
            Err(e) => problems.extend(e.problems().iter().cloned()),
        }
    }
    Ok(Checked {
        scenarios,
        problems,
    })
}
