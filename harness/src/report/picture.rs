//! A picture of a failing probe's path: one shot of it traced again ([`crate::trace`]), drawn
//! per node as the chains and rules each packet went through, with the hop where it went wrong
//! marked. The report shows it as an inline SVG (HTML) or a Mermaid flowchart (Markdown).
//!
//! Where it went wrong is read from what was violated and what the traced shot did: a drop at
//! the rule that dropped it (or the last hop the packet reached), a wrong backend at the hop
//! that chose it, a wrong source at the hop that rewrote it (or the node's last nat
//! POSTROUTING hop, where a masquerade was missing), a wrong reply at the last hop of the reply.

use super::markup::{xml_escape, Figure};
use crate::document::Verdict;
use crate::trace::Trace;
use std::fmt::Write as _;

/// The traced path of one shot, node by node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Picture {
    /// What the traced shot did, as the report sums up a probe (`dropped`, `delivered →
    /// web-1`).
    pub outcome: String,
    pub lanes: Vec<Lane>,
    pub mark: Option<Mark>,
}

/// One node: the packets of the shot it saw, in the order it first saw them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lane {
    pub node: String,
    pub packets: Vec<Packet>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// The packet as it entered the node's first hook (interfaces, addresses, ports, flags).
    pub seen: String,
    /// The chains it entered and the rules' actions, in order.
    pub hops: Vec<String>,
}

/// The hop where the probe went wrong, and why it is that one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    pub lane: usize,
    pub packet: usize,
    pub hop: usize,
    pub why: String,
}

/// What a probe's violations are about (the first one decides).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wrong {
    Outcome,
    Backend,
    Source,
    Reply,
}

impl Wrong {
    /// From the violation texts of [`crate::expectation_check`].
    fn of(violations: &[String]) -> Option<Wrong> {
        violations.iter().find_map(|v| {
            if v.contains("expected outcome") {
                Some(Wrong::Outcome)
            } else if v.contains("expected delivery to")
                || v.contains("to be reached")
                || v.contains("shot(s)")
                || v.contains("sequence")
            {
                Some(Wrong::Backend)
            } else if v.contains("expected source") {
                Some(Wrong::Source)
            } else if v.contains("a reply from the address") {
                Some(Wrong::Reply)
            } else {
                None
            }
        })
    }
}

impl Picture {
    /// The picture of `trace`, marked where the probe's `violations` say it went wrong.
    pub fn from_trace(trace: &Trace, violations: &[String]) -> Picture {
        let lanes: Vec<Lane> = trace
            .nodes
            .iter()
            .map(|n| Lane {
                node: n.node.clone(),
                packets: n
                    .paths()
                    .into_iter()
                    .map(|p| Packet {
                        seen: p.first_seen,
                        hops: p.hops,
                    })
                    .collect(),
            })
            .collect();
        let verdicts: Vec<Verdict> = super::shots(&trace.observation)
            .iter()
            .map(|s| s.verdict)
            .collect();
        let mark = mark(&lanes, Wrong::of(violations), &verdicts);
        Picture {
            outcome: super::outcome_summary(&trace.observation),
            lanes,
            mark,
        }
    }

    /// As the report's figure: SVG for HTML, Mermaid for Markdown.
    pub fn figure(&self) -> Figure {
        Figure {
            svg: self.svg(),
            mermaid: self.mermaid(),
        }
    }

    fn is_marked(&self, lane: usize, packet: usize, hop: usize) -> bool {
        self.mark
            .as_ref()
            .is_some_and(|m| (m.lane, m.packet, m.hop) == (lane, packet, hop))
    }

