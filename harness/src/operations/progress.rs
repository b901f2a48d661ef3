//! Progress of `kpct run` on stderr: a progress bar (done/total, the runs under way, elapsed
//! time) when stderr is a terminal; otherwise — CI logs — one line per run as it ends (runs
//! overlap with `-j`), `[  3/94] name × proxier … ok (1.2s)`. Runs that fail or cannot complete
//! are always printed as lines (above the bar), so nothing is lost when the bar is cleared.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::time::Duration;

/// How one run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Fail,
    /// Could not complete; the message's first line is shown.
    Error(String),
}

enum Mode {
    Bar(ProgressBar),
    Lines(Box<dyn Write + Send>),
}

pub struct Progress {
    mode: Mode,
    total: usize,
    done: usize,
    /// `scenario × proxier` of the runs under way, in the order they started.
    running: Vec<String>,
}

impl Progress {
    /// A bar when stderr is a terminal, lines otherwise.
    pub fn stderr(total: usize) -> Progress {
        if std::io::stderr().is_terminal() {
            Progress::bar(total)
        } else {
            Progress::lines(total, Box::new(std::io::stderr()))
        }
    }

    pub fn bar(total: usize) -> Progress {
        let bar = ProgressBar::new(total as u64);
        bar.set_style(
            ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30.cyan/blue}] {pos}/{len} {wide_msg}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        bar.enable_steady_tick(Duration::from_millis(250));
        Progress::new(Mode::Bar(bar), total)
    }

    /// One line per run, written to `out`.
    pub fn lines(total: usize, out: Box<dyn Write + Send>) -> Progress {
        Progress::new(Mode::Lines(out), total)
    }

    fn new(mode: Mode, total: usize) -> Progress {
        Progress {
            mode,
            total,
            done: 0,
            running: Vec::new(),
        }
    }

    /// A run of `scenario` against `proxier` starts (others may be under way).
    pub fn start(&mut self, scenario: &str, proxier: &str) {
        self.running.push(format!("{scenario} × {proxier}"));
        self.show_running();
    }

    /// The run of `scenario` against `proxier` ended with `outcome` after `elapsed`.
    pub fn finish(&mut self, scenario: &str, proxier: &str, outcome: &Outcome, elapsed: Duration) {
        let label = format!("{scenario} × {proxier}");
        if let Some(i) = self.running.iter().position(|r| *r == label) {
            self.running.remove(i);
        }
        self.done += 1;
        let head = format!("[{:>3}/{}] {label} …", self.done, self.total);
        let secs = elapsed.as_secs_f64();
        let status = match outcome {
            Outcome::Ok => format!("ok ({secs:.1}s)"),
            Outcome::Fail => format!("FAIL ({secs:.1}s)"),
            Outcome::Error(_) => "ERROR".to_string(),
        };
        match &mut self.mode {
            Mode::Bar(bar) => {
                bar.inc(1);
                match outcome {
                    Outcome::Ok => {}
                    Outcome::Fail => bar.println(format!("{head} {status}")),
                    Outcome::Error(e) => bar.println(format!(
                        "{head} {status}: {}",
                        e.lines().next().unwrap_or_default()
                    )),
                }
            }
            Mode::Lines(out) => {
                let _ = writeln!(out, "{head} {status}");
            }
        }
        self.show_running();
    }

    /// The bar names the oldest run under way and how many others are.
    fn show_running(&self) {
        if let Mode::Bar(bar) = &self.mode {
            bar.set_message(match self.running.as_slice() {
                [] => String::new(),
                [only] => only.clone(),
                [oldest, rest @ ..] => format!("{oldest} (+{} running)", rest.len()),
            });
        }
    }

    /// All runs are done: the bar is cleared (the result table follows on stdout).
    pub fn close(self) {
        if let Mode::Bar(bar) = self.mode {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn without_a_terminal_every_run_is_one_line() {
        let sink = Sink::default();
        let mut p = Progress::lines(94, Box::new(sink.clone()));
        let second = Duration::from_secs(1);
        // Runs overlap: each line is written when its run ends, numbered in that order.
        p.start("clusterip-udp", "kube-proxy-iptables");
        p.start("hairpin-nodeport", "kube-proxy-iptables");
        p.finish("clusterip-udp", "kube-proxy-iptables", &Outcome::Ok, second);
        p.start("masquerade-all", "exec:x");
        p.finish(
            "hairpin-nodeport",
            "kube-proxy-iptables",
            &Outcome::Fail,
            second,
        );
        let boom = Outcome::Error("boom\nmore".into());
        p.finish("masquerade-all", "exec:x", &boom, second);
        p.close();
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(
            lines[0],
            "[  1/94] clusterip-udp × kube-proxy-iptables … ok (1.0s)"
        );
        assert_eq!(
            lines[1],
            "[  2/94] hairpin-nodeport × kube-proxy-iptables … FAIL (1.0s)"
        );
        assert_eq!(lines[2], "[  3/94] masquerade-all × exec:x … ERROR");
    }

    #[test]
    fn the_bar_counts_runs() {
        let mut p = Progress::bar(3);
        let second = Duration::from_secs(1);
        p.start("a", "p");
        p.start("b", "p");
        p.start("c", "p");
        let message = |p: &Progress| {
            let Mode::Bar(bar) = &p.mode else {
                panic!("a bar")
            };
            (bar.position(), bar.message())
        };
        assert_eq!(message(&p), (0, "a × p (+2 running)".into()));
        p.finish("a", "p", &Outcome::Ok, second);
        p.finish("c", "p", &Outcome::Fail, second);
        assert_eq!(message(&p), (2, "b × p".into()));
        p.close();
    }
}
