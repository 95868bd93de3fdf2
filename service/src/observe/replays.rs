//! A replay's report: what a `replay KEY` run says of its progress (counts only: never a
//! payload, an attribute or a message id), written to a file for the serving process's page and
//! `/metrics` and read back there, and the command line the page shows to start one.
//!
//! Uses the runtime's replay progress; nothing of the service.

use leasehold::replay::ReplayProgress;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// The command that replays `key`'s dead letters, as the status page shows it: this program
/// (by its file name), its configuration, and the subcommand.
pub(crate) fn command_line(key: &str, from: Option<&str>) -> String {
    let program = std::env::args_os()
        .next()
        .map(PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "service".to_string());
    match from {
        Some(_) => format!("{program} CONFIG replay {key} --dry-run"),
        None => format!("{program} CONFIG replay {key} --from SUBSCRIPTION --dry-run"),
    }
}

/// How long a running replay's report stays believed without an update (it writes one a
/// second): after that the page says it stopped reporting.
const REPORT_STALE_AFTER: Duration = Duration::from_secs(30);
/// How long an ended replay's report stays on the page.
const REPORT_KEPT: Duration = Duration::from_secs(15 * 60);

/// A replay's progress as it reports it: read in the process (`--http`), or from the file a
/// `replay KEY` process writes for the serving process's page and `/metrics`. Counts only:
/// never a payload, an attribute or a message id.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Report {
    pub(crate) from: String,
    pub(crate) pid: u32,
    /// Seconds since the Unix epoch of the last update.
    pub(crate) updated: u64,
    pub(crate) ended: bool,
    pub(crate) cancelled: bool,
    pub(crate) dry_run: bool,
    pub(crate) replayed: u64,
    pub(crate) still_failing: u64,
    pub(crate) running: u64,
    pub(crate) filtered: u64,
    pub(crate) not_taken: u64,
    pub(crate) released: u64,
    pub(crate) listed: u64,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Report {
    pub(crate) fn of(from: &str, dry_run: bool, p: &ReplayProgress, ended: bool) -> Self {
        Self {
            from: from.to_string(),
            pid: std::process::id(),
            updated: unix_now(),
            ended,
            cancelled: p.cancelled,
            dry_run,
            replayed: p.replayed,
            still_failing: p.still_failing,
            running: p.running,
            filtered: p.filtered,
            not_taken: p.not_taken,
            released: p.released,
            listed: p.listed,
        }
    }

    /// Left on the dead-letter subscription unhandled.
    pub(crate) fn left_out(&self) -> u64 {
        self.filtered + self.not_taken + self.released + self.listed
    }

    /// `running`, `cancelling`, `ended`, or `stopped reporting` (a process gone without ending).
    pub(crate) fn state(&self) -> &'static str {
        if self.ended {
            "ended"
        } else if unix_now().saturating_sub(self.updated) > REPORT_STALE_AFTER.as_secs() {
            "stopped reporting"
        } else if self.cancelled {
            "cancelling"
        } else {
            "running"
        }
    }
}

/// The report file of `key` in `dir` (the key with anything but letters, digits, `-` and `_`
/// replaced, so that it stays one file name).
fn report_path(dir: &std::path::Path, key: &str) -> PathBuf {
    let name: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    dir.join(format!("{name}.json"))
}

/// Writes `report` for `key`, whole or not at all (a file beside it, renamed over it).
pub(crate) fn write_report(
    dir: &std::path::Path,
    key: &str,
    report: &Report,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let path = report_path(dir, key);
    let partial = path.with_extension(format!("json.{}", std::process::id()));
    std::fs::write(
        &partial,
        serde_json::to_vec(report).map_err(std::io::Error::other)?,
    )?;
    std::fs::rename(partial, path)
}

/// The report of `key`'s replay in `dir`, if one runs or ended lately.
pub(crate) fn read_report(dir: &std::path::Path, key: &str) -> Option<Report> {
    let report: Report =
        serde_json::from_slice(&std::fs::read(report_path(dir, key)).ok()?).ok()?;
    let age = unix_now().saturating_sub(report.updated);
    (age <= REPORT_KEPT.as_secs()).then_some(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_is_written_whole_and_read_back_and_an_old_one_is_forgotten() {
        let dir =
            std::env::temp_dir().join(format!("leasehold-report-test-{}", std::process::id()));
        let mut report = Report {
            from: "projects/p/subscriptions/dl".into(),
            pid: 7,
            updated: unix_now(),
            ended: false,
            cancelled: false,
            dry_run: false,
            replayed: 3,
            still_failing: 1,
            running: 2,
            filtered: 4,
            not_taken: 0,
            released: 1,
            listed: 0,
        };
        write_report(&dir, "orders/eu", &report).unwrap();
        assert!(dir.join("orders_eu.json").exists(), "one file name");
        assert_eq!(read_report(&dir, "orders/eu"), Some(report.clone()));
        assert_eq!(report.state(), "running");
        assert_eq!(report.left_out(), 5);
        report.updated = unix_now() - 60;
        assert_eq!(report.state(), "stopped reporting");
        report.updated = unix_now() - 16 * 60;
        write_report(&dir, "orders/eu", &report).unwrap();
        assert_eq!(read_report(&dir, "orders/eu"), None, "forgotten");
        assert_eq!(read_report(&dir, "none"), None);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
