//! The dead-letter queue and its task: retries, concurrency, the byte
//! bound, the fallback file.

use super::super::entry::samples::entry;
use super::*;
use futures::future::BoxFuture;

use tokio::time::Instant;

/// Refuses for good any call holding an entry whose payload is "poison", or
/// every call when `down`. Counts calls.
#[derive(Default)]
struct Picky {
    calls: std::sync::Mutex<Vec<usize>>,
    down: bool,
}

impl DeadLetterSink for Arc<Picky> {
    fn write<'a>(
        &'a self,
        entries: &'a [DeadLetter],
    ) -> BoxFuture<'a, Result<(), DeadLetterError>> {
        self.calls.lock().unwrap().push(entries.len());
        let poisoned = entries.iter().any(|e| e.payload().unwrap() == b"poison");
        let fail = self.down || poisoned;
        Box::pin(async move {
            if fail {
                return Err(DeadLetterError::Destination {
                    destination: "picky".into(),
                    message: "refused".into(),
                    permanent: true,
                });
            }
            Ok(())
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_refused_batch_is_split_so_only_the_bad_entry_is_refused() {
    let sink = Arc::new(Picky::default());
    let entries: Vec<DeadLetter> = (0..10)
        .map(|n| entry(n, if n == 6 { b"poison" } else { b"fine" }))
        .collect();
    let (refused, last) = store(&sink, &entries).await;
    assert_eq!(refused, vec![6]);
    assert!(last.is_some_and(|e| e.to_string().contains("refused")));
    let calls = sink.calls.lock().unwrap().clone();
    // The whole batch once, then halves down to the bad entry.
    assert_eq!(calls[0], 10);
    assert!(calls.len() <= 1 + 2 * 10, "{calls:?}");
}

#[tokio::test(start_paused = true)]
async fn entries_refused_for_good_go_to_the_fallback_file_or_stop_the_worker() {
    use tidemark_consumer::kinesis::{AckTracker, Position};
    let path = fallback_path("refused");
    let sink = Arc::new(Picky {
        down: true,
        ..Picky::default()
    });
    let (dead, task) = DeadLetters::start(Arc::new(sink.clone()), Some(path.clone()));
    let tracker = Arc::new(AckTracker::new());
    for n in 0..3u32 {
        let serial = tracker
            .push(Position::new(n.to_string().as_str(), 0))
            .unwrap();
        dead.send(entry(n, b"x"), Some(Ack::new(tracker.clone(), serial)));
    }
    drop(dead);
    task.await.unwrap().unwrap();
    assert_eq!(
        tracker.in_flight(),
        0,
        "acknowledged once in the fallback file"
    );
    let lines: Vec<DeadLetter> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);

    // No fallback configured: fatal, naming the cause, and the record stays
    // unacknowledged.
    let (dead, task) = DeadLetters::start(Arc::new(sink.clone()), None);
    let serial = tracker.push(Position::new("9", 0)).unwrap();
    dead.send(entry(9, b"x"), Some(Ack::new(tracker.clone(), serial)));
    drop(dead);
    let e = task.await.unwrap().unwrap_err().to_string();
    assert!(
        e.contains("1 entries refused for good: refused")
            && e.contains("no dead_letters.fallback_path"),
        "{e}"
    );
    assert_eq!(tracker.in_flight(), 1);
}

/// A transient failure as the sinks report one (a timeout, a 5xx).
fn transient(message: &str) -> DeadLetterError {
    DeadLetterError::Destination {
        destination: "flaky".into(),
        message: message.into(),
        permanent: false,
    }
}

/// A destination in trouble until `until`: each call then either gives
/// up after the SDK's 10 s attempt timeout (`hang`) or fails at once (a
/// 5xx); afterwards every call takes `latency` and stores its entries.
/// Counts stored entries and the most calls in flight at once.
struct Flaky {
    until: Instant,
    hang: bool,
    latency: Duration,
    stored: std::sync::Mutex<usize>,
    in_flight: std::sync::atomic::AtomicUsize,
    most_in_flight: std::sync::atomic::AtomicUsize,
}

impl Flaky {
    fn new(trouble: Duration, hang: bool, latency: Duration) -> Arc<Self> {
        Arc::new(Flaky {
            until: Instant::now() + trouble,
            hang,
            latency,
            stored: Default::default(),
            in_flight: Default::default(),
            most_in_flight: Default::default(),
        })
    }
}

impl DeadLetterSink for Arc<Flaky> {
    fn write<'a>(
        &'a self,
        entries: &'a [DeadLetter],
    ) -> BoxFuture<'a, Result<(), DeadLetterError>> {
        use std::sync::atomic::Ordering::SeqCst;
        Box::pin(async move {
            let now = Instant::now();
            if now < self.until {
                if self.hang {
                    tokio::time::sleep(Duration::from_secs(10).min(self.until - now)).await;
                    return Err(transient("no answer within the attempt timeout"));
                }
                return Err(transient("InternalError (500)"));
            }
            let n = self.in_flight.fetch_add(1, SeqCst) + 1;
            self.most_in_flight.fetch_max(n, SeqCst);
            tokio::time::sleep(self.latency).await;
            self.in_flight.fetch_sub(1, SeqCst);
            *self.stored.lock().unwrap() += entries.len();
            Ok(())
        })
    }
}

