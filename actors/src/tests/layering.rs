//! The layout's rules, checked: `actors/src` is a folder per role, stacked in [`LAYERS`]; a
//! module imports only from its own layer or the ones below, no two modules import each other
//! (through any path), and no file carries more than [`MAX_LOGIC_LINES`] lines of logic. A
//! module that needs another that needs it back is missing a third (a message type, a trait, a
//! plain struct) below both.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, bottom to top: a folder of `actors/src` (with its facade file beside it) or a
/// file at its root. `lib.rs` is above them all (it only re-exports) and is not scanned.
const LAYERS: &[&str] = &[
    "error",
    "rt",
    "rules",
    "status",
    "source",
    "store",
    "lease",
    "api",
    "pool",
    "transactional",
    "supervisor",
    "replay",
    "testing",
];

/// The most lines of logic (not blank, not a comment, not in the test module) in one file.
const MAX_LOGIC_LINES: usize = 350;

/// One scanned file: its module path (`pool/job`, or `pool` for the facade) and its code.
struct Module {
    path: PathBuf,
    code: String,
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `src`, but `lib.rs`, the pipeline tests (`tests.rs`, `tests/`) and
/// loom models, keyed by module path.
fn modules() -> BTreeMap<String, Module> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("src is readable") {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, found);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    let root = src();
    let mut files = Vec::new();
    walk(&root, &mut files);
    let mut modules = BTreeMap::new();
    for path in files {
        let name = path
            .strip_prefix(&root)
            .unwrap()
            .with_extension("")
            .to_string_lossy()
            .replace('\\', "/");
        if name == "lib"
            || name == "tests"
            || name.starts_with("tests/")
            || name.ends_with("/model")
        {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let code = text[..test_module(&text).unwrap_or(text.len())]
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        modules.insert(name, Module { path, code });
    }
    modules
}

/// Where a file's test module (`mod tests`, private or `pub(crate)` for test hooks) begins.
fn test_module(text: &str) -> Option<usize> {
    [
        "#[cfg(test)]\nmod tests {",
        "#[cfg(test)]\npub(crate) mod tests {",
    ]
    .iter()
    .filter_map(|start| text.find(start))
    .min()
}

/// The layer a module path belongs to: its folder, or the root file it is.
fn layer(module: &str) -> &str {
    module.split('/').next().unwrap()
}

/// The modules `code` names through `crate::…`: `crate::pool::job::Job` names `pool/job`,
/// `crate::store::Claim` names the facade `store`, and `use crate::{a::x, b::y}` names both.
fn named(code: &str, known: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let paths: Vec<&str> = if rest.starts_with('{') {
            rest[1..rest.find('}').unwrap_or(rest.len())]
                .split(',')
                .map(str::trim)
                .collect()
        } else {
            vec![rest]
        };
        for path in paths {
            let words: Vec<&str> = path
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .next()
                .unwrap_or_default()
                .split("::")
                .collect();
            let nested = words.iter().take(2).copied().collect::<Vec<_>>().join("/");
            if known.contains(&nested) {
                found.insert(nested);
            } else if known.contains(words[0]) {
                found.insert(words[0].to_string());
            }
        }
    }
    found
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let modules = modules();
    let known: BTreeSet<String> = modules.keys().cloned().collect();
    modules
        .iter()
        .map(|(name, module)| {
            let mut imports = named(&module.code, &known);
            imports.remove(name);
            (name.clone(), imports)
        })
        .collect()
}

/// The modules reachable from `from`.
fn reachable(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut next = vec![from.to_string()];
    while let Some(module) = next.pop() {
        for imported in &graph[&module] {
            if seen.insert(imported.clone()) {
                next.push(imported.clone());
            }
        }
    }
    seen
}

#[test]
fn the_scan_sees_the_folders_and_their_imports() {
    let graph = graph();
    assert!(
        graph["pool/worker_pool"].contains("rules/schedule"),
        "{graph:?}"
    );
    assert!(graph["supervisor/actor"].contains("pool/messages"));
    assert!(graph["transactional/batch"].contains("store"));
    assert!(graph.len() > 40, "only {} modules seen", graph.len());
}

#[test]
fn every_module_is_in_a_known_layer() {
    let strays: Vec<String> = graph()
        .into_keys()
        .filter(|module| !LAYERS.contains(&layer(module)))
        .collect();
    assert!(
        strays.is_empty(),
        "modules outside the layers (add their folder to LAYERS, in its place): {strays:?}"
    );
}

#[test]
fn nothing_imports_upward() {
    let rank = |module: &str| LAYERS.iter().position(|l| *l == layer(module)).unwrap();
    let mut upward = Vec::new();
    for (module, imports) in graph() {
        for imported in imports {
            if rank(&imported) > rank(&module) {
                upward.push(format!("{module} imports {imported}"));
            }
        }
    }
    assert!(upward.is_empty(), "imports upward: {upward:#?}");
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let graph = graph();
    // A facade only declares its folder's modules and re-exports them: it is not a hop.
    let files: BTreeMap<String, BTreeSet<String>> = graph
        .iter()
        .map(|(m, i)| {
            (
                m.clone(),
                i.iter().filter(|x| x.contains('/')).cloned().collect(),
            )
        })
        .collect();
    let loops: Vec<&String> = files
        .keys()
        .filter(|module| reachable(&files, module).contains(*module))
        .collect();
    assert!(loops.is_empty(), "modules in an import loop: {loops:?}");
}

#[test]
fn the_handle_does_not_know_the_supervisor_actor() {
    assert!(!reachable(&graph(), "supervisor/subscription").contains("supervisor/actor"));
}

#[test]
fn no_file_is_long_or_hides_code_after_its_tests() {
    let mut long = Vec::new();
    let mut hidden = Vec::new();
    for (name, module) in modules() {
        let logic = module.code.lines().filter(|l| !l.trim().is_empty()).count();
        if logic > MAX_LOGIC_LINES {
            long.push(format!("{name}: {logic}"));
        }
        let text = std::fs::read_to_string(&module.path).unwrap();
        if let Some(at) = test_module(&text) {
            // Only more test modules may follow the first.
            let mut rest = &text[at..];
            loop {
                let end = rest.find("\n}\n").map_or(rest.len(), |e| e + 3);
                rest = rest[end..].trim_start();
                if !rest.starts_with("#[cfg(test)]\nmod ") {
                    break;
                }
            }
            if !rest.is_empty() {
                hidden.push(name);
            }
        }
    }
    assert!(
        long.is_empty(),
        "files over {MAX_LOGIC_LINES} lines of logic: {long:?}"
    );
    assert!(hidden.is_empty(), "code after the test module: {hidden:?}");
}
