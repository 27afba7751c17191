//! Finding the data files of one subset and split in a local copy of a Hugging Face dataset
//! (a `huggingface-cli download` folder, a `save_to_disk`-free export, or one file).
//!
//! A file belongs to split S when its name is S or starts with `S-`, `S_` or `S.`
//! (`train-00000-of-00001.parquet`, `test.jsonl`), or when a folder on its path is named S
//! (`default/train/0000.parquet`). As on the Hub, when no file names a split, all files are
//! the `train` split. A subset is a folder on the path. Hidden folders (`.cache`, `.git`)
//! are skipped.

use std::path::{Path, PathBuf};

use crate::error::WorkloadError;

/// Extensions of the files read as data.
pub const DATA_EXTENSIONS: &[&str] = &["jsonl", "json", "parquet"];

/// The data files for `subset` and `split` under `root` (just `root` when it is a file),
/// sorted by path.
pub(crate) fn data_files(
    root: &Path,
    subset: Option<&str>,
    split: &str,
) -> Result<Vec<PathBuf>, WorkloadError> {
    if root.is_file() {
        return Ok(vec![root.to_path_buf()]);
    }
    let mut all = Vec::new();
    walk(root, &mut all)?;
    all.sort();
    if all.is_empty() {
        return Err(WorkloadError::Empty {
            path: root.to_path_buf(),
            reason: "no .jsonl, .json or .parquet files in the folder".to_owned(),
        });
    }
    let relative = |p: &PathBuf| p.strip_prefix(root).unwrap_or(p).to_path_buf();
    let in_subset: Vec<PathBuf> = match subset {
        None => all.clone(),
        Some(s) => all
            .iter()
            .filter(|p| folders(&relative(p)).any(|f| f == s))
            .cloned()
            .collect(),
    };
    if in_subset.is_empty() {
        return Err(WorkloadError::Empty {
            path: root.to_path_buf(),
            reason: format!(
                "no data files for --hf-subset {}; the folder holds {}",
                subset.unwrap_or_default(),
                listing(root, &all)
            ),
        });
    }
    let named = |p: &PathBuf| {
        let rel = relative(p);
        let stem_match = rel
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| names_split(n, split));
        stem_match || folders(&rel).any(|f| f == split)
    };
    let in_split: Vec<PathBuf> = in_subset.iter().filter(|p| named(p)).cloned().collect();
    if !in_split.is_empty() {
        return Ok(in_split);
    }
    let any_split_named = in_subset.iter().any(|p| {
        ["train", "test", "validation", "dev", "eval"]
            .iter()
            .any(|s| {
                let rel = relative(p);
                rel.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| names_split(n, s))
                    || folders(&rel).any(|f| f == *s)
            })
    });
    if split == "train" && !any_split_named {
        return Ok(in_subset);
    }
    Err(WorkloadError::Empty {
        path: root.to_path_buf(),
        reason: format!(
            "no data files for split {split}; the folder holds {}",
            listing(root, &in_subset)
        ),
    })
}

fn names_split(file_name: &str, split: &str) -> bool {
    let Some(rest) = file_name.strip_prefix(split) else {
        return false;
    };
    rest.is_empty() || rest.starts_with(['-', '_', '.'])
}

/// The folder names of a relative path (its file name excluded).
fn folders(rel: &Path) -> impl Iterator<Item = &str> {
    rel.parent()
        .into_iter()
        .flat_map(|p| p.components())
        .filter_map(|c| c.as_os_str().to_str())
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), WorkloadError> {
    let entries = std::fs::read_dir(dir).map_err(|e| WorkloadError::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| WorkloadError::io(dir, e))?;
        let path = entry.path();
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        if hidden {
            continue;
        }
        if path.is_dir() {
            walk(&path, out)?;
        } else if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| DATA_EXTENSIONS.contains(&e))
        {
            out.push(path);
        }
    }
    Ok(())
}

fn listing(root: &Path, files: &[PathBuf]) -> String {
    const SHOWN: usize = 8;
    let mut names: Vec<String> = files
        .iter()
        .take(SHOWN)
        .map(|p| p.strip_prefix(root).unwrap_or(p).display().to_string())
        .collect();
    if files.len() > SHOWN {
        names.push(format!("and {} more", files.len() - SHOWN));
    }
    names.join(", ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn tree(files: &[&str]) -> PathBuf {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let root = std::env::temp_dir().join(format!(
            "servebench-hf-files-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        for f in files {
            let p = root.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "").unwrap();
        }
        root
    }

    fn names(root: &Path, files: Vec<PathBuf>) -> Vec<String> {
        files
            .iter()
            .map(|p| p.strip_prefix(root).unwrap().display().to_string())
            .collect()
    }

    #[test]
    fn splits_and_subsets_by_name_and_folder() {
        let root = tree(&[
            "data/train-00000-of-00002.parquet",
            "data/train-00001-of-00002.parquet",
            "data/test-00000-of-00001.parquet",
            "README.md",
            ".cache/huggingface/x.json",
            "en/validation/0000.parquet",
        ]);
        let got = data_files(&root, None, "train").unwrap();
        assert_eq!(
            names(&root, got),
            [
                "data/train-00000-of-00002.parquet",
                "data/train-00001-of-00002.parquet"
            ]
        );
        let got = data_files(&root, Some("en"), "validation").unwrap();
        assert_eq!(names(&root, got), ["en/validation/0000.parquet"]);
        let err = data_files(&root, None, "dev").unwrap_err().to_string();
        assert!(err.contains("no data files for split dev"), "{err}");
        assert!(err.contains("data/test-00000-of-00001.parquet"), "{err}");
        let err = data_files(&root, Some("fr"), "train")
            .unwrap_err()
            .to_string();
        assert!(err.contains("--hf-subset fr"), "{err}");
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn files_without_a_split_name_are_train() {
        let root = tree(&["ShareGPT_V3_unfiltered.json", "extra/more.jsonl"]);
        let got = data_files(&root, None, "train").unwrap();
        assert_eq!(
            names(&root, got),
            ["ShareGPT_V3_unfiltered.json", "extra/more.jsonl"]
        );
        assert!(data_files(&root, None, "test").is_err());
        let single = root.join("ShareGPT_V3_unfiltered.json");
        assert_eq!(data_files(&single, None, "test").unwrap(), vec![single]);
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn an_empty_folder_says_what_it_looked_for() {
        let root = tree(&["README.md"]);
        let err = data_files(&root, None, "train").unwrap_err().to_string();
        assert!(err.contains(".jsonl, .json or .parquet"), "{err}");
        std::fs::remove_dir_all(root).unwrap();
    }
}
