//! A replay run from the command line ([`Service::replay`]): the key's handler and options over
//! its dead-letter subscription, its status page and `/metrics` on `--http`, its report written
//! for the serving process, its progress on the terminal (or a log line now and then).
//!
//! Uses [`crate::builder`] (the handlers bound to keys), [`crate::http`] to serve,
//! [`crate::observe`] for what it serves and reports, [`super::cli`] and [`super::lines`].

use crate::builder::{Service, termination};
use crate::error::ServiceError;
use crate::http::{Listen, serve_http};
use crate::observe::replays::{Report, write_report};
use crate::observe::running::{Running, Window};
use crate::replay::cli::{REPLAY_LOG_EVERY, ReplayArgs};
use crate::replay::lines::{candidate_line, progress_text};
use leasehold::replay::{self, ReplayProgress};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

impl Service {
    /// Replays the dead letters of the subscription configured under `args.key` through the
    /// handler bound to it (with the key's options and policies), from `args.from` or the
    /// key's `dead_letter_subscription`; ends when the run is over, or on SIGTERM or SIGINT
    /// (running handlers finish, what waits is nacked). Prints a dry run's candidates to
    /// stdout, one line each, and shows progress on stderr: a bar on a terminal, a log line
    /// every [`REPLAY_LOG_EVERY`] otherwise.
    pub async fn replay(self, args: ReplayArgs) -> Result<ReplayProgress, ServiceError> {
        self.replay_until(args, termination()).await
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
        let connection = self.config.connection.connection();
        let (built, schema) = build.build(&key, &table, &connection, &mut None).await?;
        let registration = table.apply(&key, built).await?;
        let max_lease = registration.options().max_lease;
        let window = Window::of(registration.options());
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
                let running = Running {
                    key: key.clone(),
                    subscription: run.consumer().clone(),
                    max_lease,
                    push: None,
                    window,
                    dead_letter_subscription: Some(from.clone()),
                    replay: Some(watch.clone()),
                    replays_dir: None,
                    schema,
                    relay: None,
                };
                match serve_http(
                    std::sync::Arc::new(vec![running]),
                    Listen::Bound(listener, address.clone()),
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
