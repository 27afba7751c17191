//! The built-in tokenizer gives exactly tiktoken-rs's `o200k_base` ids, counts and bytes:
//! property tests on random text of several shapes, and the repository's own files
//! (documentation, data fixtures, sources) as a fixed corpus.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use servebench_tokenizer::Tokenizer;

/// Ids past the last ordinary rank are special or unknown: decode skips them.
const ORDINARY: u32 = 199_998;

fn oracle() -> &'static tiktoken_rs::CoreBPE {
    tiktoken_rs::o200k_base_singleton()
}

/// Encode, count and decode of `text` agree with tiktoken-rs.
fn check_text(text: &str) -> Result<(), TestCaseError> {
    let tok = Tokenizer::builtin();
    let expected = oracle().encode_ordinary(text);
    let ids = tok.encode(text);
    prop_assert_eq!(&ids, &expected, "encode of {:?}", text);
    prop_assert_eq!(tok.try_encode(text).unwrap(), expected.clone());
    prop_assert_eq!(tok.count(text), expected.len(), "count of {:?}", text);
    prop_assert_eq!(tok.decode(&ids), text);
    Ok(())
}

/// Fragments that exercise the pattern's corners: contractions in both cases, letter
/// case runs, combining marks, digits, scripts without spaces, emoji, punctuation runs
/// and line breaks.
const FRAGMENTS: &[&str] = &[
    "the",
    " The",
    "HTML",
    "iPhone",
    "'s",
    "'S",
    "'ll",
    "'LL",
    "'ve",
    "'d",
    "'m",
    "'re",
    "'t",
    "don't",
    "WE'RE",
    " ",
    "  ",
    "\t",
    "\n",
    "\r\n",
    "\n\n",
    " \n ",
    "\u{a0}",
    "\u{3000}",
    "0",
    "12",
    "123",
    "1234567",
    "3.14",
    "1,000",
    "٣٤٥",
    "東京",
    "日本語のテキスト",
    "naïve",
    "e\u{301}",
    "Ὀδυσσεύς",
    "Привет",
    "مرحبا",
    "שלום",
    "हिन्दी",
    "한국어",
    "🚀",
    "🎉🎉",
    "👩‍👩‍👧",
    "∑∫",
    "€",
    "...",
    "!!",
    "?!",
    "--",
    "->",
    "=>",
    "::",
    "//",
    "/*",
    "*/",
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    ";",
    ",",
    "\"",
    "'",
    "`",
    "#",
    "@",
    "$",
    "%",
    "^",
    "&",
    "|",
    "\\",
    "<|endoftext|>",
    "<|endofprompt|>",
    "\u{0}",
    "\u{1b}",
    "\u{fffd}",
    "\u{200b}",
];

/// Code-like tokens: identifiers, keywords, operators, indentation and literals.
const CODE: &[&str] = &[
    "fn",
    "let",
    "mut",
    "impl",
    "pub",
    "struct",
    "def",
    "return",
    "if",
    "else",
    "for",
    "in",
    "self",
    "self.x",
    "foo_bar",
    "FooBar",
    "camelCase",
    "snake_case_name",
    "x",
    "i",
    "0",
    "42",
    "0x1f",
    "1e-9",
    "\"str\"",
    "'c'",
    "r#\"raw\"#",
    "(",
    ")",
    "{",
    "}",
    "[",
    "]",
    "<",
    ">",
    "::",
    ".",
    ",",
    ";",
    ":",
    "=",
    "==",
    "!=",
    "+=",
    "->",
    "=>",
    "&&",
    "||",
    "!",
    "?",
    "&",
    "*",
    "/",
    "//",
    "# comment",
    "/* block */",
    " ",
    "  ",
    "    ",
    "\t",
    "\n",
    "\n    ",
    "\n\n",
    "\r\n",
    "std::collections::HashMap",
    "Vec<u32>",
    "println!(\"{}\", x);",
];

fn joined(pool: &'static [&'static str], max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(pool), 0..max).prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn any_unicode(text in any::<String>()) {
        check_text(&text)?;
    }

    #[test]
    fn printable_unicode(text in "\\PC{0,300}") {
        check_text(&text)?;
    }

    #[test]
    fn ascii(text in "[ -~\t\n\r]{0,400}") {
        check_text(&text)?;
    }

    #[test]
    fn whitespace_heavy(text in "[ \t\n\r\u{a0}\u{3000}\u{2028}a.1]{0,300}") {
        check_text(&text)?;
    }

    #[test]
    fn fragments(text in joined(FRAGMENTS, 80)) {
        check_text(&text)?;
    }

    #[test]
    fn code_like(text in joined(CODE, 150)) {
        check_text(&text)?;
    }

    /// Single pieces of 90 to 400 bytes: both of tiktoken's merge paths (under and
    /// over 100 bytes).
    #[test]
    fn long_pieces(word in "[a-zA-Zé]{90,300}", symbols in "[-=+*#~_!?.]{90,300}", spaces in 90usize..400) {
        check_text(&word)?;
        check_text(&symbols)?;
        check_text(&format!("{word}{}x", " ".repeat(spaces)))?;
    }

    /// Decoding any ids (special, unknown and ordinary) gives tiktoken-rs's bytes of the
    /// ordinary ones, invalid UTF-8 replaced.
    #[test]
    fn decode_any_ids(ids in prop::collection::vec(
        prop_oneof![8 => 0u32..ORDINARY, 1 => ORDINARY..200_100, 1 => any::<u32>()],
        0..200,
    )) {
        let ordinary: Vec<u32> = ids.iter().copied().filter(|&id| id < ORDINARY).collect();
        let expected = oracle().decode_bytes(&ordinary).unwrap();
        prop_assert_eq!(
            Tokenizer::builtin().decode(&ids),
            String::from_utf8_lossy(&expected).into_owned()
        );
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
        .to_path_buf()
}

/// Text files under `dir`, skipping hidden directories and build outputs.
fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap().to_string_lossy();
        if name.starts_with('.') || name == "target" {
            continue;
        }
        if path.is_dir() {
            collect(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// The repository's documentation, examples, scripts, data fixtures and sources, each
/// file whole: the same ids as tiktoken-rs.
#[test]
fn repository_corpus() {
    let root = workspace_root();
    let mut files = Vec::new();
    for dir in ["docs", "examples", "scripts", "crates"] {
        collect(&root.join(dir), &mut files);
    }
    for file in ["README.md", "Cargo.toml", "Dockerfile"] {
        files.push(root.join(file));
    }
    let tok = Tokenizer::builtin();
    let (mut checked, mut bytes, mut tokens) = (0, 0, 0);
    for path in files {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue; // binary (parquet, PNG, the vocabulary itself) or absent
        };
        let expected = oracle().encode_ordinary(&text);
        let ids = tok.encode(&text);
        assert!(ids == expected, "{} encodes differently", path.display());
        assert_eq!(tok.count(&text), expected.len(), "{}", path.display());
        assert_eq!(tok.decode(&ids), text, "{}", path.display());
        checked += 1;
        bytes += text.len();
        tokens += ids.len();
    }
    assert!(
        checked > 100,
        "only {checked} files found under {}",
        root.display()
    );
    eprintln!("{checked} files, {bytes} bytes, {tokens} tokens: identical");
}
