//! A tiny document model — headings, paragraphs, lists, tables, preformatted blocks — and its
//! two renderings: Markdown (CommonMark + GitHub tables) and a standalone HTML page. Every piece
//! of text is escaped for the target format; preformatted text goes into fenced code blocks
//! (Markdown) or `<pre>` (HTML) verbatim apart from that escaping.

use std::fmt::Write as _;

/// A run of inline content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inline {
    Text(String),
    /// Monospace (`code`): names, addresses, rules.
    Code(String),
    Strong(String),
}

pub type Line = Vec<Inline>;

pub fn text(s: impl Into<String>) -> Inline {
    Inline::Text(s.into())
}

pub fn code(s: impl Into<String>) -> Inline {
    Inline::Code(s.into())
}

pub fn strong(s: impl Into<String>) -> Inline {
    Inline::Strong(s.into())
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Block {
    Heading(u8, Line),
    Para(Line),
    List(Vec<Line>),
    Table {
        head: Vec<String>,
        rows: Vec<Vec<Line>>,
    },
    /// Preformatted text (an excerpt, an error message).
    Pre(String),
    /// A drawing, in the form each rendering shows.
    Figure(Figure),
}

/// A drawing made by the document's author (see [`super::picture`]): an SVG element for HTML,
/// trusted as it is, and Mermaid source for Markdown, which GitHub and GitLab draw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Figure {
    pub svg: String,
    pub mermaid: String,
}

/// Characters XML 1.0 does not allow even escaped (C0 controls other than tab, LF, CR).
fn xml_char_ok(c: char) -> bool {
    !c.is_control() || matches!(c, '\t' | '\n' | '\r') || c as u32 >= 0x80
}

/// Escapes text for XML/HTML content and attribute values; characters XML cannot carry at all
/// (C0 controls such as ESC from a tool's colour codes) become `\u{…}`.
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if xml_char_ok(c) => out.push(c),
            c => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Markdown

/// Where Markdown inline content goes: a table cell (pipes end cells, even in code spans), a
/// one-line context (heading, list item: line breaks become spaces) or a paragraph.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ctx {
    Cell,
    OneLine,
    Para,
}

