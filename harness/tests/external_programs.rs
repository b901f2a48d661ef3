//! Every external program the suite runs is installed by `ci/install-deps.sh`.
//!
//! The programs are collected from the code as it is — the program argument of every
//! `Command::new`, `Netns::exec`/`exec_with_stdin`/`output_of`/`command`, `tools::run` and the
//! tests' own runners, and the commands of the `ci/` scripts, `.ci/run`, the lab's provisioning
//! scripts and the `exec:` fixtures — and compared with `ci/deps.tsv`, which install-deps installs
//! from. Starting to use a new program without listing its package fails here, as does a call
//! whose program the scan cannot read (a variable) until it is listed in [`INDIRECT`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex::Regex;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Calls whose program is a variable, with the programs it can hold. Each program must appear as
/// a string literal in the same file, so an entry cannot name programs the file does not run.
const INDIRECT: &[(&str, &str, &[&str])] = &[
    // The primitives themselves: their callers are scanned instead.
    ("harness/src/netns/mod.rs", "program", &[]),
    // Version lines of the tools, for reports.
    (
        "harness/src/provenance.rs",
        "program",
        &["iptables", "ipset", "ipvsadm", "dpkg-query"],
    ),
    ("harness/src/programming/tools.rs", "program", &[]),
    ("harness/src/kernel_features.rs", "program", &[]),
    // The hand-written rules a drop-verdict test puts on a node.
    (
        "harness/tests/drop_verdicts.rs",
        "program",
        &["iptables", "nft"],
    ),
    // The VM runner `kpct run` hands runs to: KPCT_VM_RUNNER, which ci/kpct.sh sets to
    // ci/vm.sh (a script of the repository, its own programs scanned with it).
    ("harness/src/operations/suite/vm_share.rs", "runner", &[]),
    // The real proxiers ci/real-proxiers.sh builds (target/real-proxiers/), asked for --version.
    ("harness/tests/real_proxiers_build.rs", "&path", &[]),
    // The same, when a real kube-proxy is asked for its version (its release, the programming
    // comparison's key).
    ("harness/src/drivers/real/mod.rs", "binary", &[]),
    // A replay capture's tools, passed through a closure.
    ("harness/src/drivers/replay.rs", "program", &[]),
    // The trace monitor: xtables-monitor, or nft where a node holds nftables tables.
    (
        "harness/src/trace/monitor.rs",
        "program",
        &["xtables-monitor", "nft"],
    ),
    (
        "harness/src/programming/effective.rs",
        "opts.backend.save()",
        &[],
    ),
    ("harness/src/programming/rollback.rs", "backend.save()", &[]),
    // The rule counters of a failing probe's evidence (`iptables-save -c`, `ip6tables-save -c`).
    ("harness/src/evidence.rs", "family.save(opts.backend)", &[]),
    (
        "harness/src/programming/rollback.rs",
        "family.restore(backend)",
        &[],
    ),
    (
        "harness/src/programming/rollback.rs",
        "Xtables::Ip6.save(backend)",
        &[],
    ),
    ("harness/src/programming/apply.rs", "restore", &[]),
    (
        "harness/src/programming/effective.rs",
        "Xtables::Ip6.save(backend)",
        &[],
    ),
    ("harness/src/drivers/replay.rs", "backend.save()", &[]),
    (
        "harness/src/drivers/replay.rs",
        "Xtables::Ip6.save(backend)",
        &[],
    ),
    (
        "harness/src/operations/bench/scale.rs",
        "tool",
        &["iptables-restore", "ipset"],
    ),
    ("harness/tests/topology.rs", "cmd", &["ip"]),
    (
        "harness/tests/topology.rs",
        "save",
        &["iptables-save", "iptables-legacy-save", "ipset"],
    ),
    ("ipvs/tests/needs_ipvs.rs", "cmd", &[]),
    // What the hard-kill test reads of the root namespace.
    (
        "harness/tests/hard_kills.rs",
        "program",
        &[
            "ip",
            "iptables-legacy-save",
            "iptables-nft-save",
            "ip6tables-legacy-save",
            "ip6tables-nft-save",
            "nft",
            "ipset",
            "ipvsadm",
        ],
    ),
    // The binary under test.
    (
        "harness/tests/common/mod.rs",
        "env!(\"CARGO_BIN_EXE_kpct\")",
        &[],
    ),
    (
        "harness/tests/topology.rs",
        "env!(\"CARGO_BIN_EXE_kpct\")",
        &[],
    ),
    // Every `kpct` command line the docs show, parsed (KPCT_PARSE_ONLY) by the binary itself.
    ("harness/tests/docs.rs", "env!(\"CARGO_BIN_EXE_kpct\")", &[]),
];

