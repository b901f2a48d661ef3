//! Progress of `kpct run` on stderr: a progress bar (done/total, the current scenario ×
//! proxier, elapsed time) when stderr is a terminal; otherwise — CI logs — one line per run,
//! `[  3/94] name × proxier … ok (1.2s)`. Runs that fail or cannot complete are always printed
//! as lines (above the bar), so nothing is lost when the bar is cleared.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

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
    current: Option<(String, Instant)>,
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
            current: None,
        }
    }

    /// A run of `scenario` against `proxier` starts.
    pub fn start(&mut self, scenario: &str, proxier: &str) {
        self.done += 1;
        let head = format!("[{:>3}/{}] {scenario} × {proxier} …", self.done, self.total);
        match &mut self.mode {
            Mode::Bar(bar) => bar.set_message(format!("{scenario} × {proxier}")),
            Mode::Lines(out) => {
                let _ = write!(out, "{head} ");
                let _ = out.flush();
            }
        }
        self.current = Some((head, Instant::now()));
    }

    /// The current run ended with `outcome`.
    pub fn finish(&mut self, outcome: &Outcome) {
        let Some((head, started)) = self.current.take() else {
            return;
        };
        let secs = started.elapsed().as_secs_f64();
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
                let _ = writeln!(out, "{status}");
            }
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
        p.start("clusterip-udp", "kube-proxy-iptables");
        p.finish(&Outcome::Ok);
        p.start("hairpin-nodeport", "kube-proxy-iptables");
        p.finish(&Outcome::Fail);
        p.start("masquerade-all", "exec:x");
        p.finish(&Outcome::Error("boom\nmore".into()));
        p.close();
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].starts_with("[  1/94] clusterip-udp × kube-proxy-iptables … ok (")
                && lines[0].ends_with("s)"),
            "{text}"
        );
        assert!(lines[1].starts_with("[  2/94] hairpin-nodeport × kube-proxy-iptables … FAIL ("));
        assert_eq!(lines[2], "[  3/94] masquerade-all × exec:x … ERROR");
    }

    #[test]
    fn the_bar_counts_runs() {
        let mut p = Progress::bar(2);
        p.start("a", "p");
        p.finish(&Outcome::Ok);
        p.start("b", "p");
        p.finish(&Outcome::Fail);
        let Mode::Bar(bar) = &p.mode else {
            panic!("a bar")
        };
        assert_eq!(bar.position(), 2);
        assert_eq!(bar.message(), "b × p");
        p.close();
    }
}
