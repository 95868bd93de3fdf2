//! The alert and recording rules (`service/prometheus/`) pass `promtool check rules` and their
//! unit tests, and every rule has a case where it fires (or records) and one where it does not.

use super::support::tool;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn promtool() -> String {
    tool(
        &["promtool", "/usr/bin/promtool"],
        "install Debian's prometheus package (apt-get install --no-install-recommends \
         prometheus), which provides promtool and the server; `cargo xtask setup` installs it",
    )
}

fn rules_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("prometheus")
}

/// The names after `- <kind>: ` in the rules file.
fn rules(kind: &str) -> Vec<String> {
    let text = std::fs::read_to_string(rules_dir().join("leasehold.rules.yml")).unwrap();
    let prefix = format!("- {kind}: ");
    text.lines()
        .filter_map(|l| l.trim().strip_prefix(&prefix))
        .map(|name| name.trim().to_string())
        .collect()
}

/// The cases of the unit tests: `(alert name or expression, whether it expects something)`,
/// read from `alertname:`/`expr:` lines and the `exp_alerts`/`exp_samples` line after them.
fn cases(key: &str, expected: &str) -> Vec<(String, bool)> {
    let text = std::fs::read_to_string(rules_dir().join("leasehold.rules.test.yml")).unwrap();
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(subject) = line
            .strip_prefix(key)
            .or_else(|| line.strip_prefix("- ").and_then(|l| l.strip_prefix(key)))
        else {
            continue;
        };
        let outcome = lines[i + 1..]
            .iter()
            .find(|l| l.starts_with(expected))
            .unwrap_or_else(|| panic!("no {expected} after {line}"));
        found.push((subject.trim().to_string(), !outcome.ends_with("[]")));
    }
    found
}

#[test]
fn the_rules_pass_their_promtool_tests() {
    let promtool = promtool();
    for args in [
        ["check", "rules", "leasehold.rules.yml"],
        ["test", "rules", "leasehold.rules.test.yml"],
    ] {
        let output = Command::new(&promtool)
            .args(args)
            .current_dir(rules_dir())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "promtool {}:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

#[test]
fn every_rule_has_a_case_that_fires_and_one_that_does_not() {
    let alerts = rules("alert");
    let records = rules("record");
    assert!(
        alerts.len() >= 10 && records.len() >= 8,
        "{alerts:?} {records:?}"
    );
    let alert_cases = cases("alertname: ", "exp_alerts:");
    for alert in &alerts {
        for fires in [true, false] {
            assert!(
                alert_cases.iter().any(|(a, f)| a == alert && *f == fires),
                "{alert} has no case where it {}",
                if fires { "fires" } else { "does not fire" }
            );
        }
    }
    let expr_cases = cases("expr: ", "exp_samples:");
    for record in &records {
        for data in [true, false] {
            assert!(
                expr_cases
                    .iter()
                    .any(|(e, d)| e.contains(record.as_str()) && *d == data),
                "{record} has no case {} data",
                if data { "with" } else { "without" }
            );
        }
    }
}

#[test]
fn every_alert_is_in_the_reference_and_the_reference_names_no_other() {
    let reference =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference.md"))
            .unwrap();
    let section = reference
        .split("\n## Alerts\n")
        .nth(1)
        .expect("service/docs/reference.md has an Alerts section");
    let section = section.split("\n## ").next().unwrap();
    let documented: BTreeSet<String> = section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_string)
        .collect();
    let alerts: BTreeSet<String> = rules("alert").into_iter().collect();
    assert!(alerts.len() >= 10, "{alerts:?}");
    let missing: Vec<_> = alerts.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&alerts).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "service/docs/reference.md's alerts table: {missing:?} are rules not in it, {unknown:?} \
         are in it but no rule"
    );
}
