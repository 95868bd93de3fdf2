//! `replay KEY`: the dead letters of a configured subscription replayed through the handler
//! bound to its key, from the command line: the arguments ([`ReplayArgs`]), the run
//! ([`Service::replay`]), its progress on the terminal (or a log line now and then), a dry
//! run's list, and the summary.

use crate::config::ServiceConfig;
use crate::{Service, ServiceError};
use leasehold::replay::{self, Candidate, Filter, ReplayOptions, ReplayProgress};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// How often a replay logs its progress when stderr is not a terminal.
pub const REPLAY_LOG_EVERY: Duration = Duration::from_secs(10);

/// What the service binary was asked to do: serve its configuration, or replay one
/// subscription's dead letters.
#[derive(Debug, Clone, clap::Parser)]
#[command(about = "Leasehold: consume the configuration's subscriptions, or replay dead letters")]
pub struct Cli {
    /// The configuration file (TOML; `LEASEHOLD__...` environment variables override it), as
    /// the first argument.
    #[arg(value_name = "CONFIG")]
    pub path: Option<PathBuf>,
    /// The configuration file, named anywhere on the line.
    #[arg(long, short, env = "LEASEHOLD_CONFIG", global = true)]
    pub config: Option<PathBuf>,
    /// What to do; serving when none is named.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The service binary's commands.
#[derive(Debug, Clone, clap::Subcommand)]
#[non_exhaustive]
pub enum Command {
    /// Consume the configuration's subscriptions until SIGTERM or SIGINT (the default).
    Serve,
    /// Run a subscription's handler over its dead letters, without republishing.
    Replay(Box<ReplayArgs>),
}

impl Cli {
    /// The configuration the arguments name: the file, or `None` when none was given.
    pub fn load_config(&self) -> Result<Option<ServiceConfig>, crate::config::ConfigError> {
        self.path
            .as_ref()
            .or(self.config.as_ref())
            .map(crate::config::load)
            .transpose()
    }
}

/// `replay KEY [OPTIONS]`: what to replay and how.
#[derive(Debug, Clone, clap::Args)]
pub struct ReplayArgs {
    /// The subscription's key in the configuration (`orders` for `[subscriptions.orders]`).
    pub key: String,
    /// The subscription on the dead-letter topic to replay from (default: the key's
    /// `dead_letter_subscription`).
    #[arg(long, value_name = "SUBSCRIPTION")]
    pub from: Option<String>,
    /// At most this many messages a second handed to the handler.
    #[arg(long, value_name = "PER_SECOND", allow_negative_numbers = true)]
    pub rate: Option<f64>,
    /// At most this many messages handed to the handler.
    #[arg(long, value_name = "N")]
    pub max: Option<u64>,
    /// Only the message with this id (the dead-letter copy's); repeat for more.
    #[arg(long = "id", value_name = "MESSAGE_ID")]
    pub ids: Vec<String>,
    /// Only messages whose attribute KEY is VALUE; repeat: every pair must match.
    #[arg(long = "attribute", value_name = "KEY=VALUE", value_parser = attribute)]
    pub attributes: Vec<(String, String)>,
    /// Only messages dead-lettered at or after this time (RFC 3339, `2026-12-01T10:00:00Z`).
    #[arg(long, value_name = "TIME", value_parser = time)]
    pub published_after: Option<SystemTime>,
    /// Only messages dead-lettered before this time (RFC 3339, or `now`: what was there when
    /// the run started, so that it ends while new dead letters keep arriving).
    #[arg(long, value_name = "TIME", value_parser = time)]
    pub published_before: Option<SystemTime>,
    /// List each candidate (id, publish time, Pub/Sub's dead-letter attributes, attribute keys,
    /// size) and settle nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// End after this long without a message not seen before (`10s`, `1m`).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub idle: Option<Duration>,
    /// Serve this run's status page and `/metrics` (the `leasehold_replay_*` counters) on this
    /// address while it runs (`127.0.0.1:9091`); not served by default.
    #[arg(long, value_name = "ADDRESS")]
    pub http: Option<String>,
}

fn attribute(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("expected KEY=VALUE, not {text:?}")),
    }
}

fn time(text: &str) -> Result<SystemTime, String> {
    if text == "now" {
        return Ok(SystemTime::now());
    }
    humantime::parse_rfc3339_weak(text)
        .map_err(|e| format!("expected an RFC 3339 time such as 2026-12-01T10:00:00Z, or now: {e}"))
}

