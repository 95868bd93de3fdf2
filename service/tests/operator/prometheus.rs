//! A real Prometheus (Debian's `prometheus`, as a process of this test on a free port, with a
//! data directory of its own) scrapes a service on the emulator every second while messages
//! flow and evaluates the rules: every metric of the reference's table (`docs/reference.md`) is there with its
//! documented type and labels, every rule evaluates, and every query of the rules and of the
//! Grafana dashboard returns data.

use super::support::{
    KEY, SECRET, encode, eventually, get, keep_publishing, scratch, serve, tool, unique,
};
use leasehold_test_support::free_port;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A Prometheus server, stopped and its directory deleted on drop.
struct Prometheus {
    child: Child,
    dir: PathBuf,
    address: String,
}

impl Prometheus {
    /// Starts one that scrapes `target` every second as job `leasehold` (the job the rules
    /// assume), with the rules.
    fn start(target: &str) -> Self {
        let binary = tool(
            &["prometheus", "/usr/bin/prometheus"],
            "install Debian's prometheus package (apt-get install --no-install-recommends \
             prometheus); `cargo xtask setup` installs it",
        );
        let dir = std::env::temp_dir().join(unique("prometheus"));
        std::fs::create_dir_all(&dir).unwrap();
        let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("prometheus/leasehold.rules.yml");
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 rule_files: ['{}']\n\
                 scrape_configs:\n  - job_name: leasehold\n    static_configs: [{{ targets: ['{target}'] }}]\n",
                rules.display()
            ),
        )
        .unwrap();
        let address = format!("127.0.0.1:{}", free_port());
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={address}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Self {
            child,
            dir,
            address,
        }
    }

    /// What its log says, for failure messages.
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// `GET /api/v1/<path>`: its `data`, or its error.
    fn api(&self, path: &str) -> Result<Value, String> {
        let (_, body) = get(&self.address, &format!("/api/v1/{path}"))
            .ok_or_else(|| format!("Prometheus does not answer:\n{}", self.log()))?;
        let answer: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        if answer["status"] == "success" {
            Ok(answer["data"].clone())
        } else {
            Err(format!("{}: {}", answer["errorType"], answer["error"]))
        }
    }

    /// An instant query's result (a vector of samples, or a scalar).
    fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let data = self.api(&format!("query?query={}", encode(expr)))?;
        Ok(match &data["result"] {
            Value::Array(samples) => samples.clone(),
            scalar => vec![scalar.clone()],
        })
    }

    /// The loaded rules, from every group.
    fn rules(&self) -> Vec<Value> {
        let data = self.api("rules").unwrap();
        data["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap().clone())
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        // SAFETY: sending a signal to a child this test started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A metric the reference (`docs/reference.md`) documents: its name, type, and labels besides `subscription`.
#[derive(Debug)]
struct Documented {
    name: String,
    kind: String,
    labels: Vec<String>,
}

/// The rows of the reference's metrics table (a row may name several metrics).
fn documented() -> Vec<Documented> {
    let reference = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference.md");
    let reference = std::fs::read_to_string(reference).unwrap();
    let section = reference
        .split("\n## Metrics\n")
        .nth(1)
        .expect("service/docs/reference.md has a Metrics section");
    let table = section.split("\n## ").next().unwrap();
    let mut metrics = Vec::new();
    for row in table.lines().filter(|l| l.starts_with("| `leasehold_")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let kind = cells[2].to_string();
        for named in cells[1].split(", ") {
            let named = named.trim_matches('`');
            let (name, labels) = match named.split_once('{') {
                Some((name, labels)) => (
                    name,
                    labels
                        .trim_end_matches('}')
                        .split(',')
                        .map(|l| l.trim().to_string())
                        .collect(),
                ),
                None => (named, Vec::new()),
            };
            metrics.push(Documented {
                name: name.to_string(),
                kind: kind.clone(),
                labels,
            });
        }
    }
    assert!(
        metrics.len() > 20,
        "the reference's metrics table: {metrics:?}"
    );
    metrics
}

/// The metric and recording rule names an expression selects, with their label matchers:
/// `leasehold_...`, `level:metric:operation` and Prometheus's own `up`, strings skipped.
fn selectors(expr: &str) -> Vec<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            let name: String = chars[start..i].iter().collect();
            if name.starts_with("leasehold_") || name.contains(':') || name == "up" {
                let mut selector = name;
                if chars.get(i) == Some(&'{') {
                    let end = chars[i..].iter().position(|&c| c == '}').unwrap() + i;
                    selector.extend(&chars[i..=end]);
                    i = end + 1;
                }
                found.push(selector);
            }
        } else {
            i += 1;
        }
    }
    found
}

