//! A small document model, so one report is written as Markdown and as HTML without saying
//! everything twice.

use std::fmt::Write;

#[derive(Clone, Debug, PartialEq)]
pub enum Block {
    Heading(u8, String),
    /// Text with `**bold**`, `*emphasis*` and `` `code` ``.
    Paragraph(String),
    List(Vec<String>),
    /// Header and rows.
    Table(Vec<String>, Vec<Vec<String>>),
    /// Path and description.
    Image(String, String),
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Document(pub Vec<Block>);

impl Document {
    pub fn push(&mut self, block: Block) {
        self.0.push(block);
    }

    pub fn markdown(&self) -> String {
        let mut out = String::new();
        for block in &self.0 {
            match block {
                Block::Heading(level, text) => {
                    let _ = writeln!(out, "{} {text}\n", "#".repeat(*level as usize));
                }
                Block::Paragraph(text) => {
                    let _ = writeln!(out, "{text}\n");
                }
                Block::List(items) => {
                    for item in items {
                        let _ = writeln!(out, "- {item}");
                    }
                    out.push('\n');
                }
                Block::Table(header, rows) => {
                    let cell = |c: &String| c.replace('|', "\\|");
                    let line = |cells: &[String]| {
                        format!(
                            "| {} |",
                            cells.iter().map(cell).collect::<Vec<_>>().join(" | ")
                        )
                    };
                    let _ = writeln!(out, "{}", line(header));
                    let _ = writeln!(out, "|{}", "---|".repeat(header.len()));
                    for row in rows {
                        let _ = writeln!(out, "{}", line(row));
                    }
                    out.push('\n');
                }
                Block::Image(path, alt) => {
                    let _ = writeln!(out, "![{alt}]({path})\n");
                }
            }
        }
        out
    }

    pub fn html(&self) -> String {
        let mut out = String::from(
            "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Cloak audit</title>\n\
             <style>body{font-family:sans-serif;max-width:80em;margin:2em auto;padding:0 1em;\
             line-height:1.4}table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid \
             #ccc;padding:.3em .6em;text-align:left;vertical-align:top}th{background:#f3f3f3}\
             code{background:#f3f3f3;padding:0 .2em}img{max-width:100%}</style></head><body>\n",
        );
        for block in &self.0 {
            match block {
                Block::Heading(level, text) => {
                    let _ = writeln!(out, "<h{level}>{}</h{level}>", inline(text));
                }
                Block::Paragraph(text) => {
                    let _ = writeln!(out, "<p>{}</p>", inline(text));
                }
                Block::List(items) => {
                    out.push_str("<ul>\n");
                    for item in items {
                        let _ = writeln!(out, "<li>{}</li>", inline(item));
                    }
                    out.push_str("</ul>\n");
                }
                Block::Table(header, rows) => {
                    out.push_str("<table>\n<tr>");
                    for h in header {
                        let _ = write!(out, "<th>{}</th>", inline(h));
                    }
                    out.push_str("</tr>\n");
                    for row in rows {
                        out.push_str("<tr>");
                        for c in row {
                            let _ = write!(out, "<td>{}</td>", inline(c));
                        }
                        out.push_str("</tr>\n");
                    }
                    out.push_str("</table>\n");
                }
                Block::Image(path, alt) => {
                    let _ = writeln!(
                        out,
                        "<p><img src=\"{}\" alt=\"{}\"></p>",
                        escape(path),
                        escape(alt)
                    );
                }
            }
        }
        out.push_str("</body></html>\n");
        out
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Escapes `text` and turns `` `code` ``, `**bold**` and `*emphasis*` into tags.
fn inline(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while !rest.is_empty() {
        let markers = [("`", "code"), ("**", "strong"), ("*", "em")];
        let next = markers
            .iter()
            .filter_map(|(m, tag)| {
                let start = rest.find(m)?;
                let end = rest[start + m.len()..].find(m)? + start + m.len();
                Some((start, end, *m, *tag))
            })
            .min_by_key(|(start, _, m, _)| (*start, usize::MAX - m.len()));
        match next {
            Some((start, end, marker, tag)) => {
                out.push_str(&escape(&rest[..start]));
                let inner = &rest[start + marker.len()..end];
                let inner = if tag == "code" {
                    escape(inner)
                } else {
                    inline(inner)
                };
                let _ = write!(out, "<{tag}>{inner}</{tag}>");
                rest = &rest[end + marker.len()..];
            }
            None => {
                out.push_str(&escape(rest));
                rest = "";
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Document {
        Document(vec![
            Block::Heading(2, "`cloak`".into()),
            Block::Paragraph("**A** = `one-key` & *B* < 1".into()),
            Block::Table(
                vec!["x".into(), "y|z".into()],
                vec![vec!["1".into(), "a|b".into()]],
            ),
            Block::List(vec!["item".into()]),
            Block::Image("p.png".into(), "plot".into()),
        ])
    }

    #[test]
    fn writes_markdown() {
        let md = sample().markdown();
        assert!(md.contains("## `cloak`\n"));
        assert!(md.contains("| x | y\\|z |\n|---|---|\n| 1 | a\\|b |\n"));
        assert!(md.contains("- item\n"));
        assert!(md.contains("![plot](p.png)"));
    }

    #[test]
    fn writes_escaped_html() {
        let html = sample().html();
        assert!(html.contains("<h2><code>cloak</code></h2>"));
        assert!(
            html.contains(
                "<p><strong>A</strong> = <code>one-key</code> &amp; <em>B</em> &lt; 1</p>"
            )
        );
        assert!(html.contains("<tr><td>1</td><td>a|b</td></tr>"));
        assert!(html.contains("<img src=\"p.png\" alt=\"plot\">"));
        assert!(html.ends_with("</body></html>\n"));
    }
}