impl ReplayArgs {
    /// The run's options, checked against their ranges.
    pub fn options(&self) -> Result<ReplayOptions, leasehold::error::InvalidOption> {
        let mut filter = Filter::new();
        for id in &self.ids {
            filter = filter.message_id(id);
        }
        for (key, value) in &self.attributes {
            filter = filter.attribute(key, value);
        }
        if let Some(t) = self.published_after {
            filter = filter.published_after(t);
        }
        if let Some(t) = self.published_before {
            filter = filter.published_before(t);
        }
        let mut options = ReplayOptions::new().filter(filter);
        if let Some(rate) = self.rate {
            options = options.rate(rate);
        }
        if let Some(max) = self.max {
            options = options.max(max);
        }
        if let Some(idle) = self.idle {
            options = options.idle(idle);
        }
        if self.dry_run {
            options = options.dry_run();
        }
        options.validate()?;
        Ok(options)
    }
}

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

/// One line of a dry run's list: never a payload, never an attribute value of the publisher's.
pub fn candidate_line(c: &Candidate) -> String {
    let time = |t: Option<SystemTime>| {
        t.map_or("-".to_string(), |t| {
            humantime::format_rfc3339_millis(t).to_string()
        })
    };
    format!(
        "{id}  published {published}  source {source}  delivery count {count}  first published {first}  {size} bytes  attribute keys [{keys}]",
        id = c.message_id,
        published = time(c.publish_time),
        source = c.source_subscription.as_deref().unwrap_or("-"),
        count = c
            .source_delivery_count
            .map_or("-".to_string(), |n| n.to_string()),
        first = c.source_publish_time.as_deref().unwrap_or("-"),
        size = c.size,
        keys = c.attribute_keys.join(", "),
    )
}

/// The summary line of a run.
pub fn summary_line(key: &str, end: &ReplayProgress) -> String {
    let mut line = format!(
        "{key}: replayed {}, still failing {}, left out by the filter {}, not taken {}, released {}",
        end.replayed, end.still_failing, end.filtered, end.not_taken, end.released,
    );
    if end.listed > 0 {
        line.push_str(&format!(", listed {}", end.listed));
    }
    if end.failed_acks > 0 {
        line.push_str(&format!(", refused acks {}", end.failed_acks));
    }
    line.push_str(&format!(
        "; left on the dead-letter subscription: {} of those this run saw{}",
        end.left(),
        if end.cancelled { " (cancelled)" } else { "" }
    ));
    line
}

fn progress_text(p: &ReplayProgress) -> String {
    format!(
        "replayed {}, still failing {}, running {}, filtered {}, listed {}",
        p.replayed, p.still_failing, p.running, p.filtered, p.listed
    )
}

impl Service {
    /// Replays the dead letters of the subscription configured under `args.key` through the
    /// handler bound to it (with the key's options and policies), from `args.from` or the
    /// key's `dead_letter_subscription`; ends when the run is over, or on SIGTERM or SIGINT
    /// (running handlers finish, what waits is nacked). Prints a dry run's candidates to
    /// stdout, one line each, and shows progress on stderr: a bar on a terminal, a log line
    /// every [`REPLAY_LOG_EVERY`] otherwise.
    pub async fn replay(self, args: ReplayArgs) -> Result<ReplayProgress, ServiceError> {
        self.replay_until(args, crate::termination()).await
    }