/// The Grafana dashboard.
fn dashboard() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("grafana/leasehold.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `text` with the dashboard's variables as Grafana fills them in for the test's service: its
/// job, its `instance` (the address Prometheus scrapes), its subscription.
fn substitute(text: &str, instance: &str) -> String {
    let mut text = text.to_string();
    for (name, value) in [
        ("job", "leasehold"),
        ("instance", instance),
        ("subscription", KEY),
        ("__rate_interval", "1m"),
    ] {
        text = text
            .replace(&format!("${{{name}}}"), value)
            .replace(&format!("${name}"), value);
    }
    assert!(!text.contains('$'), "a variable left in {text}");
    text
}

/// Every `expr` of the dashboard's panels (rows included), the variables substituted for the
/// service at `instance`. Every selector of a metric must pick the job, the instances and the
/// subscriptions of the variables: without the job, two deployments with the same subscription
/// key are added up.
fn dashboard_queries(instance: &str) -> Vec<(String, String)> {
    let dashboard = dashboard();
    fn walk(panel: &Value, found: &mut Vec<(String, String)>) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                let title = panel["title"].as_str().unwrap_or("").to_string();
                found.push((title, expr.to_string()));
            }
        }
        for inner in panel["panels"].as_array().into_iter().flatten() {
            walk(inner, found);
        }
    }
    let mut found = Vec::new();
    walk(&dashboard, &mut found);
    found
        .into_iter()
        .map(|(title, expr)| {
            for selector in selectors(&expr) {
                for matcher in [
                    r#"job="$job""#,
                    r#"instance=~"$instance""#,
                    r#"subscription=~"$subscription""#,
                ] {
                    assert!(
                        selector.contains(matcher),
                        "panel {title}: {selector} lacks {matcher}"
                    );
                }
            }
            let expr = substitute(&expr, instance);
            (title, expr)
        })
        .collect()
}

