//! Label selectors, parsed and matched as apimachinery's pkg/labels/selector.go `Parse`
//! does: the same grammar, accepted oddities (`x in (a,,b)`, `k=` meaning an empty value)
//! and error texts.

mod lexer;

use lexer::{lex, Token};
use serde_json::{Map, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    In,
    NotIn,
    Equals,
    NotEquals,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
    /// Sorted, without duplicates (a sets.String in Go).
    values: Vec<String>,
}

/// A parsed label selector; empty matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector(Vec<Requirement>);

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn peek_value(&self) -> Token {
        self.tokens
            .get(self.pos)
            .cloned()
            .unwrap_or(Token::End)
            .into_value()
    }
    fn next_raw(&mut self) -> Token {
        let t = self.tokens.get(self.pos).cloned().unwrap_or(Token::End);
        self.pos += 1;
        t
    }
    fn next_value(&mut self) -> Token {
        self.next_raw().into_value()
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut reqs = Vec::new();
        loop {
            match self.peek_value() {
                Token::Identifier(_) | Token::Not => {
                    let r = self
                        .requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    reqs.push(r);
                    match self.next_value() {
                        Token::End => return Ok(reqs),
                        Token::Comma => match self.peek_value() {
                            Token::Identifier(_) | Token::Not => {}
                            t => {
                                return Err(format!(
                                    "found '{}', expected: identifier after ','",
                                    t.literal()
                                ))
                            }
                        },
                        t => {
                            return Err(format!(
                                "found '{}', expected: ',' or 'end of string'",
                                t.literal()
                            ))
                        }
                    }
                }
                Token::End => return Ok(reqs),
                t => {
                    return Err(format!(
                        "found '{}', expected: !, identifier, or 'end of string'",
                        t.literal()
                    ))
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let mut op = None;
        let mut tok = self.next_value();
        if tok == Token::Not {
            op = Some(Op::DoesNotExist);
            tok = self.next_value();
        }
        let Token::Identifier(key) = tok else {
            return Err(format!("found '{}', expected: identifier", tok.literal()));
        };
        validate_key(&key)?;
        // `!key` takes no operator: in `!key=value` the `=` is then an unexpected token.
        if op.is_some() || matches!(self.peek_value(), Token::End | Token::Comma) {
            return new_requirement(key, op.unwrap_or(Op::Exists), Vec::new());
        }
        let op = match self.next_raw() {
            Token::In => Op::In,
            Token::Equals | Token::DoubleEquals => Op::Equals,
            Token::Greater => Op::GreaterThan,
            Token::Less => Op::LessThan,
            Token::NotIn => Op::NotIn,
            Token::NotEquals => Op::NotEquals,
            t => {
                return Err(format!(
                    "found '{}', expected: in, notin, =, ==, !=, gt, lt",
                    t.literal()
                ))
            }
        };
        let values = match op {
            Op::In | Op::NotIn => self.values()?,
            _ => self.exact_value()?,
        };
        new_requirement(key, op, values)
    }

    fn values(&mut self) -> Result<Vec<String>, String> {
        let t = self.next_value();
        if t != Token::OpenPar {
            return Err(format!("found '{}' expected: '('", t.literal()));
        }
        match self.peek_value() {
            Token::Identifier(_) | Token::Comma => {
                let list = self.identifiers()?;
                let close = self.next_value();
                if close != Token::ClosedPar {
                    return Err(format!("found '{}', expected: ')'", close.literal()));
                }
                Ok(list)
            }
            Token::ClosedPar => {
                self.next_value();
                Ok(vec![String::new()])
            }
            t => Err(format!(
                "found '{}', expected: ',', ')' or identifier",
                t.literal()
            )),
        }
    }

    fn identifiers(&mut self) -> Result<Vec<String>, String> {
        let mut set = Vec::new();
        loop {
            match self.next_value() {
                Token::Identifier(v) => {
                    set.push(v);
                    match self.peek_value() {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(set),
                        t => return Err(format!("found '{}', expected: ',' or ')'", t.literal())),
                    }
                }
                Token::Comma => {
                    if set.is_empty() {
                        set.push(String::new());
                    }
                    match self.peek_value() {
                        Token::ClosedPar => {
                            set.push(String::new());
                            return Ok(set);
                        }
                        Token::Comma => set.push(String::new()),
                        _ => {}
                    }
                }
                t => {
                    return Err(format!(
                        "found '{}', expected: ',', or identifier",
                        t.literal()
                    ))
                }
            }
        }
    }

    fn exact_value(&mut self) -> Result<Vec<String>, String> {
        if matches!(self.peek_value(), Token::End | Token::Comma) {
            return Ok(vec![String::new()]);
        }
        match self.next_value() {
            Token::Identifier(v) => Ok(vec![v]),
            t => Err(format!("found '{}', expected: identifier", t.literal())),
        }
    }
}

fn new_requirement(key: String, op: Op, mut values: Vec<String>) -> Result<Requirement, String> {
    values.sort();
    values.dedup();
    if matches!(op, Op::GreaterThan | Op::LessThan) {
        for v in &values {
            if v.parse::<i64>().is_err() {
                return Err(format!(
                    "values[0]: Invalid value: {v:?}: for 'Gt', 'Lt' operators, the value must be an integer"
                ));
            }
        }
    }
    for v in &values {
        validate_value(v)?;
    }
    Ok(Requirement { key, op, values })
}

const NAME_RULE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

fn name_ok(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn dns_subdomain_ok(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// content.IsLabelKey: `[prefix/]name`, name at most 63 characters.
fn validate_key(key: &str) -> Result<(), String> {
    let invalid = |why: &str| Err(format!("key: Invalid value: {key:?}: {why}"));
    let name = match key.split('/').collect::<Vec<_>>()[..] {
        [name] => name,
        [prefix, name] => {
            if !dns_subdomain_ok(prefix) {
                return invalid("prefix part must be a valid DNS subdomain");
            }
            name
        }
        _ => return invalid("a valid label key must have at most one '/'"),
    };
    if name.len() > 63 {
        return invalid("name part must be no more than 63 characters");
    }
    if !name_ok(name) {
        return invalid(&format!("name part {NAME_RULE}"));
    }
    Ok(())
}

fn validate_value(value: &str) -> Result<(), String> {
    if value.len() > 63 {
        return Err(format!(
            "values[0]: Invalid value: {value:?}: must be no more than 63 characters"
        ));
    }
    if !value.is_empty() && !name_ok(value) {
        return Err(format!(
            "values[0]: Invalid value: {value:?}: a valid label must be an empty string or {NAME_RULE}"
        ));
    }
    Ok(())
}

impl LabelSelector {
    pub(crate) fn parse(s: &str) -> Result<LabelSelector, String> {
        let mut parser = Parser {
            tokens: lex(s),
            pos: 0,
        };
        let mut reqs = parser.parse()?;
        reqs.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector(reqs))
    }

    pub(crate) fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        self.0.iter().all(|r| {
            let value = labels.and_then(|l| l.get(&r.key)).and_then(Value::as_str);
            let has = |v: &str| r.values.iter().any(|x| x == v);
            match r.op {
                Op::In | Op::Equals => value.is_some_and(has),
                Op::NotIn | Op::NotEquals => !value.is_some_and(has),
                Op::Exists => value.is_some(),
                Op::DoesNotExist => value.is_none(),
                Op::GreaterThan | Op::LessThan => {
                    let (Some(v), Some(bound)) = (
                        value.and_then(|v| v.parse::<i64>().ok()),
                        r.values.first().and_then(|b| b.parse::<i64>().ok()),
                    ) else {
                        return false;
                    };
                    if r.op == Op::GreaterThan {
                        v > bound
                    } else {
                        v < bound
                    }
                }
            }
        })
    }
}

impl LabelSelector {
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn sel(s: &str) -> LabelSelector {
        LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn label_operators_match_as_apimachinery_does() {
        let l = labels(json!({"app": "web", "tier": "front", "n": "5"}));
        let cases = [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app!=db", true),
            ("missing!=x", true),
            ("app in (db, web)", true),
            ("app notin (db,web)", false),
            ("missing notin (a)", true),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("app=web,tier=back", false),
            ("app=web, tier in (front)", true),
            ("n>4", true),
            ("n<5", false),
            ("app in (in)", false),
            ("missing=", false),
        ];
        for (s, want) in cases {
            assert_eq!(sel(s).matches(Some(&l)), want, "{s}");
        }
        assert!(sel("!service.kubernetes.io/service-proxy-name").matches(None));
        let proxied = labels(json!({"service.kubernetes.io/service-proxy-name": "other"}));
        assert!(
            !sel("!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name")
                .matches(Some(&proxied))
        );
    }

    #[test]
    fn malformed_label_selectors_fail_with_apimachinery_texts() {
        let cases = [
            ("app=", None),
            ("x in (a,,b)", None),
            ("x in ()", None),
            ("=web", Some("found '=', expected: !, identifier, or 'end of string'")),
            ("app in web", Some("unable to parse requirement: found 'web' expected: '('")),
            ("app=web,", Some("found '', expected: identifier after ','")),
            ("a b", Some("unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt")),
            ("app=(x", Some("unable to parse requirement: found '(', expected: identifier")),
            ("bad key!", Some("unable to parse requirement")),
            ("-bad=1", Some("key: Invalid value: \"-bad\"")),
            ("a=-x", Some("values[0]: Invalid value: \"-x\"")),
            ("n>x", Some("the value must be an integer")),
            ("!a=b", Some("found '=', expected: ',' or 'end of string'")),
        ];
        for (s, want) in cases {
            match (LabelSelector::parse(s), want) {
                (Ok(_), None) => {}
                (Err(e), Some(w)) => assert!(e.contains(w), "{s}: {e}"),
                (got, _) => panic!("{s}: {got:?}"),
            }
        }
    }
}
