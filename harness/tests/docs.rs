//! The documentation holds together: every relative link (and its anchor) resolves, and every
//! `kpct …` command line in it parses with the current command line interface.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// README.md and every document under docs/.
fn documents() -> Vec<PathBuf> {
    let mut out = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/ is readable")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    out.extend(docs);
    out
}

/// `text` without its fenced code blocks (their lines blanked, so line numbers stay).
fn prose(text: &str) -> String {
    let mut fenced = false;
    text.lines()
        .map(|l| {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
                return "";
            }
            if fenced {
                ""
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// GitHub's anchor of a heading.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| !matches!(c, '`' | '*'))
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == ' ' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(path: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    prose(&text)
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| slug(h.trim_start_matches('#')))
        .collect()
}

#[test]
fn every_relative_link_resolves() {
    let link = regex::Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut problems = Vec::new();
    let mut links = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for (n, line) in prose(&text).lines().enumerate() {
            for m in link.captures_iter(line) {
                let target = &m[1];
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                links += 1;
                let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
                let file = if path.is_empty() {
                    doc.clone()
                } else {
                    doc.parent().unwrap().join(path)
                };
                let at = format!("{}:{}: {target}", doc.display(), n + 1);
                if !file.exists() {
                    problems.push(format!("{at}: no such file"));
                } else if !anchor.is_empty() && !anchors(&file).contains(anchor) {
                    problems.push(format!("{at}: no such heading"));
                }
            }
        }
    }
    assert!(links > 20, "only {links} links found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every command line the documentation runs kpct with (`kpct …`, `sudo kpct …`,
/// `ci/kpct.sh …`): the lines of shell code blocks (` ```sh `, or after a `$ ` prompt), continued
/// with `\`, and inline code spans that give a command more than its name. A synopsis with
/// placeholders (`kpct trace SCENARIO PROBE [--step N]`, `kpct run … --kernel-needs`) is no
/// command line, and is left out.
fn command_lines() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let start = |l: &str| -> Option<String> {
        let l = l.trim_start().trim_start_matches("$ ");
        let l = l.strip_prefix("sudo ").unwrap_or(l);
        ["kpct ", "ci/kpct.sh ", "./target/debug/kpct "]
            .iter()
            .find_map(|p| l.strip_prefix(p))
            .map(str::to_string)
    };
    let placeholder = |args: &str| {
        args.contains('…')
            || args.contains(" [")
            || args.split_whitespace().any(|w| {
                w.chars()
                    .all(|c| c.is_ascii_uppercase() || c == '_' || c == '-')
            })
    };
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let mut shell = false;
        let mut fenced = false;
        let mut pending: Option<(usize, String)> = None;
        for (n, line) in text.lines().enumerate() {
            let at = format!("{}:{}", doc.display(), n + 1);
            if let Some(lang) = line.trim_start().strip_prefix("```") {
                fenced = !fenced;
                shell = fenced && matches!(lang.trim(), "sh" | "bash" | "console");
                continue;
            }
            if !fenced {
                continue;
            }
            if let Some((first, mut so_far)) = pending.take() {
                so_far.push(' ');
                so_far.push_str(&without_comment(line.trim()));
                match so_far.strip_suffix('\\') {
                    Some(more) => pending = Some((first, more.to_string())),
                    None => out.push((format!("{}:{}", doc.display(), first + 1), so_far)),
                }
                continue;
            }
            let prompted = line.trim_start().starts_with("$ ");
            if !(shell || prompted) {
                continue;
            }
            if let Some(args) = start(line) {
                let args = without_comment(&args);
                match args.strip_suffix('\\') {
                    Some(more) => pending = Some((n, more.to_string())),
                    None => out.push((at, args)),
                }
            }
        }
        // Inline spans, over the prose with its line breaks (a span may wrap).
        let prose = prose(&text).replace('\n', " ");
        for span in prose.split('`').skip(1).step_by(2) {
            if let Some(args) = start(span) {
                if args.split_whitespace().count() > 1 && !placeholder(&args) {
                    out.push((doc.display().to_string(), args));
                }
            }
        }
    }
    out
}

/// A shell line without its `# comment`.
fn without_comment(line: &str) -> String {
    let mut quote = None;
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if line[..i].ends_with(' ') => return line[..i].trim_end().to_string(),
            _ => {}
        }
    }
    line.trim_end().to_string()
}

#[test]
fn every_kpct_command_line_parses() {
    let lines = command_lines();
    assert!(lines.len() > 30, "only {} command lines found", lines.len());
    let mut problems = Vec::new();
    for (at, line) in &lines {
        let Some(args) = shlex::split(line) else {
            problems.push(format!("{at}: `{line}`: unbalanced quotes"));
            continue;
        };
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kpct"))
            .args(&args)
            .env("KPCT_PARSE_ONLY", "1")
            .output()
            .expect("kpct runs");
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr);
            problems.push(format!(
                "{at}: `kpct {line}`: {}",
                why.lines().next().unwrap_or("")
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{} of {}:\n{}",
        problems.len(),
        lines.len(),
        problems.join("\n")
    );
}