/// What `IptablesBackend::save`/`restore` return (the indirect backend calls above).
const BACKEND_TOOLS: &str = "harness/src/programming/tools.rs";

fn rust_files() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in [
        "harness/src",
        "harness/tests",
        "ipvs/src",
        "ipvs/tests",
        "ipvs/examples",
    ] {
        walk(&repo().join(dir), &mut |p| {
            // This file's own samples of unlisted programs are no uses.
            if p.extension().is_some_and(|e| e == "rs")
                && !p.ends_with("tests/external_programs.rs")
            {
                out.push(p.to_path_buf());
            }
        });
    }
    out
}

fn shell_files() -> Vec<PathBuf> {
    let mut out = vec![repo().join(".ci/run")];
    for dir in ["ci", "vagrant", "harness/tests/fixtures/exec"] {
        walk(&repo().join(dir), &mut |p| {
            if p.extension().is_some_and(|e| e == "sh") {
                out.push(p.to_path_buf());
            }
        });
    }
    out
}

fn walk(dir: &Path, f: &mut dyn FnMut(&Path)) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk(&p, f);
        } else {
            f(&p);
        }
    }
}

fn rel(p: &Path) -> String {
    let root = repo().canonicalize().expect("repository root");
    p.canonicalize()
        .expect("a scanned file")
        .strip_prefix(&root)
        .expect("inside the repository")
        .display()
        .to_string()
}

/// One use of a program found in the code: where, and which program (or the expression that
/// names it).
#[derive(Debug)]
struct Use {
    at: String,
    program: Result<String, String>,
}

fn rust_uses(path: &Path, text: &str) -> Vec<Use> {
    // The argument that names the program, right after the call's opening parenthesis (after
    // the namespace argument of tools::run / probe_cmd / the replay capture's `tool`).
    let literal = Regex::new(
        r#"(?x)
        (?: Command::new | \.exec_with_stdin | \.exec_stdin | \.exec | \.output_of | \.command
          | ExecProxier::new | \brun )
        \(\s* &?\[?\s* "(?P<a>[^"]+)"
      | (?: tools::run | probe_cmd | \btool ) \(\s* [^,]+ , \s* "(?P<b>[^"]+)""#,
    )
    .expect("regex");
    // The same calls with a variable or a method call where the program goes.
    let variable = Regex::new(
        r#"(?x)
        (?: Command::new | \.exec_with_stdin | \.output_of | \.command | \.exec )
        \(\s* (?P<a> &?[a-z_][a-z0-9_.]*(?:\(\))? | env!\("[A-Za-z_]+"\) ) \s* [,)]
      | (?: tools::run | probe_cmd | \btool ) \(\s* [^,]+ , \s*
        (?P<b> &?[A-Za-z_][A-Za-z0-9_.:]*(?:\([a-z_.]*\))? ) \s* ,"#,
    )
    .expect("regex");
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        // Definitions (`fn exec(&self, program: &str …)`) name no program.
        if code.contains("fn ") {
            continue;
        }
        let at = format!("{}:{}", rel(path), n + 1);
        let arg = |c: &regex::Captures| {
            c.name("a")
                .or_else(|| c.name("b"))
                .expect("one of the groups")
                .as_str()
                .to_string()
        };
        for c in literal.captures_iter(code) {
            out.push(Use {
                at: at.clone(),
                program: Ok(arg(&c)),
            });
        }
        for c in variable.captures_iter(code) {
            out.push(Use {
                at: at.clone(),
                program: Err(arg(&c)),
            });
        }
    }
    out
}

/// Shell words that are no programs: keywords, builtins and the script's own functions.
fn is_shell_builtin(word: &str) -> bool {
    const WORDS: &[&str] = &[
        "if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac",
        "in", "function", "select", "time", "!", "{", "}", "[", "[[", "]]", "]", "echo", "printf",
        "cd", "set", "export", "local", "read", "shift", "exit", "return", "trap", "source", ".",
        ":", "hash", "command", "wait", "eval", "declare", "unset", "compgen", "type", "break",
        "continue", "exec", "true", "false", "test", "mapfile", "let", "readonly", "kill", "jobs",
    ];
    WORDS.contains(&word)
}