/// The dashboard's query variables, in order: `(name, series selector, label)` from their
/// `label_values(selector, label)`, the variables before them substituted.
fn dashboard_variables(instance: &str) -> Vec<(String, String, String)> {
    dashboard()["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["type"] == "query")
        .map(|v| {
            let name = v["name"].as_str().unwrap().to_string();
            let query = v["query"]["query"].as_str().unwrap();
            let inside = query
                .strip_prefix("label_values(")
                .and_then(|q| q.strip_suffix(')'))
                .unwrap_or_else(|| panic!("{name}: {query}"));
            let (selector, label) = inside.rsplit_once(", ").unwrap();
            (name, substitute(selector, instance), label.to_string())
        })
        .collect()
}

#[actix_rt::test]
async fn a_real_prometheus_scrapes_every_documented_metric_and_every_query_returns_data() {
    let started = Instant::now();
    let scratch = scratch().await;
    let service = serve(&scratch.subscription).await;
    let publishing = keep_publishing(&scratch);
    let prometheus = Prometheus::start(&service.address);

    let up = |p: &Prometheus| {
        p.query(r#"up{job="leasehold"} == 1"#)
            .is_ok_and(|r| !r.is_empty())
    };
    eventually(
        "Prometheus scraping the service",
        Duration::from_secs(60),
        || up(&prometheus),
    )
    .await;
    // Messages flowed between scrapes (dead letters among them), and every rule ran.
    eventually(
        "rates and dead letters in the scrapes",
        Duration::from_secs(60),
        || {
            prometheus
            .query(r#"increase(leasehold_messages_settled_total{outcome="dead_lettered"}[1m]) > 0"#)
            .is_ok_and(|r| !r.is_empty())
            && prometheus
                .query(r#"rate(leasehold_handler_duration_seconds_count[1m]) > 0"#)
                .is_ok_and(|r| !r.is_empty())
        },
    )
    .await;
    eventually(
        "every rule evaluated after that",
        Duration::from_secs(30),
        || {
            let rules = prometheus.rules();
            !rules.is_empty()
                && rules.iter().all(|r| {
                    r["health"] != "unknown"
                        && r["lastEvaluation"]
                            .as_str()
                            .is_some_and(|t| !t.starts_with("0001"))
                })
                && prometheus
                    .query("subscription:leasehold_handler_duration_seconds:p99_5m > 0")
                    .is_ok_and(|r| !r.is_empty())
        },
    )
    .await;

    // The reference's table: each metric with its type and labels.
    let names: BTreeSet<String> = prometheus
        .api("label/__name__/values")
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str().map(str::to_string))
        .collect();
    let documented = documented();
    for metric in &documented {
        // OpenMetrics names a counter's family without `_total`.
        let kind = [metric.name.as_str(), metric.name.trim_end_matches("_total")]
            .iter()
            .find_map(|family| {
                let metadata = prometheus
                    .api(&format!("metadata?metric={family}"))
                    .unwrap();
                metadata[family][0]["type"].as_str().map(str::to_string)
            });
        assert_eq!(
            kind.as_deref(),
            Some(metric.kind.as_str()),
            "the type of {}",
            metric.name
        );
        let series_names: Vec<String> = match metric.kind.as_str() {
            "histogram" => ["_bucket", "_sum", "_count"]
                .map(|s| format!("{}{s}", metric.name))
                .to_vec(),
            _ => vec![metric.name.clone()],
        };
        for series_name in series_names {
            assert!(names.contains(&series_name), "{series_name} is not scraped");
            let series = prometheus
                .api(&format!("series?match[]={series_name}"))
                .unwrap();
            let mut expected: BTreeSet<&str> =
                ["__name__", "instance", "job", "subscription"].into();
            expected.extend(metric.labels.iter().map(String::as_str));
            if series_name.ends_with("_bucket") {
                expected.insert("le");
            }
            for one in series.as_array().unwrap() {
                let labels: BTreeSet<&str> = one
                    .as_object()
                    .unwrap()
                    .keys()
                    .map(String::as_str)
                    .collect();
                assert_eq!(labels, expected, "{series_name}: {one}");
                assert_eq!(one["subscription"], KEY, "{one}");
            }
        }
    }
    // And nothing scraped that the table does not list.
    for name in names.iter().filter(|n| n.starts_with("leasehold_")) {
        let listed = documented.iter().any(|m| {
            name == &m.name
                || (m.kind == "histogram"
                    && ["_bucket", "_sum", "_count"]
                        .iter()
                        .any(|s| name == &format!("{}{s}", m.name)))
        });
        assert!(
            listed,
            "{name} is scraped but not in the metrics table of service/docs/reference.md"
        );
    }

    // The rules: loaded, healthy, every expression evaluates; the recording rules and every
    // series the alerts select return data.
    let rules = prometheus.rules();
    assert!(rules.len() >= 20, "{rules:?}");
    for rule in &rules {
        let name = rule["name"].as_str().unwrap();
        let expr = rule["query"].as_str().unwrap();
        assert_eq!(rule["health"], "ok", "{name}: {}", rule["lastError"]);
        let result = prometheus
            .query(expr)
            .unwrap_or_else(|e| panic!("{name}: {expr}: {e}"));
        match rule["type"].as_str() {
            Some("recording") => {
                assert!(!result.is_empty(), "{name} returns nothing: {expr}");
                assert!(
                    !prometheus.query(name).unwrap().is_empty(),
                    "{name} is not recorded"
                );
            }
            _ => {
                let selected = selectors(expr);
                assert!(!selected.is_empty(), "{name}: {expr}");
                for selector in selected {
                    let samples = prometheus.query(&selector).unwrap();
                    assert!(!samples.is_empty(), "{name}: {selector} selects nothing");
                }
            }
        }
    }

    // The dashboard: every panel's query returns data.
    let queries = dashboard_queries(&service.address);
    assert!(queries.len() >= 15, "{queries:?}");
    for (title, expr) in &queries {
        let result = prometheus
            .query(expr)
            .unwrap_or_else(|e| panic!("panel {title}: {expr}: {e}"));
        assert!(!result.is_empty(), "panel {title} has no data: {expr}");
    }
    // Its variables, each Grafana's `label_values(selector, label)`: the job, the instance
    // and the subscription, one value each.
    let variables = dashboard_variables(&service.address);
    let in_order: Vec<&str> = variables.iter().map(|v| v.0.as_str()).collect();
    assert_eq!(in_order, ["job", "instance", "subscription"]);
    for ((name, selector, label), expected) in
        variables.iter().zip(["leasehold", &service.address, KEY])
    {
        let values = prometheus
            .api(&format!(
                "label/{label}/values?match[]={}",
                encode(selector)
            ))
            .unwrap();
        assert_eq!(values, serde_json::json!([expected]), "{name}: {selector}");
    }

    // The README's scaling examples: KEDA's query and prometheus-adapter's, each one value per
    // series from 0 to 1.
    for expr in scaling_queries() {
        let result = prometheus
            .query(&expr)
            .unwrap_or_else(|e| panic!("{expr}: {e}"));
        assert!(
            !result.is_empty(),
            "the scaling query {expr} returns nothing"
        );
        for sample in &result {
            let value: f64 = sample["value"][1].as_str().unwrap().parse().unwrap();
            assert!((0.0..=1.0).contains(&value), "{expr}: {sample}");
        }
    }

    // No payload or attribute value in what Prometheus stored.
    let everything = prometheus
        .api(&format!(
            "series?match[]={}",
            encode(r#"{__name__=~"leasehold_.+"}"#)
        ))
        .unwrap();
    assert!(!everything.to_string().contains(SECRET));
    assert!(
        !get(&service.address, "/metrics")
            .unwrap()
            .1
            .contains(SECRET)
    );

    drop(prometheus);
    publishing.abort();
    service.stop().await;
    scratch.cleanup().await;
    eprintln!("the Prometheus test took {:?}", started.elapsed());
}

/// The queries of the README's "Scaling on saturation": KEDA's `query:` (for this test's
/// subscription) and prometheus-adapter's `metricsQuery:` (its template filled as the adapter
/// would for this test's scrape job).
fn scaling_queries() -> Vec<String> {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let readme = std::fs::read_to_string(readme).unwrap();
    let section = readme
        .split("\n## Scaling on saturation\n")
        .nth(1)
        .expect("service/README.md has a Scaling on saturation section");
    let section = section.split("\n## ").next().unwrap();
    let value = |key: &str| {
        section
            .lines()
            .find_map(|l| l.trim().strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in the scaling section"))
            .trim()
            .to_string()
    };
    let keda = value("query:").replace(
        r#"subscription="orders""#,
        &format!(r#"subscription="{KEY}""#),
    );
    let adapter = value("metricsQuery:")
        .replace("<<.GroupBy>>", "instance")
        .replace("<<.LabelMatchers>>", r#"job="leasehold""#);
    vec![keda, adapter]
}

#[test]
fn selectors_are_read_from_expressions() {
    assert_eq!(
        selectors(
            r#"sum by (job) (increase(leasehold_messages_settled_total{outcome=~"retried|x{"}[5m])) / a:b:c > 0 and on (job) leasehold_up or avg_over_time(up{job="leasehold"}[5m])"#
        ),
        [
            r#"leasehold_messages_settled_total{outcome=~"retried|x{"}"#,
            "a:b:c",
            "leasehold_up",
            r#"up{job="leasehold"}"#
        ]
    );
}
