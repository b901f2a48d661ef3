//! Checks of each probe's expectations: the backends, sources and outcomes they name, and
//! which proxiers they are for (`expectFor`).

use super::*;

impl<'a> Checker<'a> {
    pub(super) fn expectations(&mut self, path: &FieldPath, probe: &Probe) {
        if let Some(expect) = &probe.expect {
            self.expectation(&path.key("expect"), expect, probe.repeat);
        }
        for (proxier, expect) in &probe.expect_for {
            if let Some(problem) = self.known.problem(proxier) {
                self.err(path.key("expectFor").key(proxier), problem);
            }
            self.expectation(&path.key("expectFor").key(proxier), expect, probe.repeat);
        }
    }

    pub(super) fn expectation(&mut self, path: &FieldPath, expect: &Expectation, repeat: u32) {
        let path = path.clone();
        for (field, pods) in [
            ("reaches", &expect.reaches),
            ("reachesOneOf", &expect.reaches_one_of),
            ("sequence", &expect.sequence),
            ("cycle", &expect.cycle),
        ] {
            for (k, pod) in pods.iter().enumerate() {
                if self.pod(pod).is_none() {
                    self.err(path.key(field).idx(k), format!("unknown pod `{pod}`"));
                }
            }
        }
        for pod in expect.counts.keys() {
            if self.pod(pod).is_none() {
                self.err(path.key("counts").key(pod), format!("unknown pod `{pod}`"));
            }
        }
        if !expect.reaches.is_empty() && !expect.reaches_one_of.is_empty() {
            self.err(
                path.key("reachesOneOf"),
                "give `reaches` (exactly these pods) or `reachesOneOf` (each shot on one of them), not both",
            );
        }
        if expect.reaches.len() > 1 && repeat < expect.reaches.len() as u32 {
            self.err(
                path.key("reaches"),
                format!(
                    "{} pods cannot all be reached by {repeat} shot(s): raise `repeat`, or use `reachesOneOf` if any one of them will do",
                    expect.reaches.len()
                ),
            );
        }
        let counted: u64 = expect.counts.values().map(|c| u64::from(*c)).sum();
        if !expect.counts.is_empty() && counted != u64::from(repeat) {
            self.err(
                path.key("counts"),
                format!("the counts add up to {counted}, but the probe fires `repeat: {repeat}` shot(s)"),
            );
        }
        for (field, what, pods) in [
            ("sequence", "a sequence", &expect.sequence),
            ("cycle", "a round", &expect.cycle),
        ] {
            if pods.len() > repeat as usize {
                self.err(
                    path.key(field),
                    format!(
                        "{what} of {} backends is longer than the probe's `repeat: {repeat}` shot(s)",
                        pods.len()
                    ),
                );
            }
        }
        for (k, pod) in expect.cycle.iter().enumerate() {
            if expect.cycle[..k].contains(pod) {
                self.err(
                    path.key("cycle").idx(k),
                    format!("`{pod}` twice: a round names each backend once (for a weighted order, give the exact `sequence`)"),
                );
            }
        }
        let undelivered = matches!(
            expect.outcome,
            Some(
                OutcomeExpectation::Dropped
                    | OutcomeExpectation::Rejected
                    | OutcomeExpectation::NotDelivered
                    | OutcomeExpectation::AnsweredByNode
            )
        );
        // The node's own answer comes from the address the client used.
        let answered = expect.outcome == Some(OutcomeExpectation::AnsweredByNode);
        if !undelivered {
            return;
        }
        for (field, set) in [
            ("reaches", !expect.reaches.is_empty()),
            ("reachesOneOf", !expect.reaches_one_of.is_empty()),
            ("counts", !expect.counts.is_empty()),
            ("sequence", !expect.sequence.is_empty()),
            ("cycle", !expect.cycle.is_empty()),
            ("sameBackend", expect.same_backend),
            ("source", expect.source.is_some()),
            ("reply", expect.reply == Some(true) && !answered),
        ] {
            if set {
                self.err(
                    path.key(field),
                    format!(
                        "`{field}` contradicts `outcome: {}` ({})",
                        outcome_name(expect.outcome),
                        if answered {
                            "the node answers itself; no pod is reached"
                        } else {
                            "nothing is delivered"
                        }
                    ),
                );
            }
        }
    }
}
