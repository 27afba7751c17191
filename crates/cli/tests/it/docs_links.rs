//! The README and the guide hold together: every relative link in README.md and docs/**/*.md
//! names a file that exists and, for an `#anchor` into a Markdown file, a heading of it (by the
//! slug rule GitHub and mdBook share); every page SUMMARY.md lists exists, and every page of
//! docs/ is listed there, so `mdbook build docs` renders them all.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use crate::common::{documentation_files, workspace_root};

/// A heading's anchor as GitHub and mdBook make it: the heading's text (inline code keeps its
/// content, a link its text) lower-cased, letters, digits, `-` and `_` kept, each space turned
/// into `-`, everything else dropped.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading.trim();
    // A link keeps its text: `[text](target)` → `text`.
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](").map(|m| open + m) else {
            break;
        };
        let Some(close) = rest[mid..].find(')').map(|c| mid + c) else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..mid]);
        rest = &rest[close + 1..];
    }
    text.push_str(rest);
    text.chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                Some(c.to_lowercase().collect::<String>())
            } else if c == ' ' {
                Some("-".to_string())
            } else {
                None
            }
        })
        .collect()
}

/// The lines of a Markdown text outside fenced code blocks, with their line numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(f), Some(m)) if f == m && trimmed.trim_end().trim_start_matches(m).is_empty() => {
                fence = None
            }
            (None, None) => out.push((i + 1, line)),
            _ => {}
        }
    }
    out
}

/// The anchors of a Markdown text's headings; a repeated heading gets `-1`, `-2`, ….
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(line[hashes..].trim().trim_end_matches('#'));
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// The link targets of a Markdown text, with line numbers: inline links and images
/// `[text](target)` and reference definitions `[name]: target`, outside code.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in prose_lines(text) {
        // Inline code is no link: drop every code span first.
        let mut prose = String::new();
        for (k, part) in line.split('`').enumerate() {
            if k % 2 == 0 {
                prose.push_str(part);
            }
        }
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            let target = after[..end].split_whitespace().next().unwrap_or("");
            out.push((n, target.trim_matches(['<', '>']).to_string()));
            rest = &after[end..];
        }
        let t = prose.trim_start();
        if t.starts_with('[') {
            if let Some(close) = t.find("]:") {
                let target = t[close + 2..].split_whitespace().next().unwrap_or("");
                out.push((n, target.to_string()));
            }
        }
    }
    out
}

/// `path` with `.` and `..` folded away, without touching the file system.
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// What is wrong with the relative links of the Markdown file `file` (text `text`): a missing
/// file, a missing heading, or (for a guide page) a link out of `docs/`, which the book cannot
/// follow. `read` gives the text of a linked Markdown file, `None` when there is no such file.
fn broken_links(
    file: &Path,
    text: &str,
    docs: &Path,
    read: &dyn Fn(&Path) -> Option<String>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let dir = file.parent().expect("a file has a folder");
    for (n, target) in links(text) {
        if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = target.split_once('#').unwrap_or((target.as_str(), ""));
        let linked = if path.is_empty() {
            file.to_path_buf()
        } else {
            normalise(&dir.join(path))
        };
        let at = format!("{}:{n}: {target}", file.display());
        if file.starts_with(docs) && !linked.starts_with(docs) {
            problems.push(format!(
                "{at}: a guide page links out of docs/ (the book has no such page)"
            ));
            continue;
        }
        if !path.is_empty() && !linked.exists() {
            problems.push(format!("{at}: no such file {}", linked.display()));
            continue;
        }
        if anchor.is_empty() || linked.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let body = if linked == file {
            Some(text.to_string())
        } else {
            read(&linked)
        };
        match body {
            Some(body) if anchors(&body).contains(anchor) => {}
            Some(_) => problems.push(format!(
                "{at}: {} has no heading with the anchor #{anchor}",
                linked.display()
            )),
            None => problems.push(format!("{at}: cannot read {}", linked.display())),
        }
    }
    problems
}

/// The pages SUMMARY.md lists, relative to docs/.
fn summary_pages(summary: &str) -> Vec<String> {
    links(summary)
        .into_iter()
        .map(|(_, t)| t)
        .filter(|t| !t.is_empty() && !t.contains("://"))
        .collect()
}

fn read_md(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok()
}

#[test]
fn slugs_follow_the_rule_github_and_mdbook_share() {
    assert_eq!(
        slug("`servebench run` — one workload, measured exactly"),
        "servebench-run--one-workload-measured-exactly"
    );
    assert_eq!(
        slug("Answer checks: a 200 with garbage in it is not a success"),
        "answer-checks-a-200-with-garbage-in-it-is-not-a-success"
    );
    assert_eq!(slug("3. Step-time model"), "3-step-time-model");
    assert_eq!(
        slug("Clock points (`RequestRecord`)"),
        "clock-points-requestrecord"
    );
    assert_eq!(slug("See [the guide](docs/x.md) now"), "see-the-guide-now");
    let repeated = anchors("# A\n\n## Notes\n\n```sh\n# Notes\n```\n\n## Notes\n");
    let want: BTreeSet<String> = ["a", "notes", "notes-1"].map(String::from).into();
    assert_eq!(repeated, want);
}

#[test]
fn the_checker_finds_a_missing_file_a_missing_heading_and_a_link_out_of_the_book() {
    let docs = normalise(&workspace_root().join("docs"));
    let page = docs.join("page.md");
    let text = "# Page\n\nSee [a](metrics.md#no-such-heading), [b](gone.md), [c](#page), \
                [d](../README.md), `[e](inline-code.md)` and [f](https://example.com/x).\n\n\
                ```sh\n[g](in-a-code-block.md)\n```\n";
    let problems = broken_links(&page, text, &docs, &read_md);
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert!(problems[0].contains("#no-such-heading"), "{problems:#?}");
    assert!(problems[1].contains("no such file"), "{problems:#?}");
    assert!(problems[2].contains("links out of docs/"), "{problems:#?}");
}

#[test]
fn every_relative_link_in_the_readme_and_the_guide_resolves() {
    let docs = normalise(&workspace_root().join("docs"));
    let mut problems = Vec::new();
    let files = documentation_files();
    assert!(files.len() > 10, "{files:?}");
    for file in &files {
        let file = normalise(file);
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        problems.extend(broken_links(&file, &text, &docs, &read_md));
    }
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_summary_lists_every_guide_page_and_only_pages_that_exist() {
    let docs = normalise(&workspace_root().join("docs"));
    let summary = std::fs::read_to_string(docs.join("SUMMARY.md")).expect("docs/SUMMARY.md");
    let listed = summary_pages(&summary);
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for page in &listed {
        if !seen.insert(page.clone()) {
            problems.push(format!("SUMMARY.md lists {page} twice"));
        }
        if !docs.join(page).is_file() {
            problems.push(format!("SUMMARY.md lists {page}, which does not exist"));
        }
    }
    for file in documentation_files().iter().map(|f| normalise(f)) {
        let Ok(page) = file.strip_prefix(&docs) else {
            continue; // README.md
        };
        let page = page.to_string_lossy().replace('\\', "/");
        if page != "SUMMARY.md" && !seen.contains(&page) {
            problems.push(format!("docs/{page} is not in SUMMARY.md"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