    /// [`replay`](Self::replay), cancelled when `cancel` resolves rather than on a signal.
    pub async fn replay_until(
        mut self,
        args: ReplayArgs,
        cancel: impl std::future::Future<Output = ()>,
    ) -> Result<ReplayProgress, ServiceError> {
        let key = args.key.clone();
        let table = self
            .config
            .subscriptions
            .get(&key)
            .cloned()
            .ok_or_else(|| ServiceError::NotConfigured {
                key: key.clone(),
                configured: self.config.subscriptions.keys().cloned().collect(),
            })?;
        let options = args.options().map_err(|cause| ServiceError::Replay {
            key: key.clone(),
            cause: leasehold::error::ReplayError::InvalidOption(cause),
        })?;
        // Bound before anything is taken: an address that cannot be served consumes nothing.
        let listener =
            match &args.http {
                Some(address) => Some(std::net::TcpListener::bind(address).map_err(|cause| {
                    ServiceError::Bind {
                        address: address.clone(),
                        cause,
                    }
                })?),
                None => None,
            };
        let connector = self.config.connection.connection().connect().await?;
        let from = match args
            .from
            .clone()
            .or_else(|| table.dead_letter_subscription.clone())
        {
            Some(from) => from,
            // Say what is missing: the policy, or a subscription on its topic.
            None => {
                return Err(match connector.read_subscription(&table.name).await {
                    Ok(info) if info.dead_letter_topic.is_none() => ServiceError::Replay {
                        key: key.clone(),
                        cause: leasehold::error::ReplayError::NoDeadLetterPolicy {
                            subscription: table.name.clone(),
                        },
                    },
                    Ok(info) => ServiceError::NoDeadLetterSubscription {
                        key: key.clone(),
                        dead_letter_topic: info.dead_letter_topic,
                    },
                    Err(_) => ServiceError::NoDeadLetterSubscription {
                        key: key.clone(),
                        dead_letter_topic: None,
                    },
                });
            }
        };
        let build = self
            .handlers
            .remove(&key)
            .ok_or_else(|| ServiceError::NoHandler { key: key.clone() })?;
        let registration = table.apply(&key, build(&table.name))?;
        let max_lease = registration.options().max_lease;
        let window = crate::metrics::Window::of(registration.options());
        let mut run = replay::replay(registration, from.clone(), options, connector)
            .await
            .map_err(|cause| ServiceError::Replay {
                key: key.clone(),
                cause,
            })?;
        let listing = run.candidates().map(|mut candidates| {
            actix_rt::spawn(async move {
                use futures::StreamExt;
                while let Some(c) = candidates.next().await {
                    println!("{}", candidate_line(&c));
                }
            })
        });
        let watch = run.watch();
        let serving = match (listener, &args.http) {
            (Some(listener), Some(address)) => {
                let running = crate::metrics::Running {
                    key: key.clone(),
                    subscription: run.consumer().clone(),
                    max_lease,
                    push: None,
                    window,
                    dead_letter_subscription: Some(from.clone()),
                    replay: Some(watch.clone()),
                    replays_dir: None,
                };
                match crate::serve_http(
                    std::sync::Arc::new(vec![running]),
                    crate::Listen::Bound(listener, address.clone()),
                    self.config.http.workers,
                ) {
                    Ok((_, http, sampler)) => {
                        tracing::info!(%address, "serving this replay's status page and /metrics");
                        Some((http, sampler))
                    }
                    Err(error) => {
                        run.cancel();
                        let _ = run.finished().await;
                        return Err(error);
                    }
                }
            }
            _ => None,
        };
        let publishing = actix_rt::spawn(publish_reports(
            self.config.http.replays_dir(),
            key.clone(),
            from.clone(),
            watch.clone(),
        ));
        let reporting = actix_rt::spawn(report_progress(key.clone(), from, watch.clone()));
        let finished = run.finished();
        futures::pin_mut!(finished);
        futures::pin_mut!(cancel);
        let end = match futures::future::select(finished, cancel).await {
            futures::future::Either::Left((end, _)) => end,
            futures::future::Either::Right(((), finished)) => {
                tracing::info!(%key, "replay cancelled: running handlers finish, the rest stays");
                watch.cancel();
                finished.await
            }
        };
        reporting.abort();
        // Its last report, ended, is written once the run is over.
        let _ = publishing.await;
        if let Some((http, sampler)) = serving {
            sampler.abort();
            http.stop(true).await;
        }
        if let Some(listing) = listing {
            let _ = listing.await;
        }
        Ok(end)
    }
}

/// Shows where a run is until it is over: a bar on a terminal, a log line now and then.
async fn report_progress(key: String, from: String, watch: replay::ReplayWatch) {
    if std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_prefix(format!("{key} from {from}"));
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {prefix}: {msg} ({elapsed})")
                .expect("a valid template"),
        );
        let mut tick = actix_rt::time::interval(Duration::from_millis(200));
        while !watch.is_over() {
            tick.tick().await;
            bar.set_message(progress_text(&watch.progress()));
            bar.tick();
        }
        bar.finish_and_clear();
    } else {
        let mut tick = actix_rt::time::interval(REPLAY_LOG_EVERY);
        tick.tick().await;
        while !watch.is_over() {
            tick.tick().await;
            let p = watch.progress();
            tracing::info!(%key, %from, replayed = p.replayed, still_failing = p.still_failing,
                running = p.running, filtered = p.filtered, listed = p.listed, "replay progress");
        }
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

/// The replay of `running`'s key: its own, in this process, or one another process reports.
pub(crate) fn report_of(running: &crate::metrics::Running) -> Option<Report> {
    if let Some(watch) = &running.replay {
        let from = running.dead_letter_subscription.as_deref().unwrap_or("-");
        return Some(Report::of(
            from,
            watch.is_dry_run(),
            &watch.progress(),
            watch.is_over(),
        ));
    }
    running
        .replays_dir
        .as_deref()
        .and_then(|dir| read_report(dir, &running.key))
}

/// Writes the run's report every second until it is over, then once more, ended.
async fn publish_reports(dir: PathBuf, key: String, from: String, watch: replay::ReplayWatch) {
    let mut warned = false;
    let mut tick = actix_rt::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let over = watch.is_over();
        let report = Report::of(&from, watch.is_dry_run(), &watch.progress(), over);
        if let Err(e) = write_report(&dir, &key, &report)
            && !std::mem::replace(&mut warned, true)
        {
            tracing::warn!(dir = %dir.display(), error = %e,
                "cannot write the replay's progress for the serving process's page; going on");
        }
        if over {
            return;
        }
    }
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
