//! The status page's charts, loaded in headless Chromium while messages flow: every chart
//! drawn, every line with data, every outcome in the table, the health as `/readyz` words it,
//! the outage breaker's row, no script on the page, no payload or attribute value, and a screenshot in
//! `target/test-output/status-page.png`.

use super::support::{KEY, SECRET, eventually, get, keep_publishing, output_dir, scratch, serve};
use std::time::Duration;

/// The charts of a subscription, by id suffix, and the lines each draws.
const CHARTS: [(&str, &[&str]); 4] = [
    (
        "messages",
        &[
            "received",
            "acked",
            "retried",
            "dropped",
            "dead-lettered",
            "released",
        ],
    ),
    ("handler-duration", &["p50", "p95", "p99"]),
    ("outstanding", &["outstanding"]),
    ("oldest-lease", &["oldest"]),
];

/// The bottom of a chart's plot (value zero), in SVG units.
const ZERO_Y: f64 = 130.0;

/// The `<figure>` of chart `id` in `page`.
fn figure<'a>(page: &'a str, id: &str) -> Option<&'a str> {
    let start = page.find(&format!(r#"<figure class="chart" id="{id}">"#))?;
    let length = page[start..].find("</figure>")?;
    Some(&page[start..start + length])
}

/// The points of the line `class` in `figure`: `(x, y)` in SVG units.
fn points(figure: &str, class: &str) -> Vec<(f64, f64)> {
    let marker = format!(r#"<path class="line {class}" d=""#);
    let Some(start) = figure.find(&marker).map(|i| i + marker.len()) else {
        return Vec::new();
    };
    let d = &figure[start..start + figure[start..].find('"').unwrap_or(0)];
    d.split(['M', 'L'])
        .filter_map(|point| {
            let point = point.trim_end_matches("h0");
            let (x, y) = point.split_once(' ')?;
            Some((x.parse().ok()?, y.parse().ok()?))
        })
        .collect()
}

/// The points of `class` in the chart `chart` of the test's subscription.
fn line(page: &str, chart: &str, class: &str) -> Vec<(f64, f64)> {
    figure(page, &format!("{KEY}-{chart}")).map_or_else(Vec::new, |f| points(f, class))
}

/// Whether `page` has an attribute such as `onload=`.
fn event_handler(page: &str) -> bool {
    page.match_indices(" on").any(|(i, _)| {
        let name: String = page[i + 3..]
            .chars()
            .take_while(char::is_ascii_lowercase)
            .collect();
        !name.is_empty() && page[i + 3 + name.len()..].starts_with('=')
    })
}

fn above_zero(points: &[(f64, f64)]) -> bool {
    points.iter().any(|(_, y)| *y < ZERO_Y)
}

/// Chromium, headless (the support crate's flags), without scrollbars in its screenshots.
fn chromium(args: &[String]) -> std::process::Output {
    let mut all = vec!["--hide-scrollbars".to_string()];
    all.extend_from_slice(args);
    leasehold_test_support::chromium(&all)
}

/// Runs Chromium off the actix thread, so the service keeps consuming meanwhile.
async fn chromium_async(args: Vec<String>) -> std::process::Output {
    actix_rt::task::spawn_blocking(move || chromium(&args))
        .await
        .unwrap()
}

#[actix_rt::test]
async fn the_status_page_draws_its_charts_in_a_browser() {
    let scratch = scratch().await;
    let service = serve(&scratch.subscription).await;
    let publishing = keep_publishing(&scratch);

    // A point every 5 s: wait for three on the throughput chart, a dead-lettered message
    // among them, and a handler percentile.
    let mut page = String::new();
    eventually(
        "three points, with dead letters",
        Duration::from_secs(90),
        || {
            page = get(&service.address, "/").map_or_else(String::new, |r| r.1);
            line(&page, "messages", "received").len() >= 3
                && above_zero(&line(&page, "messages", "dead-lettered"))
                && above_zero(&line(&page, "handler-duration", "p99"))
        },
    )
    .await;
    assert!(!page.contains(SECRET), "a payload reached the page");
    // Drawn on the server: nothing to run in the browser, nothing fetched from elsewhere.
    assert!(
        !page.contains("<script") && !event_handler(&page),
        "a script on the page"
    );
    assert!(
        !page.contains("src=") && !page.contains("href="),
        "an external asset"
    );

    let url = format!("http://{}/", service.address);
    let dom = chromium_async(vec!["--dump-dom".into(), url.clone()]).await;
    let dom = String::from_utf8_lossy(&dom.stdout).to_string();
    for (chart, lines) in CHARTS {
        let id = format!("{KEY}-{chart}");
        let figure = figure(&dom, &id).unwrap_or_else(|| panic!("no chart {id}:\n{dom}"));
        assert!(figure.contains(r#"<svg class="chart""#), "{figure}");
        for class in lines {
            let drawn = points(figure, class);
            assert!(
                !drawn.is_empty(),
                "the line {class} of {id} is empty:\n{figure}"
            );
        }
    }
    for (chart, class) in [
        ("messages", "received"),
        ("messages", "acked"),
        ("messages", "retried"),
        ("messages", "dead-lettered"),
        ("handler-duration", "p50"),
        ("handler-duration", "p99"),
    ] {
        assert!(
            above_zero(&line(&dom, chart, class)),
            "{class} on {chart} stays at zero:\n{dom}"
        );
    }
    // The legend gives the latest values, and the table is still there, below the charts.
    let messages = figure(&dom, &format!("{KEY}-messages")).unwrap();
    assert!(
        messages.contains("received <b>") && messages.contains("/s</b>"),
        "{messages}"
    );
    let charts_at = dom.find(r#"<div class="charts">"#).expect("the charts");
    let table_at = dom.find(r#"class="received">"#).expect("the table");
    assert!(charts_at < table_at, "the table is below the charts");
    // Every outcome, released included, so that they add up to what was received; the health
    // whole, as /readyz words it.
    assert!(
        dom.contains("<th>acked, retried, dropped, dead-lettered, released</th>"),
        "{dom}"
    );
    let readyz = get(&service.address, "/readyz").unwrap().1;
    let health = readyz.trim().strip_prefix(&format!("{KEY}: ")).unwrap();
    assert_eq!(health, "ready: live", "{readyz}");
    assert!(
        dom.contains(&format!(r#"<td class="health">{health}</td>"#)),
        "{dom}"
    );
    // The subscription's outage breaker (the poison messages do not trip it): its row.
    assert!(
        dom.contains(
            r#"<td class="breaker"><span class="breaker-state closed">closed</span>; held: 0; trips: 0;"#
        ),
        "{dom}"
    );
    assert!(
        !dom.contains(SECRET),
        "a payload or attribute reached the page"
    );

    let screenshot = output_dir().join("status-page.png");
    let _ = std::fs::remove_file(&screenshot);
    let shot = chromium_async(vec![
        "--window-size=1280,1000".into(),
        format!("--screenshot={}", screenshot.display()),
        url,
    ])
    .await;
    let size = std::fs::metadata(&screenshot).map_or(0, |m| m.len());
    assert!(
        size > 20_000,
        "a screenshot of the status page ({size} bytes): {}",
        String::from_utf8_lossy(&shot.stderr)
    );
    eprintln!("status page screenshot: {}", screenshot.display());

    publishing.abort();
    service.stop().await;
    scratch.cleanup().await;
}
