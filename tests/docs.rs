//! The one file map, checked: every path `ARCHITECTURE.md` names exists, and every file of
//! `actors/src` is named in it (a moved or new file must be put on the map).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `code span` of the text that reads as a path: has a `/` or ends in a file extension.
fn paths(text: &str) -> BTreeSet<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|span| {
            !span.contains(' ')
                && !span.starts_with('/')
                && !span.contains("::")
                && (span.contains('/')
                    || [".rs", ".md", ".toml", ".yml", ".json"]
                        .iter()
                        .any(|e| span.ends_with(e)))
        })
        .map(str::to_string)
        .collect()
}

/// A path exists from the repository's root, or from `actors/src` (where the map's short
/// paths such as `rules/outcome.rs` start).
fn exists(path: &str) -> bool {
    let path = path.trim_end_matches('/');
    root().join(path).exists() || root().join("actors/src").join(path).exists()
}

#[test]
fn every_path_the_map_names_exists() {
    let map = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let named = paths(&map);
    assert!(
        named.contains("actors/src/rules/outcome.rs"),
        "the scan sees the map"
    );
    let missing: Vec<&String> = named.iter().filter(|p| !exists(p)).collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );
}

#[test]
fn every_file_of_the_runtime_is_on_the_map() {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, found);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    let map = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let named = paths(&map);
    let mut files = Vec::new();
    walk(&root().join("actors/src"), &mut files);
    let unnamed: Vec<String> = files
        .iter()
        .map(|f| {
            f.strip_prefix(root())
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/")
        })
        .filter(|f| {
            let short = f.trim_start_matches("actors/src/");
            // The pipeline tests are named as a folder; facades by their folder.
            !f.starts_with("actors/src/tests/")
                && !named.contains(f.as_str())
                && !named.contains(short)
                && !named.contains(&format!("{}/", f.trim_end_matches(".rs")))
        })
        .collect();
    assert!(
        unnamed.is_empty(),
        "files of actors/src not on ARCHITECTURE.md's map: {unnamed:?}"
    );
}
