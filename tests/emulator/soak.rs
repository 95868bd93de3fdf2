//! The chaos soak: thousands of messages whose payload says what the handler must do, several
//! connection cuts, and a stop and restart of the runtime mid-run, on an exactly-once subscription
//! with a dead-letter policy and a persistent progress store. At the end every message id is
//! accounted for.
//!
//! CI runs 3,000 messages. The full run (see RELIABILITY.md):
//!
//! ```text
//! LEASEHOLD_SOAK_MESSAGES=20000 cargo test --release --test emulator soak -- --nocapture
//! ```

use leasehold::defaults::DEFAULT_TTL;
use leasehold::{
    Connection, Delivery, FailurePolicy, Outcome, Registration, Subscription, error::PubSubError,
    status::StatsSnapshot, store::RedbStore,
};
use leasehold_test_support::{Proxy, Scratch, host, unique};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Pub/Sub's smallest dead-letter limit.
const MAX_ATTEMPTS: u32 = 5;
/// Messages in CI's run; `LEASEHOLD_SOAK_MESSAGES` overrides it.
const CI_MESSAGES: usize = 3_000;

/// What a message asks of the handler.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
enum Instruction {
    Ack,
    RetryOnce,
    RetryAfter,
    Drop,
    DeadLetter,
    PanicOnce,
    Slow,
    /// Not sent as JSON at all: the payload does not decode.
    Undecodable,
}

impl Instruction {
    /// The mix, per 1,000 messages: mostly plain acks, some of every other kind.
    fn for_index(n: usize) -> Self {
        match n % 1000 {
            0..=599 => Self::Ack,
            600..=679 => Self::RetryOnce,
            680..=739 => Self::RetryAfter,
            740..=819 => Self::Drop,
            820..=859 => Self::DeadLetter,
            860..=939 => Self::PanicOnce,
            940..=944 => Self::Slow,
            _ => Self::Undecodable,
        }
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Payload {
    n: usize,
    what: Instruction,
}

/// What the handlers observed, shared across the two runs of the runtime.
#[derive(Default)]
struct Ledger {
    /// Message ids the handler (or the failure policy) was given at least once.
    seen: BTreeSet<String>,
    /// Side effects: the handler finished its work for this message id (must be once).
    effects: HashMap<String, u32>,
    /// Payloads that did not decode, by message id.
    undecodable: BTreeSet<String>,
    /// Message indexes that arrived on the dead-letter topic.
    dead_lettered: BTreeMap<usize, u32>,
    /// Times the handler or the failure policy chose `drop()` on the last delivery attempt:
    /// each is one dead-letter decision of Leasehold's. A `drop` message can get there too: the
    /// emulator counts deliveries to closed streams, so its attempt number can reach the limit.
    drops_on_last_attempt: u64,
}

impl Ledger {
    fn dropping(&mut self, attempt: Option<u32>) -> Outcome {
        if attempt.is_some_and(|a| a >= MAX_ATTEMPTS) {
            self.drops_on_last_attempt += 1;
        }
        Outcome::drop()
    }
}

type Shared = Arc<Mutex<Ledger>>;

async fn handle(payload: Payload, d: Delivery, ledger: Shared) -> Result<Outcome, PubSubError> {
    let attempt = d.delivery_attempt().unwrap_or(1);
    ledger.lock().seen.insert(d.message_id().to_string());
    let finish = |outcome: Outcome| {
        *ledger
            .lock()
            .effects
            .entry(d.message_id().to_string())
            .or_default() += 1;
        Ok(outcome)
    };
    match payload.what {
        Instruction::RetryOnce if attempt == 1 => Ok(d.retry()),
        Instruction::RetryAfter if attempt == 1 => d.retry_after(Duration::from_secs(2)),
        Instruction::PanicOnce if attempt == 1 => panic!("soak: panic on the first attempt"),
        Instruction::DeadLetter if attempt < MAX_ATTEMPTS => Ok(d.retry()),
        Instruction::DeadLetter | Instruction::Drop => {
            let outcome = ledger.lock().dropping(d.delivery_attempt());
            finish(outcome)
        }
        Instruction::Slow => {
            // Longer than the 10 s ack deadline: only lease extensions keep it.
            actix_rt::time::sleep(Duration::from_secs(12)).await;
            finish(d.ack())
        }
        _ => finish(d.ack()),
    }
}

fn registration(subscription: &str, ledger: &Shared, store: RedbStore) -> Registration {
    let (l, u) = (ledger.clone(), ledger.clone());
    Registration::json(subscription, move |p: Payload, d: Delivery| {
        handle(p, d, l.clone())
    })
    .workers(64)
    .max_outstanding_messages(500)
    .max_lease_extension(Duration::from_secs(10))
    .progress_store(store)
    .failure_policy(FailurePolicy::custom(move |d, _| {
        let mut ledger = u.lock();
        ledger.seen.insert(d.message_id().to_string());
        ledger.undecodable.insert(d.message_id().to_string());
        ledger.dropping(d.delivery_attempt())
    }))
}

/// The soak's handlers panic on purpose; keep those out of the output, print any other.
fn quiet_expected_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .copied()
            .unwrap_or_default();
        if !message.starts_with("soak: ") {
            previous(info);
        }
    }));
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