fn shell_uses(path: &Path, text: &str) -> Vec<Use> {
    // `name() {`, or `name() (` for a function whose body runs in a subshell.
    let functions: BTreeSet<String> = Regex::new(r"(?m)^\s*([A-Za-z_][A-Za-z0-9_]*)\(\)\s*[{(]")
        .expect("regex")
        .captures_iter(text)
        .map(|c| c[1].to_string())
        .collect();
    // A command starts a line or follows a separator or an opening of a command substitution.
    let separators = Regex::new(r"\|\||&&|\$\(|[;|(`]|\bthen\b|\bdo\b|\belse\b").expect("regex");
    let mut out = Vec::new();
    let mut heredoc: Option<String> = None;
    for (n, line) in text.lines().enumerate() {
        if let Some(end) = &heredoc {
            if line.trim() == end {
                heredoc = None;
            }
            continue;
        }
        if let Some(i) = line.find("<<") {
            let tag = line[i + 2..]
                .trim_start_matches(['-', '~', ' '])
                .trim_matches(['\'', '"']);
            let tag: String = tag
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !tag.is_empty() && !line[i..].starts_with("<<<") {
                heredoc = Some(tag);
            }
        }
        let code = shell_code(line);
        for segment in separators.split(&code) {
            let mut words = segment.split_whitespace().peekable();
            // Leading assignments (VAR=value cmd) and wrappers that run the next word.
            while let Some(w) = words.peek() {
                if w.contains('=') && !w.starts_with('=') && !w.starts_with('-')
                    || matches!(*w, "exec" | "command" | "!" | "time" | "sudo")
                {
                    words.next();
                } else if *w == "timeout" {
                    // `timeout [--foreground] SECONDS CMD`: the command is what it runs.
                    out.push(Use {
                        at: format!("{}:{}", rel(path), n + 1),
                        program: Ok("timeout".into()),
                    });
                    words.next();
                    while words.peek().is_some_and(|w| {
                        w.starts_with('-')
                            || w.starts_with('"')
                            || w.starts_with('$')
                            || w.chars().all(|c| c.is_ascii_digit())
                    }) {
                        words.next();
                    }
                } else {
                    break;
                }
            }
            let Some(word) = words.next() else { continue };
            let word = word.trim_end_matches(';');
            if is_shell_builtin(word)
                || functions.contains(word)
                || word.starts_with(['$', '"', '\'', '-', '<', '>', '&', '#', '*', '{'])
                || word.ends_with(')')
                || word.contains(['=', '/', '"', '\'', '$'])
                || word.chars().all(|c| c.is_ascii_digit())
                || !word.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            {
                continue;
            }
            out.push(Use {
                at: format!("{}:{}", rel(path), n + 1),
                program: Ok(word.to_string()),
            });
        }
    }
    out
}

/// A line as code: comments dropped, quoted text masked (it holds no commands) except command
/// substitutions inside double quotes (`"$(dirname "$0")"`), which are code again.
fn shell_code(line: &str) -> String {
    #[derive(PartialEq)]
    enum Ctx {
        Code,
        Single,
        Double,
        Substitution(usize),
    }
    let mut stack = vec![Ctx::Code];
    let mut out = String::new();
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let prev = if i == 0 { ' ' } else { chars[i - 1] };
        let top = stack.last().expect("never empty");
        let masked = match top {
            Ctx::Single => {
                if c == '\'' {
                    stack.pop();
                }
                c != '\''
            }
            Ctx::Double => {
                if c == '"' {
                    stack.pop();
                    false
                } else if c == '$' && chars.get(i + 1) == Some(&'(') {
                    stack.push(Ctx::Substitution(0));
                    out.push_str("$(");
                    i += 2;
                    continue;
                } else {
                    true
                }
            }
            Ctx::Code | Ctx::Substitution(_) => {
                match c {
                    '#' if prev.is_whitespace() || i == 0 => break,
                    '\'' => stack.push(Ctx::Single),
                    '"' => stack.push(Ctx::Double),
                    '(' => {
                        if let Some(Ctx::Substitution(d)) = stack.last_mut() {
                            *d += 1;
                        }
                    }
                    ')' => {
                        if let Some(Ctx::Substitution(d)) = stack.last_mut() {
                            if *d == 0 {
                                stack.pop();
                            } else {
                                *d -= 1;
                            }
                        }
                    }
                    _ => {}
                }
                false
            }
        };
        out.push(if masked { '_' } else { c });
        i += 1;
    }
    // Arithmetic $(( … )) and (( … )) hold variables, not commands.
    Regex::new(r"\$?\(\([^)]*\)\)")
        .expect("regex")
        .replace_all(&out, "_")
        .into_owned()
}

