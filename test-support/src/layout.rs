//! The layout's rules, as a checker any crate of the workspace runs on its own `src`: a folder
//! (or root file) per role, stacked in layers; a module imports only from its own layer or the
//! ones below; no two modules import each other through any path; no file carries more than a
//! bound of lines of logic, and none hides code after its test module. A module that needs
//! another that needs it back is missing a third (a message type, a trait, a plain struct)
//! below both.
//!
//! Imports are read from the text, as `crate::…` paths: `crate::pool::job::Job` names the
//! module `pool/job`, `crate::store::Claim` the facade `store`, and `use crate::{a::x, b::y}`
//! both. `lib.rs` (which only declares and re-exports), test files (`tests.rs`, anything under a
//! `tests/` folder) and loom models (`…/model.rs`) are not scanned.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The most lines of logic (not blank, not a comment, not in the test module) in one file, unless
/// a crate's [`Layout`] says otherwise.
pub const MAX_LOGIC_LINES: usize = 350;

/// A crate's layers and bound: what [`Layout::problems`] checks its `src` against.
#[derive(Debug, Clone)]
pub struct Layout {
    src: PathBuf,
    layers: Vec<String>,
    max_logic_lines: usize,
}

/// One scanned file: where it is and its code before its test module, comments left out.
#[derive(Debug)]
pub struct Module {
    /// Its file.
    pub path: PathBuf,
    /// Its lines of code before its test module, `//` comment lines left out.
    pub code: String,
}

/// Each module path (`pool/job`, or `pool` for the facade) and the modules it imports.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

impl Layout {
    /// The layout of the crate whose sources are `src`, with `layers` bottom to top: each a
    /// folder of `src` (with its facade file beside it) or a file at its root.
    pub fn new(src: impl Into<PathBuf>, layers: &[&str]) -> Self {
        Self {
            src: src.into(),
            layers: layers.iter().map(|l| l.to_string()).collect(),
            max_logic_lines: MAX_LOGIC_LINES,
        }
    }

    /// Every scanned `.rs` file under `src`, keyed by module path.
    pub fn modules(&self) -> BTreeMap<String, Module> {
        fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
            let entries = std::fs::read_dir(dir)
                .unwrap_or_else(|e| panic!("{} is not readable: {e}", dir.display()));
            for entry in entries {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(&path, found);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    found.push(path);
                }
            }
        }
        let mut files = Vec::new();
        walk(&self.src, &mut files);
        let mut modules = BTreeMap::new();
        for path in files {
            let name = path
                .strip_prefix(&self.src)
                .unwrap()
                .with_extension("")
                .to_string_lossy()
                .replace('\\', "/");
            let test_file = name.split('/').any(|part| part == "tests");
            if name == "lib" || name == "main" || test_file || name.ends_with("/model") {
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

    /// The import graph of the scanned modules (a module's imports of itself left out).
    pub fn graph(&self) -> Graph {
        let modules = self.modules();
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

    /// The layer a module path belongs to: its folder, or the root file it is.
    fn layer<'a>(&self, module: &'a str) -> &'a str {
        module.split('/').next().unwrap()
    }

    fn rank(&self, module: &str) -> Option<usize> {
        self.layers.iter().position(|l| l == self.layer(module))
    }

    /// What breaks the rules, one line each; empty when the crate keeps them.
    pub fn problems(&self) -> Vec<String> {
        let modules = self.modules();
        let graph = self.graph();
        let mut problems = Vec::new();
        for module in graph.keys() {
            if self.rank(module).is_none() {
                problems.push(format!(
                    "{module} is in no layer (add its folder to the crate's layers, in its place)"
                ));
            }
        }
        for (module, imports) in &graph {
            for imported in imports {
                if let (Some(from), Some(to)) = (self.rank(module), self.rank(imported))
                    && to > from
                {
                    problems.push(format!("{module} imports {imported}, a layer above it"));
                }
            }
        }
        // A facade only declares its folder's modules and re-exports them: it is not a hop.
        let files: Graph = graph
            .iter()
            .map(|(m, i)| {
                let nested = i.iter().filter(|x| x.contains('/')).cloned().collect();
                (m.clone(), nested)
            })
            .collect();
        for module in files.keys() {
            if reachable(&files, module).contains(module) {
                problems.push(format!("{module} is in an import loop"));
            }
        }
        for (name, module) in &modules {
            let logic = module.code.lines().filter(|l| !l.trim().is_empty()).count();
            if logic > self.max_logic_lines {
                problems.push(format!(
                    "{name} has {logic} lines of logic, over {}",
                    self.max_logic_lines
                ));
            }
            if hides_code_after_tests(&std::fs::read_to_string(&module.path).unwrap()) {
                problems.push(format!("{name} has code after its test module"));
            }
        }
        problems
    }

    /// Panics with every problem when the crate breaks the rules, and when the scan saw fewer
    /// than `at_least` modules (a scan that sees nothing passes nothing).
    pub fn check(&self, at_least: usize) {
        let seen = self.modules().len();
        assert!(
            seen >= at_least,
            "{}: only {seen} modules seen, expected at least {at_least}",
            self.src.display()
        );
        let problems = self.problems();
        assert!(
            problems.is_empty(),
            "{} breaks its layout:\n{}",
            self.src.display(),
            problems.join("\n")
        );
    }
}