/// A fresh fallback path of the test `name` (absent).
fn fallback_path(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tidemark-dl-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("fallback.jsonl");
    let _ = std::fs::remove_file(&path);
    path
}

/// Lines in the fallback file (0 when it was never created).
fn fallback_lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// A destination that hangs for 35 s and then recovers (the chaos
/// suite's dlq-hang): its entries are retried until it answers, none
/// goes to the fallback file, and no record is acknowledged before its
/// entry is in the destination.
#[tokio::test(start_paused = true)]
async fn a_hung_destination_is_waited_for_and_nothing_goes_to_the_fallback() {
    use tidemark_consumer::kinesis::{AckTracker, Position};
    for hang in [true, false] {
        let sink = Flaky::new(Duration::from_secs(35), hang, Duration::from_millis(20));
        let path = fallback_path(if hang { "hang" } else { "5xx" });
        let (dead, task) = DeadLetters::start(Arc::new(sink.clone()), Some(path.clone()));
        let tracker = Arc::new(AckTracker::new());
        for n in 0..3u32 {
            let serial = tracker
                .push(Position::new(n.to_string().as_str(), 0))
                .unwrap();
            dead.send(entry(n, b"x"), Some(Ack::new(tracker.clone(), serial)));
        }
        tokio::time::sleep(Duration::from_secs(34)).await;
        assert_eq!(
            tracker.in_flight(),
            3,
            "acknowledged before the destination took them (hang {hang})"
        );
        drop(dead);
        task.await.unwrap().unwrap();
        assert_eq!(tracker.in_flight(), 0, "acknowledged once stored");
        assert_eq!(
            *sink.stored.lock().unwrap(),
            3,
            "every entry in the destination"
        );
        assert_eq!(fallback_lines(&path), 0, "nothing only in a local file");
    }
}

/// A slow destination (1 s a call) gets several batches at once, not
/// one after the other.
#[tokio::test(start_paused = true)]
async fn several_batches_are_written_at_once() {
    use std::sync::atomic::Ordering::SeqCst;
    let sink = Flaky::new(Duration::ZERO, false, Duration::from_secs(1));
    let (dead, task) = DeadLetters::start(Arc::new(sink.clone()), None);
    for n in 0..400u32 {
        dead.send(entry(n, b"x"), None);
    }
    let started = Instant::now();
    drop(dead);
    task.await.unwrap().unwrap();
    assert_eq!(*sink.stored.lock().unwrap(), 400);
    assert!(
        sink.most_in_flight.load(SeqCst) >= 2,
        "one batch at a time: {}",
        sink.most_in_flight.load(SeqCst)
    );
    assert!(
        started.elapsed() <= Duration::from_secs(2),
        "400 entries took {:?}",
        started.elapsed()
    );
}

/// While the destination hangs, the queue fills up to its bytes and no
/// further: a bounded send then waits, and resumes once entries are stored.
#[tokio::test(start_paused = true)]
async fn a_full_queue_holds_bounded_senders_back() {
    let sink = Flaky::new(Duration::from_secs(60), true, Duration::ZERO);
    let one = entry(0, &[b'x'; 1000]).cost();
    let cap = 20 * one;
    let (dead, task) = DeadLetters::start_with(Arc::new(sink.clone()), None, cap);
    let sender = dead.clone();
    let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = sent.clone();
    let producer = tokio::spawn(async move {
        for n in 0..100u32 {
            sender.send_bounded(entry(n, &[b'x'; 1000]), None).await;
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    tokio::time::sleep(Duration::from_secs(30)).await;
    let queued = sent.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        queued <= 20,
        "{queued} entries queued past a {cap}-byte bound"
    );
    assert!(dead.queued_bytes() <= cap, "{} bytes", dead.queued_bytes());
    // The destination recovers: everything goes through.
    producer.await.unwrap();
    drop(dead);
    task.await.unwrap().unwrap();
    assert_eq!(*sink.stored.lock().unwrap(), 100);
}