/// ci/deps.tsv: program -> package.
fn installed_programs() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(repo().join("ci/deps.tsv")).expect("ci/deps.tsv");
    let mut out = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let cols: Vec<&str> = line.split('\t').collect();
        assert!(
            cols.len() == 5,
            "ci/deps.tsv:{}: expected 5 tab-separated columns, found {}",
            n + 1,
            cols.len()
        );
        assert!(
            matches!(cols[0], "suite" | "tests" | "vm" | "toolchain" | "lab")
                && matches!(cols[1], "apt" | "pip" | "cargo" | "rustup" | "go"),
            "ci/deps.tsv:{}: unknown group or source in {line:?}",
            n + 1
        );
        for program in cols[3].split(' ').filter(|p| *p != "-") {
            out.insert(program.to_string(), cols[2].to_string());
        }
    }
    out
}

fn all_uses() -> Vec<Use> {
    let mut uses = Vec::new();
    for path in rust_files() {
        let text = std::fs::read_to_string(&path).expect("a source file");
        uses.extend(rust_uses(&path, &text));
    }
    for path in shell_files() {
        let text = std::fs::read_to_string(&path).expect("a script");
        uses.extend(shell_uses(&path, &text));
    }
    uses
}

#[test]
fn every_program_the_suite_runs_is_installed_by_install_deps() {
    let installed = installed_programs();
    let mut problems = Vec::new();
    let mut used = BTreeSet::new();
    for u in all_uses() {
        match u.program {
            Ok(p) => {
                used.insert(p.clone());
                if !installed.contains_key(&p) {
                    problems.push(format!(
                        "{}: runs `{p}`, which ci/deps.tsv does not list (add its package)",
                        u.at
                    ));
                }
            }
            Err(expr) => {
                let file = u.at.rsplit_once(':').map(|(f, _)| f).unwrap_or(&u.at);
                match INDIRECT.iter().find(|(f, e, _)| *f == file && *e == expr) {
                    Some((_, _, programs)) => used.extend(programs.iter().map(|p| p.to_string())),
                    None => problems.push(format!(
                        "{}: runs the program named by `{expr}`; list what it can be in INDIRECT",
                        u.at
                    )),
                }
            }
        }
    }
    for program in INDIRECT.iter().flat_map(|(_, _, p)| p.iter()) {
        if !installed.contains_key(*program) {
            problems.push(format!(
                "INDIRECT names `{program}`, which ci/deps.tsv does not list"
            ));
        }
    }
    // The backend calls resolve to the literals IptablesBackend returns.
    let backend = std::fs::read_to_string(repo().join(BACKEND_TOOLS)).expect("tools.rs");
    for tool in Regex::new(r#"=> "(ip6?tables[a-z-]*)""#)
        .expect("regex")
        .captures_iter(&backend)
    {
        if !installed.contains_key(&tool[1]) {
            problems.push(format!(
                "{BACKEND_TOOLS}: the iptables backend runs `{}`, which ci/deps.tsv does not list",
                &tool[1]
            ));
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
    // The scan reads what it claims to: the suite's main tools are found in the code.
    for expected in [
        "ip",
        "ipset",
        "ipvsadm",
        "iptables-restore",
        "xtables-monitor",
        "vng",
        "nft",
    ] {
        assert!(
            used.contains(expected),
            "the scan did not find `{expected}`: {used:?}"
        );
    }
}

#[test]
fn every_indirect_entry_is_still_in_the_code_and_names_its_literals() {
    let uses = all_uses();
    for (file, expr, programs) in INDIRECT {
        assert!(
            uses.iter().any(|u| u.at.starts_with(&format!("{file}:"))
                && u.program.as_ref().err().map(String::as_str) == Some(*expr)),
            "INDIRECT entry ({file}, {expr}) no longer matches a call: remove it"
        );
        let text = std::fs::read_to_string(repo().join(file)).expect("an INDIRECT file");
        for p in *programs {
            assert!(
                text.contains(&format!("\"{p}\"")),
                "INDIRECT says {file} runs `{p}` through `{expr}`, but the file has no \"{p}\""
            );
        }
    }
}

/// The scan can fail: a program missing from deps.tsv and an unlisted variable are reported.
#[test]
fn the_scan_reports_an_unlisted_program_and_a_variable() {
    let rust = rust_uses(
        &repo().join("harness/src/lib.rs"),
        "let x = ns.exec(\"tcpdump\", &[\"-i\"]);\nlet y = Command::new(tool_name);\n",
    );
    assert_eq!(rust[0].program, Ok("tcpdump".to_string()));
    assert_eq!(rust[1].program, Err("tool_name".to_string()));
    let shell = shell_uses(
        &repo().join("ci/test.sh"),
        "f() { :; }\nif x=$(socat - -); then f; fi # nc\nout=\"$(jq .a <<< \"$x\")\" && echo hi\n",
    );
    let names: Vec<_> = shell.iter().map(|u| u.program.clone().unwrap()).collect();
    assert_eq!(names, ["socat", "jq"]);
    assert!(!installed_programs().contains_key("socat"));
}