/// Backslash-escapes the characters CommonMark could read as markup.
fn md_text(s: &str, ctx: Ctx) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '#' | '~' | '&' | '|' => {
                out.push('\\');
                out.push(c);
            }
            '\n' | '\r' if ctx != Ctx::Para => out.push(' '),
            c if !xml_char_ok(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// A code span long enough to hold any backtick run in `s`.
fn md_code(s: &str, ctx: Ctx) -> String {
    let s: String = s
        .chars()
        .map(|c| if matches!(c, '\n' | '\r') { ' ' } else { c })
        .collect();
    let s = if ctx == Ctx::Cell {
        s.replace('|', "\\|")
    } else {
        s
    };
    let fence = "`".repeat(longest_run(&s, '`') + 1);
    let pad = if s.starts_with('`') || s.ends_with('`') || s.is_empty() {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{s}{pad}{fence}")
}

fn longest_run(s: &str, ch: char) -> usize {
    let (mut best, mut cur) = (0, 0);
    for c in s.chars() {
        cur = if c == ch { cur + 1 } else { 0 };
        best = best.max(cur);
    }
    best
}

fn md_line(line: &Line, ctx: Ctx) -> String {
    let mut out = String::new();
    for (i, part) in line.iter().enumerate() {
        match part {
            Inline::Text(t) => {
                let mut t = md_text(t, ctx);
                // A leading `-`, `+` or `=` could start a list or a setext underline.
                if i == 0 && t.starts_with(['-', '+', '=']) {
                    t.insert(0, '\\');
                }
                out.push_str(&t);
            }
            Inline::Code(c) => out.push_str(&md_code(c, ctx)),
            Inline::Strong(s) => {
                let _ = write!(out, "**{}**", md_text(s, ctx));
            }
        }
    }
    out
}

pub fn to_markdown(blocks: &[Block]) -> String {
    let mut out = String::new();
    for block in blocks {
        match block {
            Block::Heading(level, line) => {
                let _ = writeln!(
                    out,
                    "{} {}\n",
                    "#".repeat(usize::from((*level).clamp(1, 6))),
                    md_line(line, Ctx::OneLine)
                );
            }
            Block::Para(line) => {
                let _ = writeln!(out, "{}\n", md_line(line, Ctx::Para));
            }
            Block::List(items) => {
                for item in items {
                    let _ = writeln!(out, "- {}", md_line(item, Ctx::OneLine));
                }
                out.push('\n');
            }
            Block::Table { head, rows } => {
                let cells = |cells: Vec<String>| format!("| {} |", cells.join(" | "));
                let _ = writeln!(
                    out,
                    "{}",
                    cells(head.iter().map(|h| md_text(h, Ctx::Cell)).collect())
                );
                let _ = writeln!(
                    out,
                    "{}",
                    cells(head.iter().map(|_| "---".into()).collect())
                );
                for row in rows {
                    let _ = writeln!(
                        out,
                        "{}",
                        cells(row.iter().map(|c| md_line(c, Ctx::Cell)).collect())
                    );
                }
                out.push('\n');
            }
            Block::Pre(body) => {
                let fence = "`".repeat(longest_run(body, '`').max(2) + 1);
                let body: String = body
                    .chars()
                    .map(|c| if xml_char_ok(c) { c } else { '\u{fffd}' })
                    .collect();
                let _ = writeln!(
                    out,
                    "{fence}text\n{}\n{fence}\n",
                    body.trim_end_matches('\n')
                );
            }
            Block::Figure(figure) => {
                let fence = "`".repeat(longest_run(&figure.mermaid, '`').max(2) + 1);
                let _ = writeln!(
                    out,
                    "{fence}mermaid\n{}\n{fence}\n",
                    figure.mermaid.trim_end_matches('\n')
                );
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// HTML

const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:72rem;margin:2rem auto;\
padding:0 1rem;line-height:1.4}table{border-collapse:collapse;margin:.5rem 0}\
th,td{border:1px solid #ccc;padding:.2rem .5rem;text-align:left;vertical-align:top}\
pre{background:#f6f8fa;padding:.6rem;white-space:pre-wrap;overflow-wrap:anywhere}code{font-family:ui-monospace,monospace}\
figure{margin:.5rem 0;overflow-x:auto}";

fn html_line(line: &Line) -> String {
    let mut out = String::new();
    for part in line {
        match part {
            Inline::Text(t) => out.push_str(&xml_escape(t)),
            Inline::Code(c) => {
                let _ = write!(out, "<code>{}</code>", xml_escape(c));
            }
            Inline::Strong(s) => {
                let _ = write!(out, "<strong>{}</strong>", xml_escape(s));
            }
        }
    }
    out
}

/// A standalone, well-formed (XML-parsable) HTML5 page.
pub fn to_html(title: &str, blocks: &[Block]) -> String {
    let mut out =
        String::from("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n");
    let _ = writeln!(out, "<title>{}</title>", xml_escape(title));
    let _ = writeln!(out, "<style>{STYLE}</style>\n</head>\n<body>");
    for block in blocks {
        match block {
            Block::Heading(level, line) => {
                let l = (*level).clamp(1, 6);
                let _ = writeln!(out, "<h{l}>{}</h{l}>", html_line(line));
            }
            Block::Para(line) => {
                let _ = writeln!(out, "<p>{}</p>", html_line(line));
            }
            Block::List(items) => {
                out.push_str("<ul>\n");
                for item in items {
                    let _ = writeln!(out, "<li>{}</li>", html_line(item));
                }
                out.push_str("</ul>\n");
            }
            Block::Table { head, rows } => {
                out.push_str("<table>\n<thead><tr>");
                for h in head {
                    let _ = write!(out, "<th>{}</th>", xml_escape(h));
                }
                out.push_str("</tr></thead>\n<tbody>\n");
                for row in rows {
                    out.push_str("<tr>");
                    for cell in row {
                        let _ = write!(out, "<td>{}</td>", html_line(cell));
                    }
                    out.push_str("</tr>\n");
                }
                out.push_str("</tbody>\n</table>\n");
            }
            Block::Pre(body) => {
                let _ = writeln!(
                    out,
                    "<pre><code>{}</code></pre>",
                    xml_escape(body.trim_end_matches('\n'))
                );
            }
            Block::Figure(figure) => {
                let _ = writeln!(out, "<figure>{}</figure>", figure.svg);
            }
        }
    }
    out.push_str("</body>\n</html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_html_and_xml_invalid_characters() {
        assert_eq!(
            xml_escape("<a href=\"x\">'&'</a>\u{1b}[31m"),
            "&lt;a href=&quot;x&quot;&gt;&apos;&amp;&apos;&lt;/a&gt;\\u{1b}[31m"
        );
        let page = to_html(
            "t<",
            &[Block::Para(vec![text("a<b"), code("x&y"), strong("\"q\"")])],
        );
        assert!(page.contains("<title>t&lt;</title>"));
        assert!(page.contains("<p>a&lt;b<code>x&amp;y</code><strong>&quot;q&quot;</strong></p>"));
    }

    #[test]
    fn markdown_escapes_markup_and_fences_code() {
        let md = to_markdown(&[
            Block::Para(vec![text("-x *y* [z] a|b")]),
            Block::Table {
                head: vec!["h|1".into()],
                rows: vec![vec![vec![code("a|b `c`")]]],
            },
            Block::Pre("```\ninner\n".into()),
            Block::List(vec![vec![code("x|y"), text("two\nlines")]]),
        ]);
        assert!(
            md.contains("- `x|y`two lines\n"),
            "pipes stay as they are outside tables: {md}"
        );
        assert!(md.contains("\\-x \\*y\\* \\[z\\] a\\|b"), "{md}");
        assert!(md.contains("| h\\|1 |"), "{md}");
        assert!(md.contains("| `` a\\|b `c` `` |"), "{md}");
        assert!(md.contains("````text\n```\ninner\n````\n"), "{md}");
    }
}