/// Where a file's test module (`mod tests`, private or `pub(crate)` for test hooks) begins.
fn test_module(text: &str) -> Option<usize> {
    [
        "#[cfg(test)]\nmod tests {",
        "#[cfg(test)]\npub(crate) mod tests {",
        "#[cfg(test)]\nmod tests;",
    ]
    .iter()
    .filter_map(|start| text.find(start))
    .min()
}

/// Whether anything but more test modules follows a file's first test module.
fn hides_code_after_tests(text: &str) -> bool {
    let Some(at) = test_module(text) else {
        return false;
    };
    let mut rest = &text[at..];
    loop {
        let end = if rest.starts_with("#[cfg(test)]\nmod tests;") {
            rest.find(';').map_or(rest.len(), |e| e + 1)
        } else {
            rest.find("\n}\n").map_or(rest.len(), |e| e + 3)
        };
        rest = rest[end..].trim_start();
        if !rest.starts_with("#[cfg(test)]\nmod ") {
            break;
        }
    }
    !rest.is_empty()
}

/// The modules `code` names through `crate::…`.
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

/// The modules reachable from `from`.
pub fn reachable(graph: &Graph, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut next = vec![from.to_string()];
    while let Some(module) = next.pop() {
        for imported in graph.get(&module).into_iter().flatten() {
            if seen.insert(imported.clone()) {
                next.push(imported.clone());
            }
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A crate of `files` (path, text) in a fresh folder of its own.
    fn scratch(files: &[(&str, &str)]) -> PathBuf {
        let root = std::env::temp_dir().join(crate::unique("layout"));
        for (path, text) in files {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        root
    }

    #[test]
    fn an_upward_import_a_loop_and_a_stray_are_named() {
        let src = scratch(&[
            ("lib.rs", "mod low; mod high;"),
            ("low.rs", "mod a;\nmod b;"),
            ("low/a.rs", "use crate::low::b::B;\npub struct A;"),
            (
                "low/b.rs",
                "use crate::low::a::A;\nuse crate::high::H;\npub struct B;",
            ),
            ("high.rs", "use crate::low::a::A;\npub struct H;"),
            ("stray.rs", "pub struct S;"),
            ("low/tests.rs", "use crate::high::H;"),
        ]);
        let problems = Layout::new(&src, &["low", "high"]).problems();
        std::fs::remove_dir_all(&src).unwrap();
        assert_eq!(
            problems,
            [
                "stray is in no layer (add its folder to the crate's layers, in its place)",
                "low/b imports high, a layer above it",
                "low/a is in an import loop",
                "low/b is in an import loop",
            ]
        );
    }

    #[test]
    fn a_long_file_and_code_after_tests_are_named_and_test_modules_do_not_count() {
        let long: String = (0..351).map(|i| format!("const C{i}: u8 = 0;\n")).collect();
        let tested =
            format!("pub fn f() {{}}\n// a comment\n\n#[cfg(test)]\nmod tests {{\n{long}}}\n");
        let src = scratch(&[
            ("long.rs", &long),
            ("tested.rs", &tested),
            ("after.rs", "#[cfg(test)]\nmod tests {\n}\nfn g() {}\n"),
        ]);
        let layout = Layout::new(&src, &["after", "long", "tested"]);
        let problems = layout.problems();
        std::fs::remove_dir_all(&src).unwrap();
        assert_eq!(
            problems,
            [
                "after has code after its test module",
                "long has 351 lines of logic, over 350",
            ]
        );
    }
}
