//! What a subscription's schema decoder counted (`leasehold-schema`'s `SchemaReport`): its
//! metric families, by revision, and its section of the status page. Only subscriptions whose
//! handler reads a schema have them.
//!
//! Uses [`super::families`] and [`super::html`] to write, [`super::running`] to read.

use crate::observe::families::family;
use crate::observe::html::escape;
use crate::observe::running::Running;
use leasehold_schema::SchemaReport;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType::Counter;
use std::fmt::Write;

/// What stands in for the revision of the messages that failed before any was known.
const UNRESOLVED: &str = "unresolved";

/// The schema families of every subscription that reads a schema.
pub(super) fn encode(e: &mut DescriptorEncoder, subs: &[Running]) -> Result<(), std::fmt::Error> {
    let reports: Vec<(&str, SchemaReport)> = subs
        .iter()
        .filter_map(|r| r.schema.as_ref().map(|s| (r.key.as_str(), s.report())))
        .collect();
    let per_revision = |failed: bool| {
        let mut values = Vec::new();
        for (key, report) in &reports {
            for r in &report.revisions {
                let labels = vec![
                    ("subscription", *key),
                    ("schema", report.schema.as_str()),
                    ("revision", r.revision.as_str()),
                ];
                values.push((labels, if failed { r.failed } else { r.decoded } as f64));
            }
            if failed {
                let labels = vec![
                    ("subscription", *key),
                    ("schema", report.schema.as_str()),
                    ("revision", UNRESOLVED),
                ];
                values.push((labels, report.unresolved as f64));
            }
        }
        values
    };
    family(
        e,
        "schema_messages_decoded",
        "Schema handlers: messages decoded, by the revision they were written with.",
        None,
        Counter,
        per_revision(false),
    )?;
    family(
        e,
        "schema_decode_failures",
        "Schema handlers: messages that did not decode (sent to the failure policy), by \
         revision; `unresolved`: no schema attributes, another schema, or a revision the \
         schema service does not have.",
        None,
        Counter,
        per_revision(true),
    )?;
    let lookups = reports.iter().flat_map(|(key, r)| {
        [
            ("cache_hit", r.cache_hits),
            ("fetched", r.fetches),
            ("unavailable", r.fetch_failures),
            ("not_found", r.missing_revisions),
        ]
        .map(|(result, n)| (vec![("subscription", *key), ("result", result)], n as f64))
    });
    family(
        e,
        "schema_revision_lookups",
        "Schema handlers: the decoder's lookups of a revision it had not prepared: answered \
         by the process's cache, fetched from the schema service, not answered (its messages \
         retried), or not found.",
        None,
        Counter,
        lookups.collect::<Vec<_>>(),
    )
}

/// The status page's schema section of a subscription whose handler reads a schema: per
/// revision the messages decoded and failed, and the revision lookups.
pub(super) fn section(page: &mut String, running: &Running) {
    let Some(stats) = &running.schema else {
        return;
    };
    let r = stats.report();
    let _ = write!(
        page,
        r#"<h3>Schema {schema}</h3>
<table class="schema">
<tr><th>revision lookups: from the cache, fetched, not answered, not found</th><td class="schema-lookups">{hits}, {fetches}, {failures}, {missing}</td></tr>
<tr><th>failed before a revision was known</th><td class="schema-unresolved">{unresolved}</td></tr>
"#,
        schema = escape(&r.schema),
        hits = r.cache_hits,
        fetches = r.fetches,
        failures = r.fetch_failures,
        missing = r.missing_revisions,
        unresolved = r.unresolved,
    );
    for revision in &r.revisions {
        let _ = writeln!(
            page,
            "<tr><th>revision {}: decoded, failed</th><td class=\"schema-revision\">{}, {}</td></tr>",
            escape(&revision.revision),
            revision.decoded,
            revision.failed
        );
    }
    page.push_str("</table>\n");
}