    /// A Mermaid flowchart: a subgraph per node, a chain of hops per packet, the marked hop
    /// styled and labelled.
    pub fn mermaid(&self) -> String {
        let mut out = String::from("flowchart TB\n");
        for (l, lane) in self.lanes.iter().enumerate() {
            let _ = writeln!(out, "  subgraph lane{l}[\"{}\"]", mermaid_text(&lane.node));
            if lane.packets.is_empty() {
                let _ = writeln!(out, "    lane{l}none[\"no packet of the shot\"]");
            }
            for (p, packet) in lane.packets.iter().enumerate() {
                let head = format!("l{l}p{p}");
                let _ = writeln!(
                    out,
                    "    {head}([\"packet {}: {}\"])",
                    p + 1,
                    mermaid_text(&packet.seen)
                );
                let mut previous = head;
                for (h, hop) in packet.hops.iter().enumerate() {
                    let id = format!("l{l}p{p}h{h}");
                    let label = match &self.mark {
                        Some(m) if self.is_marked(l, p, h) => {
                            format!("✗ {}<br/>{}", mermaid_text(hop), mermaid_text(&m.why))
                        }
                        _ => mermaid_text(hop),
                    };
                    let _ = writeln!(out, "    {id}[\"{label}\"]");
                    let _ = writeln!(out, "    {previous} --> {id}");
                    previous = id;
                }
            }
            out.push_str("  end\n");
        }
        if let Some(m) = &self.mark {
            let _ = writeln!(
                out,
                "  style l{}p{}h{} fill:#ffe0e0,stroke:#d00000,stroke-width:3px",
                m.lane, m.packet, m.hop
            );
        }
        out
    }

    /// An SVG drawing: nodes side by side, each packet a column of hop boxes joined by arrows,
    /// the marked hop red with the reason under it. Laid out here, so it is the same on every
    /// machine and needs no script or font metrics beyond a monospace font.
    pub fn svg(&self) -> String {
        let mut body = String::new();
        let mut x = MARGIN;
        let mut height = 0;
        for (l, lane) in self.lanes.iter().enumerate() {
            let columns = lane.packets.len().max(1);
            let width = columns * BOX_W + (columns - 1) * COLUMN_GAP + 2 * LANE_PAD;
            let mut lane_body = String::new();
            let mut bottom = MARGIN + LANE_TITLE;
            if lane.packets.is_empty() {
                text_lines(
                    &mut lane_body,
                    x + LANE_PAD,
                    bottom + LINE_H,
                    &["no packet of the shot".to_string()],
                    "#555",
                );
                bottom += 2 * LINE_H;
            }
            for (p, packet) in lane.packets.iter().enumerate() {
                let cx = x + LANE_PAD + p * (BOX_W + COLUMN_GAP);
                let mut y = MARGIN + LANE_TITLE;
                let head = wrap(&format!("packet {}: {}", p + 1, packet.seen));
                text_lines(&mut lane_body, cx, y + LINE_H, &head, "#333");
                y += head.len() * LINE_H + BOX_PAD;
                for (h, hop) in packet.hops.iter().enumerate() {
                    if h > 0 || !head.is_empty() {
                        let _ = write!(
                            lane_body,
                            "<line x1=\"{mid}\" y1=\"{y}\" x2=\"{mid}\" y2=\"{}\" stroke=\"#555\" \
                             marker-end=\"url(#arrow)\"/>",
                            y + ARROW - 2,
                            mid = cx + BOX_W / 2,
                        );
                        y += ARROW;
                    }
                    let lines = wrap(hop);
                    let marked = self.is_marked(l, p, h);
                    let box_h = lines.len() * LINE_H + 2 * BOX_PAD;
                    let (fill, stroke, stroke_w) = if marked {
                        (MARK_FILL, MARK_STROKE, 3)
                    } else {
                        ("#ffffff", "#888888", 1)
                    };
                    let _ = write!(
                        lane_body,
                        "<rect x=\"{cx}\" y=\"{y}\" width=\"{BOX_W}\" height=\"{box_h}\" rx=\"4\" \
                         fill=\"{fill}\" stroke=\"{stroke}\" stroke-width=\"{stroke_w}\"/>"
                    );
                    text_lines(
                        &mut lane_body,
                        cx + BOX_PAD,
                        y + BOX_PAD + LINE_H - 3,
                        &lines,
                        "#000",
                    );
                    y += box_h;
                    if let (true, Some(m)) = (marked, &self.mark) {
                        let why = wrap(&format!("✗ {}", m.why));
                        text_lines(&mut lane_body, cx, y + LINE_H, &why, MARK_STROKE);
                        y += why.len() * LINE_H + BOX_PAD;
                    }
                }
                bottom = bottom.max(y);
            }
            let lane_h = bottom - MARGIN + LANE_PAD;
            let _ = write!(
                body,
                "<g><rect x=\"{x}\" y=\"{MARGIN}\" width=\"{width}\" height=\"{lane_h}\" \
                 fill=\"#f6f8fa\" stroke=\"#cccccc\"/>"
            );
            text_lines(
                &mut body,
                x + LANE_PAD,
                MARGIN + LINE_H + 2,
                &[format!("node {}", lane.node)],
                "#000",
            );
            body.push_str(&lane_body);
            body.push_str("</g>");
            x += width + LANE_GAP;
            height = height.max(MARGIN + lane_h + MARGIN);
        }
        let width = x.saturating_sub(LANE_GAP) + MARGIN;
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
             viewBox=\"0 0 {width} {height}\" font-family=\"ui-monospace,monospace\" \
             font-size=\"11\" role=\"img\"><title>{}</title>\
             <defs><marker id=\"arrow\" markerWidth=\"8\" markerHeight=\"8\" refX=\"7\" refY=\"4\" \
             orient=\"auto\"><path d=\"M0,0 L8,4 L0,8 z\" fill=\"#555\"/></marker></defs>\
             {body}</svg>",
            xml_escape(&format!("traced path: {}", self.outcome))
        )
    }
}

