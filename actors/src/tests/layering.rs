//! The layout's rule, checked: every module of `actors/src` imports downward. A module that
//! needs another that needs it back is missing a third (a message type, a trait, a plain
//! struct) below both.

use std::collections::{BTreeMap, BTreeSet};

/// Each module and the modules its code (not its comments, not its unit tests) names.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut code = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("src is readable") {
        let path = entry.unwrap().path();
        let Some(name) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if path.extension().is_some_and(|e| e == "rs") && !["lib", "tests"].contains(&name) {
            let text = std::fs::read_to_string(&path).unwrap();
            let text = text
                .split("#[cfg(test)]\nmod tests")
                .next()
                .unwrap_or_default();
            let text: Vec<&str> = text
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect();
            code.insert(name.to_string(), text.join("\n"));
        }
    }
    let names: BTreeSet<String> = code.keys().cloned().collect();
    code.iter()
        .map(|(module, text)| {
            let mut named = BTreeSet::new();
            // `crate::x`, and the `x::` inside `use crate::{x::..., y::...}`.
            let mut rest = text.as_str();
            while let Some(at) = rest.find("crate::") {
                rest = &rest[at + "crate::".len()..];
                let group = if rest.starts_with('{') {
                    &rest[..rest.find('}').unwrap_or(rest.len())]
                } else {
                    rest
                };
                for word in group
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                    .filter_map(|w| w.split("::").next())
                {
                    if names.contains(word) && word != module {
                        named.insert(word.to_string());
                    }
                    if !rest.starts_with('{') {
                        break;
                    }
                }
            }
            (module.clone(), named)
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
fn no_module_imports_one_that_imports_it_back() {
    let graph = imports();
    assert!(
        graph["supervisor"].contains("worker_pool"),
        "the scan sees imports"
    );
    let loops: Vec<String> = graph
        .keys()
        .filter(|module| reachable(&graph, module).contains(*module))
        .cloned()
        .collect();
    assert!(loops.is_empty(), "modules in an import loop: {loops:?}");
}

#[test]
fn the_handle_and_the_pool_do_not_know_the_supervisor() {
    let graph = imports();
    for module in ["subscription", "worker_pool", "worker", "lease", "shared"] {
        assert!(
            !reachable(&graph, module).contains("supervisor"),
            "{module} reaches the supervisor"
        );
    }
}