#[actix_rt::test]
async fn soak_every_message_meets_its_fate_with_no_loss_and_no_duplicate_effect() {
    quiet_expected_panics();
    let count: usize = std::env::var("LEASEHOLD_SOAK_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CI_MESSAGES);
    let began = Instant::now();
    let (scratch, dead_subscription) = Scratch::with_dead_letter_topic(
        |s| s.set_enable_exactly_once_delivery(true),
        MAX_ATTEMPTS as i32,
    )
    .await;
    let dir = std::env::temp_dir().join(unique("soak"));
    std::fs::create_dir_all(&dir).unwrap();
    let db = Arc::new(redb::Database::create(dir.join("progress.redb")).unwrap());
    let ledger = Shared::default();
    let proxy = Proxy::start(&host());
    let through_proxy = Connection::emulator(&proxy.host());
    let start = |store| {
        let r = registration(&scratch.subscription, &ledger, store);
        let connection = through_proxy.clone();
        async move { leasehold::start(r, &connection).await.unwrap() }
    };
    let store = || RedbStore::with_database(db.clone(), &scratch.subscription, DEFAULT_TTL);

    let l = ledger.clone();
    let dead = leasehold::start(
        Registration::raw(&dead_subscription, move |data, d: Delivery| {
            let text = String::from_utf8_lossy(&data);
            let n = match serde_json::from_str::<Payload>(&text) {
                Ok(p) => p.n,
                Err(_) => text.trim_start_matches("undecodable #").parse().unwrap(),
            };
            *l.lock().dead_lettered.entry(n).or_default() += 1;
            async move { d.ack() }
        }),
        &scratch.connection,
    )
    .await
    .unwrap();

    let mut running: Subscription = start(store()).await;
    let mut expected: BTreeMap<String, Instruction> = BTreeMap::new();
    let mut index_of: HashMap<String, usize> = HashMap::new();
    for chunk in (0..count).collect::<Vec<_>>().chunks(1000) {
        let payloads = chunk.iter().map(|&n| match Instruction::for_index(n) {
            Instruction::Undecodable => format!("undecodable #{n}"),
            what => serde_json::to_string(&Payload { n, what }).unwrap(),
        });
        let ids = scratch.publish_all(payloads).await;
        for (&n, id) in chunk.iter().zip(ids) {
            index_of.insert(id.clone(), n);
            expected.insert(id, Instruction::for_index(n));
        }
    }
    let published_at = began.elapsed();

    // A message has met its fate when its instruction's end was observed.
    let met = |ledger: &Ledger, id: &String, what: &Instruction| match what {
        Instruction::Undecodable => ledger.undecodable.contains(id),
        Instruction::DeadLetter => ledger.dead_lettered.contains_key(&index_of[id]),
        _ => ledger.effects.contains_key(id),
    };
    // Or Pub/Sub dead-lettered it after the maximum delivery attempts: not lost, on the
    // dead-letter topic where an operator finds it.
    let accounted = |ledger: &Ledger, id: &String, what: &Instruction| {
        met(ledger, id, what) || ledger.dead_lettered.contains_key(&index_of[id])
    };
    let finished = |ledger: &Ledger| {
        expected
            .iter()
            .filter(|(id, what)| accounted(ledger, id, what))
            .count()
    };

    // Chaos: cut every connection at 20, 40, 60 and 80 % progress; stop and restart the
    // runtime at 50 %. Then wait until every message is accounted for, or nothing has moved
    // for STALL.
    const STALL: Duration = Duration::from_secs(60);
    let mut stats = StatsSnapshot::default();
    let (mut cuts, mut restarted) = (0, false);
    let (mut last, mut moved) = (0, Instant::now());
    // A bound on the whole run, so a soak that never settles fails instead of hanging.
    let deadline = Instant::now() + Duration::from_secs(300 + count as u64 / 20);
    loop {
        let done = finished(&ledger.lock());
        if done == count || moved.elapsed() > STALL {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "soak still moving after its deadline: {done} of {count} accounted for"
        );
        if done != last {
            (last, moved) = (done, Instant::now());
        }
        if cuts < 4 && done >= (cuts + 1) * count / 5 {
            proxy.cut_all();
            cuts += 1;
        }
        if !restarted && done >= count / 2 {
            running.stop().await;
            stats += running.stats();
            running = start(store()).await;
            restarted = true;
        }
        actix_rt::time::sleep(Duration::from_millis(200)).await;
    }
    running.stop().await;
    stats += running.stats();
    dead.stop().await;

    let ledger = std::mem::take(&mut *ledger.lock());
    let unmet: Vec<(&String, &Instruction)> = expected
        .iter()
        .filter(|(id, what)| !met(&ledger, id, what))
        .collect();
    // Messages Pub/Sub dead-lettered by itself: delivered the maximum number of times without
    // an ack reaching it (with the emulator: deliveries to streams that had closed).
    let dead_lettered_by_pubsub = unmet
        .iter()
        .filter(|(id, _)| ledger.dead_lettered.contains_key(&index_of[*id]))
        .count();
    let lost: Vec<_> = unmet
        .iter()
        .filter(|(id, what)| !accounted(&ledger, id, what))
        .collect();
    // Every message Leasehold received was settled: acked, nacked, dead-lettered or released
    // (nacked unrun at the stop), never dropped in silence, and never settled twice.
    let settled = stats.settled();
    let unsettled = stats.received.abs_diff(settled);
    let duplicate_effects = ledger.effects.values().filter(|&&n| n > 1).count();
    let dead_twice = ledger.dead_lettered.values().filter(|&&n| n > 1).count();
    let mut by_kind: BTreeMap<Instruction, usize> = BTreeMap::new();
    for what in expected.values() {
        *by_kind.entry(*what).or_default() += 1;
    }

    println!("\n== Leasehold chaos soak ==");
    println!("published          {count} in {published_at:.1?} ({by_kind:?})");
    println!(
        "acked              {} (confirmed {}), dropped {}, dead-lettered {} \
         (drops on the last attempt {}; arrived {})",
        stats.acked,
        stats.confirmed,
        stats.dropped,
        stats.dead_lettered,
        ledger.drops_on_last_attempt,
        ledger.dead_lettered.len()
    );
    println!(
        "retried            {} (held {}, panics {}), undecodable {}",
        stats.retried, stats.held, stats.panics, stats.decode_failures
    );
    println!(
        "failed acks        {}, lost leases {}, replayed from the store {}, released at stop {}",
        stats.failed_acks, stats.lost_leases, stats.replayed, stats.released
    );
    println!(
        "connection cuts    {cuts}, connections opened {}, stream restarts {}, runtime restarts {}",
        proxy.accepted(),
        stats.stream_restarts,
        u32::from(restarted)
    );
    println!(
        "settled            {settled} of {} received ({}); unsettled (lost by Leasehold) {unsettled}",
        stats.received,
        stats
            .settled_by_outcome()
            .map(|(outcome, n)| format!("{outcome} {n}"))
            .join(", ")
    );
    println!(
        "own fate reached   {} of {count}; the rest dead-lettered by Pub/Sub after \
         {MAX_ATTEMPTS} deliveries without an ack: {dead_lettered_by_pubsub}",
        count - unmet.len()
    );
    println!("lost               {}", lost.len());
    println!("duplicate effects  {duplicate_effects}");
    println!(
        "peak in-flight     {} messages\npeak RSS           {} MiB (whole test process)",
        stats.peak_outstanding,
        peak_rss_kib() / 1024
    );
    println!("took               {:.1?}", began.elapsed());

    assert_eq!(
        unsettled, 0,
        "received {} deliveries and settled {settled}: {stats:?}",
        stats.received
    );
    assert!(lost.is_empty(), "lost: {lost:?}");
    assert_eq!(duplicate_effects, 0);
    // Leasehold dead-letters only a `drop()` on the last attempt: one the handler chose, or a
    // recorded drop replayed from the store. Pub/Sub may add what never reached us.
    assert!(
        stats.dead_lettered >= ledger.drops_on_last_attempt
            && stats.dead_lettered <= ledger.drops_on_last_attempt + stats.replayed,
        "Leasehold dead-lettered {} messages; drops on the last attempt: {}, replayed: {}",
        stats.dead_lettered,
        ledger.drops_on_last_attempt,
        stats.replayed
    );
    assert_eq!(dead_twice, 0, "dead-lettered twice");
    assert_eq!(cuts, 4);
    assert!(restarted);
    assert!(stats.peak_outstanding <= 500);
    scratch.cleanup().await;
    let _ = std::fs::remove_dir_all(dir);
}