/// The colours of the marked hop (the browser test looks for the stroke).
pub const MARK_STROKE: &str = "#d00000";
const MARK_FILL: &str = "#ffe0e0";
const MARGIN: usize = 8;
const LANE_PAD: usize = 10;
const LANE_TITLE: usize = 24;
const LANE_GAP: usize = 24;
const COLUMN_GAP: usize = 20;
const BOX_W: usize = 290;
const BOX_PAD: usize = 5;
const LINE_H: usize = 14;
const ARROW: usize = 16;
/// Characters per line in a box: 11 px monospace is ~6.6 px a character.
const WRAP: usize = 42;

/// `text` in lines of at most [`WRAP`] characters, broken at spaces where it can be.
fn wrap(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let mut word: Vec<char> = word.chars().collect();
        while word.len() > WRAP {
            if !line.is_empty() {
                lines.push(std::mem::take(&mut line));
            }
            lines.push(word.drain(..WRAP).collect());
        }
        let word: String = word.into_iter().collect();
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > WRAP {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

fn text_lines(out: &mut String, x: usize, y: usize, lines: &[String], colour: &str) {
    let _ = write!(out, "<text x=\"{x}\" y=\"{y}\" fill=\"{colour}\">");
    for (i, line) in lines.iter().enumerate() {
        let dy = if i == 0 { 0 } else { LINE_H };
        let _ = write!(
            out,
            "<tspan x=\"{x}\" dy=\"{dy}\">{}</tspan>",
            xml_escape(line)
        );
    }
    out.push_str("</text>");
}

/// Text for a quoted Mermaid label: quotes and markup characters as entity codes.
fn mermaid_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("#quot;"),
            '<' => out.push_str("#lt;"),
            '>' => out.push_str("#gt;"),
            '#' => out.push_str("#35;"),
            '\n' | '\r' => out.push(' '),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

fn is_drop(hop: &str) -> bool {
    ["[DROP", "[drop", "[REJECT", "[reject"]
        .iter()
        .any(|a| hop.contains(a))
}

fn is_translation(hop: &str) -> bool {
    hop.contains("[DNAT") || hop.contains("[dnat to") || hop.starts_with("IPVS ")
}

fn is_source_rewrite(hop: &str) -> bool {
    ["[MASQUERADE", "[masquerade", "[SNAT", "[snat to"]
        .iter()
        .any(|a| hop.contains(a))
}

/// The first hop (lane, packet 0 only when `request`, hop) matching `f`, in lane order.
fn find(lanes: &[Lane], request: bool, f: impl Fn(&str) -> bool) -> Option<(usize, usize, usize)> {
    lanes.iter().enumerate().find_map(|(l, lane)| {
        let packets = if request {
            &lane.packets[..lane.packets.len().min(1)]
        } else {
            &lane.packets[..]
        };
        packets
            .iter()
            .enumerate()
            .find_map(|(p, packet)| packet.hops.iter().position(|h| f(h)).map(|h| (l, p, h)))
    })
}

/// The lane where the request was translated (DNAT or IPVS), else the first that saw it.
fn translating_lane(lanes: &[Lane]) -> Option<usize> {
    find(lanes, true, is_translation)
        .map(|(l, _, _)| l)
        .or_else(|| lanes.iter().position(|l| !l.packets.is_empty()))
}

/// The last hop of the request on the last node it reached: a lane after the translating one
/// in the path (any other lane that saw it), else the translating lane.
fn last_seen(lanes: &[Lane]) -> Option<(usize, usize, usize)> {
    let entry = translating_lane(lanes)?;
    let lane = lanes
        .iter()
        .enumerate()
        .rev()
        .find(|(l, lane)| *l != entry && lane.packets.first().is_some_and(|p| !p.hops.is_empty()))
        .map_or(entry, |(l, _)| l);
    let hops = lanes[lane].packets.first()?.hops.len();
    (hops > 0).then(|| (lane, 0, hops - 1))
}

fn mark(lanes: &[Lane], wrong: Option<Wrong>, verdicts: &[Verdict]) -> Option<Mark> {
    let at = |(lane, packet, hop): (usize, usize, usize), why: &str| Mark {
        lane,
        packet,
        hop,
        why: why.to_string(),
    };
    let delivered = verdicts.iter().any(|v| v.delivered());
    let dropped_or_rejected = verdicts
        .iter()
        .any(|v| matches!(v, Verdict::Dropped | Verdict::Rejected));
    let last = || last_seen(lanes).map(|p| at(p, "the last hop the packet reached"));
    match wrong.unwrap_or(Wrong::Outcome) {
        Wrong::Outcome if dropped_or_rejected => find(lanes, false, is_drop)
            .map(|p| at(p, "dropped or rejected here"))
            .or_else(last),
        Wrong::Outcome if delivered => find(lanes, true, is_translation)
            .map(|p| {
                at(
                    p,
                    "translated and sent on here, though no delivery was expected",
                )
            })
            .or_else(last),
        Wrong::Outcome => last(),
        Wrong::Backend => find(lanes, true, is_translation)
            .map(|p| at(p, "the backend was chosen here"))
            .or_else(last),
        Wrong::Source => find(lanes, true, is_source_rewrite)
            .map(|p| at(p, "the source was rewritten here"))
            .or_else(|| {
                let lane = translating_lane(lanes)?;
                let hops = &lanes[lane].packets.first()?.hops;
                let hop = hops.iter().rposition(|h| h.ends_with(":POSTROUTING"))?;
                Some(at(
                    (lane, 0, hop),
                    "the request left here with its source as it was",
                ))
            })
            .or_else(last),
        Wrong::Reply => {
            // The reply is the packet addressed to the request's source, on any node.
            let request = lanes.iter().find_map(|l| l.packets.first())?;
            let client = field(&request.seen, "SRC=")?;
            lanes.iter().enumerate().find_map(|(l, lane)| {
                let (p, reply) = lane
                    .packets
                    .iter()
                    .enumerate()
                    .find(|(_, p)| field(&p.seen, "DST=") == Some(client))?;
                let hop = reply.hops.len().checked_sub(1)?;
                Some(at((l, p, hop), "the reply left here as it was answered"))
            })
        }
    }
}

/// The value of `KEY=` in a packet summary.
fn field<'a>(seen: &'a str, key: &str) -> Option<&'a str> {
    seen.split_whitespace().find_map(|f| f.strip_prefix(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lane whose first packet is the request and any second one its reply.
    fn lane(node: &str, packets: &[&[&str]]) -> Lane {
        let seen = [
            "IN=eth0 SRC=192.168.1.100 DST=10.96.0.10 SPORT=20000 DPORT=80 SYN",
            "IN=flannel.1 SRC=10.244.2.20 DST=192.168.1.100 SPORT=8080 DPORT=20000 SYN ACK",
        ];
        Lane {
            node: node.into(),
            packets: packets
                .iter()
                .zip(seen)
                .map(|(hops, seen)| Packet {
                    seen: seen.into(),
                    hops: hops.iter().map(|h| h.to_string()).collect(),
                })
                .collect(),
        }
    }

    fn request_to_node_b() -> Vec<Lane> {
        vec![
            lane(
                "node-a",
                &[
                    &[
                        "nat:PREROUTING",
                        "nat:KUBE-SERVICES",
                        "nat:KUBE-SEP-X [DNAT --to-destination 10.244.2.20:8080]",
                        "filter:FORWARD",
                        "nat:POSTROUTING",
                    ],
                    &["filter:FORWARD", "nat:POSTROUTING"],
                ],
            ),
            lane("node-b", &[&["raw:PREROUTING", "filter:FORWARD"]]),
            lane("node-c", &[]),
        ]
    }

    fn marked(lanes: &[Lane], violation: &str, verdict: Verdict) -> Option<(usize, usize, usize)> {
        mark(lanes, Wrong::of(&[violation.to_string()]), &[verdict])
            .map(|m| (m.lane, m.packet, m.hop))
    }

    #[test]
    fn each_kind_of_violation_marks_its_hop() {
        let lanes = request_to_node_b();
        assert_eq!(
            marked(
                &lanes,
                "probe `p`: expected source preserved (client 1.2.3.4), observed masqueraded",
                Verdict::Delivered
            ),
            Some((0, 0, 4)),
            "no masquerade: the request's last POSTROUTING on the translating node"
        );
        assert_eq!(
            marked(
                &lanes,
                "probe `p`: expected delivery to one of [web-1], observed delivered at web-2",
                Verdict::Delivered
            ),
            Some((0, 0, 2))
        );
        assert_eq!(
            marked(
                &lanes,
                "probe `p`: expected outcome delivered, observed dropped",
                Verdict::Dropped
            ),
            Some((1, 0, 1)),
            "no rule dropped it: the last hop it reached, on the node after the translating one"
        );
        assert_eq!(
            marked(
                &lanes,
                "probe `p`: expected outcome dropped, observed delivered at web-1",
                Verdict::Delivered
            ),
            Some((0, 0, 2))
        );
        assert_eq!(
            marked(&lanes, "probe `p`: expected a reply from the address the client used (10.96.0.10:80), observed x", Verdict::DeliveredReplyUntranslated),
            Some((0, 1, 1))
        );
    }

    #[test]
    fn a_drop_rule_is_marked_wherever_it_is() {
        let mut lanes = request_to_node_b();
        lanes[0].packets[0].hops.insert(
            1,
            "filter:KUBE-EXTERNAL-SERVICES [REJECT --reject-with icmp-port-unreachable]".into(),
        );
        assert_eq!(
            marked(
                &lanes,
                "probe `p`: expected outcome delivered, observed rejected",
                Verdict::Rejected
            ),
            Some((0, 0, 1))
        );
        let masqueraded = {
            let mut l = request_to_node_b();
            l[0].packets[0].hops[4] = "nat:KUBE-POSTROUTING [MASQUERADE --random-fully]".into();
            l
        };
        assert_eq!(
            marked(
                &masqueraded,
                "probe `p`: expected source preserved (client 1.2.3.4), observed m",
                Verdict::Delivered
            ),
            Some((0, 0, 4))
        );
        assert_eq!(
            marked(
                &[lane("node-a", &[])],
                "probe `p`: expected outcome delivered, observed dropped",
                Verdict::Dropped
            ),
            None
        );
    }

    #[test]
    fn the_svg_and_the_mermaid_carry_every_hop_and_the_mark() {
        let lanes = request_to_node_b();
        let picture = Picture {
            outcome: "dropped".into(),
            mark: mark(&lanes, Some(Wrong::Outcome), &[Verdict::Dropped]),
            lanes,
        };
        let svg = picture.svg();
        assert!(svg.contains("KUBE-SEP-X [DNAT --to-destination"), "{svg}");
        assert!(
            svg.contains("node node-c") && svg.contains("no packet of the shot"),
            "{svg}"
        );
        assert_eq!(
            svg.matches(MARK_STROKE).count(),
            2,
            "the box and its reason: {svg}"
        );
        assert!(svg.contains("✗ the last hop the packet reached"), "{svg}");
        let mermaid = picture.mermaid();
        assert!(mermaid.starts_with("flowchart TB\n"), "{mermaid}");
        assert!(mermaid.contains("l1p0h0 --> l1p0h1"), "{mermaid}");
        assert!(
            mermaid.contains("style l1p0h1 fill:#ffe0e0,stroke:#d00000"),
            "{mermaid}"
        );
        assert!(
            mermaid.contains("✗ filter:FORWARD<br/>the last hop"),
            "{mermaid}"
        );
    }

    #[test]
    fn labels_are_escaped_and_long_words_wrapped() {
        assert_eq!(
            mermaid_text("a \"b\" <c> #d"),
            "a #quot;b#quot; #lt;c#gt; #35;d"
        );
        let long = "x".repeat(WRAP * 2 + 3);
        let lines = wrap(&format!("short {long}"));
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert!(lines.iter().all(|l| l.chars().count() <= WRAP), "{lines:?}");
        assert_eq!(lines[0], "short");
    }
}
