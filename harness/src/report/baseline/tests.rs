use super::*;

/// A run `(scenario, proxier, probes as (name, result, verdict), steps as (name, converged))`.
type RunSpec<'a> = (
    &'a str,
    &'a str,
    &'a [(&'a str, &'a str, &'a str)],
    &'a [(&'a str, &'a str)],
);

/// A results document of `runs`.
fn doc(runs: &[RunSpec]) -> String {
    let runs: Vec<serde_json::Value> = runs
        .iter()
        .map(|(s, p, probes, steps)| {
            serde_json::json!({
                "scenario": s, "proxier": p,
                "result": if probes.iter().all(|x| x.1 == "pass") { "pass" } else { "fail" },
                "probes": probes.iter().map(|(n, r, v)| serde_json::json!({
                    "name": n, "result": r, "verdicts": [v], "backends": ["web"],
                })).collect::<Vec<_>>(),
                "steps": steps.iter().map(|(n, c)| serde_json::json!({
                    "name": n, "converged": c, "differences": [],
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    serde_json::json!({ "format": crate::report::json::FORMAT, "runs": runs }).to_string()
}

fn checks(text: &str) -> Checks {
    Checks::from_json(text, "test").unwrap()
}

#[test]
fn only_what_got_worse_fails() {
    let before = checks(&doc(&[(
        "s",
        "p",
        &[
            ("a", "pass", "delivered"),
            ("b", "fail", "dropped"),
            ("c", "fail", "dropped"),
            ("d", "pass", "delivered"),
        ],
        &[("up", "pass")],
    )]));
    let accepted = checks(&doc(&[(
        "s",
        "p",
        &[
            ("a", "pass", "delivered"),
            ("b", "fail", "dropped"),
            ("c", "pass", "delivered"),
            ("d", "pass", "rejected"),
        ],
        &[("up", "pass")],
    )]));
    let c = compare(&before, &accepted);
    assert!(!c.fails(), "{}", c.render());
    let changes: Vec<(String, Change)> = c
        .entries
        .iter()
        .map(|e| (e.key.check.to_string(), e.change))
        .collect();
    assert_eq!(
        changes,
        [
            ("probe `b`".to_string(), Change::StillFailing),
            ("probe `c`".to_string(), Change::Fixed),
            ("probe `d`".to_string(), Change::Changed),
        ]
    );
    assert_eq!(c.unchanged, 2);

    let regressed = checks(&doc(&[(
        "s",
        "p",
        &[
            ("a", "fail", "dropped"),
            ("b", "fail", "dropped"),
            ("e", "fail", "dropped"),
        ],
        &[("up", "fail")],
    )]));
    let c = compare(&before, &regressed);
    assert!(c.fails());
    assert_eq!(c.count(Change::Regressed), 2, "{}", c.render()); // a, and the step
    assert_eq!(c.count(Change::NewFailure), 1); // e: nobody accepted it
    assert_eq!(c.count(Change::Gone), 2); // c, d
    let text = c.render();
    assert!(
        text.contains("s × p\n  REGRESSED: probe `a`\n    was: pass — delivered → web\n    now: fail — dropped → web\n"),
        "{text}"
    );
}

#[test]
fn another_proxier_label_is_another_check() {
    let before = checks(&doc(&[("s", "v1", &[("a", "fail", "dropped")], &[])]));
    let after = checks(&doc(&[("s", "v2", &[("a", "fail", "dropped")], &[])]));
    let c = compare(&before, &after);
    assert_eq!(c.count(Change::NewFailure), 1);
    assert_eq!(c.count(Change::Gone), 1);
}

#[test]
fn a_document_of_another_format_or_none_is_refused_by_name() {
    let e = Checks::from_json("{}", "old.json").unwrap_err().to_string();
    assert!(e.contains("old.json: not a kpct results document"), "{e}");
    let e = Checks::from_json(r#"{"format":"kpct-results/1","runs":[]}"#, "old.json")
        .unwrap_err()
        .to_string();
    assert!(e.contains("format `kpct-results/1`"), "{e}");
}
