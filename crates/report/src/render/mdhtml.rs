//! A small Markdown-to-HTML conversion for the report's extra sections (interpretation,
//! decision): headings, paragraphs, bullet and numbered lists, tables, block quotes, fenced
//! code, and inline `code` and **bold**. Everything is escaped first, so no markup from the
//! text reaches the page.

use std::fmt::Write as _;

use super::format::html_escape;

fn inline(text: &str) -> String {
    let escaped = html_escape(text);
    let mut out = String::with_capacity(escaped.len());
    let mut code = false;
    let mut bold = false;
    let mut rest = escaped.as_str();
    while let Some(c) = rest.chars().next() {
        if c == '`' {
            out.push_str(if code { "</code>" } else { "<code>" });
            code = !code;
            rest = &rest[1..];
        } else if !code && rest.starts_with("**") {
            out.push_str(if bold { "</strong>" } else { "<strong>" });
            bold = !bold;
            rest = &rest[2..];
        } else {
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    if code {
        out.push_str("</code>");
    }
    if bold {
        out.push_str("</strong>");
    }
    out
}

fn table_cells(line: &str) -> Vec<String> {
    let t = line.trim().trim_start_matches('|').trim_end_matches('|');
    t.split('|').map(|c| c.trim().to_owned()).collect()
}

fn is_rule(line: &str) -> bool {
    let t = line.trim();
    t.starts_with('|') && t.chars().all(|c| matches!(c, '|' | '-' | ':' | ' '))
}

enum List {
    None,
    Bullets,
    Numbers,
}

/// Converts a Markdown body to HTML.
pub fn markdown_to_html(md: &str) -> String {
    let mut out = String::new();
    let lines: Vec<&str> = md.lines().collect();
    let mut para: Vec<&str> = Vec::new();
    let mut list = List::None;
    let flush_para = |out: &mut String, para: &mut Vec<&str>| {
        if !para.is_empty() {
            let _ = writeln!(out, "<p>{}</p>", inline(&para.join(" ")));
            para.clear();
        }
    };
    let close_list = |out: &mut String, list: &mut List| {
        match list {
            List::Bullets => out.push_str("</ul>\n"),
            List::Numbers => out.push_str("</ol>\n"),
            List::None => {}
        }
        *list = List::None;
    };
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let t = line.trim();
        if t.starts_with("```") {
            flush_para(&mut out, &mut para);
            close_list(&mut out, &mut list);
            out.push_str("<pre><code>");
            i += 1;
            while i < lines.len() && !lines[i].trim().starts_with("```") {
                out.push_str(&html_escape(lines[i]));
                out.push('\n');
                i += 1;
            }
            out.push_str("</code></pre>\n");
            i += 1;
            continue;
        }
        if t.is_empty() {
            flush_para(&mut out, &mut para);
            close_list(&mut out, &mut list);
        } else if t.starts_with('#') {
            flush_para(&mut out, &mut para);
            close_list(&mut out, &mut list);
            let level = t.chars().take_while(|&c| c == '#').count().min(6);
            // Report sections are h2; headings inside them start at h3.
            let h = (level + 2).min(6);
            let _ = writeln!(out, "<h{h}>{}</h{h}>", inline(t[level..].trim()));
        } else if t.starts_with('|') && lines.get(i + 1).is_some_and(|l| is_rule(l)) {
            flush_para(&mut out, &mut para);
            close_list(&mut out, &mut list);
            out.push_str("<table><thead><tr>");
            for c in table_cells(t) {
                let _ = write!(out, "<th>{}</th>", inline(&c));
            }
            out.push_str("</tr></thead><tbody>\n");
            i += 2;
            while i < lines.len() && lines[i].trim().starts_with('|') {
                out.push_str("<tr>");
                for c in table_cells(lines[i]) {
                    let _ = write!(out, "<td>{}</td>", inline(&c));
                }
                out.push_str("</tr>\n");
                i += 1;
            }
            out.push_str("</tbody></table>\n");
            continue;
        } else if let Some(item) = t.strip_prefix("- ").or_else(|| t.strip_prefix("* ")) {
            flush_para(&mut out, &mut para);
            if !matches!(list, List::Bullets) {
                close_list(&mut out, &mut list);
                out.push_str("<ul>\n");
                list = List::Bullets;
            }
            let _ = writeln!(out, "<li>{}</li>", inline(item));
        } else if let Some(item) = t
            .split_once(". ")
            .filter(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
            .map(|(_, rest)| rest)
        {
            flush_para(&mut out, &mut para);
            if !matches!(list, List::Numbers) {
                close_list(&mut out, &mut list);
                out.push_str("<ol>\n");
                list = List::Numbers;
            }
            let _ = writeln!(out, "<li>{}</li>", inline(item));
        } else if let Some(q) = t.strip_prefix('>') {
            flush_para(&mut out, &mut para);
            close_list(&mut out, &mut list);
            let _ = writeln!(out, "<blockquote>{}</blockquote>", inline(q.trim()));
        } else {
            close_list(&mut out, &mut list);
            para.push(t);
        }
        i += 1;
    }
    flush_para(&mut out, &mut para);
    close_list(&mut out, &mut list);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_and_inline_markup() {
        let html = markdown_to_html(
            "# Diagnosis\n\nThe server is **decode-bound**: see `p99 TPOT`.\nSecond line.\n\n\
             - one\n- two <b>\n\n1. first\n2. second\n\n| a | b |\n|---|--:|\n| 1 | 2 |\n\n\
             > quoted\n\n```\nx < y\n```\n",
        );
        assert!(html.contains("<h3>Diagnosis</h3>"), "{html}");
        assert!(html.contains(
            "<p>The server is <strong>decode-bound</strong>: see <code>p99 TPOT</code>. Second line.</p>"
        ));
        assert!(html.contains("<ul>\n<li>one</li>\n<li>two &lt;b&gt;</li>\n</ul>"));
        assert!(html.contains("<ol>\n<li>first</li>\n<li>second</li>\n</ol>"));
        assert!(html.contains("<th>a</th><th>b</th>"));
        assert!(html.contains("<td>1</td><td>2</td>"));
        assert!(html.contains("<blockquote>quoted</blockquote>"));
        assert!(html.contains("<pre><code>x &lt; y\n</code></pre>"));
    }

    #[test]
    fn unbalanced_markers_are_closed() {
        assert_eq!(markdown_to_html("a `b"), "<p>a <code>b</code></p>\n");
        assert_eq!(markdown_to_html("**x"), "<p><strong>x</strong></p>\n");
    }
}
