//! [`DeadLetters`]: the queue every dead letter goes through, and the task
//! that makes each durable before its record is acknowledged: bounded
//! retries, halving of a failing batch, then the local fallback file.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use tidemark_consumer::record::Ack;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{error, warn};

use super::{DeadLetter, DeadLetterError, DeadLetterSink, FileSink};

/// How long one batch of dead letters may take, retries and splits
/// included, before what is left goes to the fallback file.
pub(crate) const WRITE_DEADLINE: Duration = Duration::from_secs(30);

/// Attempts of a whole batch before it is split.
const BATCH_ATTEMPTS: usize = 3;

/// A dead letter waiting to be written, with the acknowledgement to give
/// once it is durable (None for records with no source to advance).
type Pending = (DeadLetter, Option<Ack>);

/// Cheap, cloneable handle that queues dead letters for the writer task.
#[derive(Debug, Clone)]
pub(crate) struct DeadLetters {
    tx: mpsc::UnboundedSender<Pending>,
}

impl DeadLetters {
    /// Starts the task writing to `sink`, with entries that fail for good
    /// going to the file at `fallback` (none: such a failure is fatal). It
    /// ends when every handle is dropped and the queue is written out, or
    /// with an error when an entry could be written nowhere.
    pub(crate) fn start(
        sink: Arc<dyn DeadLetterSink>,
        fallback: Option<PathBuf>,
    ) -> (
        DeadLetters,
        tokio::task::JoinHandle<Result<(), DeadLetterError>>,
    ) {
        // Unbounded is safe here: every entry is one in-flight record, and
        // those are bounded by the sources' and the writer's in-flight limits.
        let (tx, rx) = mpsc::unbounded_channel();
        let fallback = fallback.map(FileSink::new);
        let task = tokio::spawn(run(sink, fallback, rx));
        (DeadLetters { tx }, task)
    }

    /// Queues `entry`; `ack` is acknowledged once it is durable.
    pub(crate) fn send(&self, entry: DeadLetter, ack: Option<Ack>) {
        metrics::counter!(crate::metrics::DEAD_LETTERS, "reason" => entry.reason.as_str())
            .increment(1);
        if let Err(mpsc::error::SendError((entry, _ack))) = self.tx.send((entry, ack)) {
            // Only after shutdown: the record stays unacknowledged, so the
            // source delivers it again on restart. Nothing is lost.
            warn!(reason = %entry.reason, source = %entry.source, "dead-letter task has stopped; record left unacknowledged");
        }
    }
}

async fn run(
    sink: Arc<dyn DeadLetterSink>,
    fallback: Option<FileSink>,
    mut rx: mpsc::UnboundedReceiver<Pending>,
) -> Result<(), DeadLetterError> {
    let mut buf: Vec<Pending> = Vec::new();
    while rx.recv_many(&mut buf, 100).await > 0 {
        let entries: Vec<DeadLetter> = buf.iter().map(|(e, _)| e.clone()).collect();
        let deadline = Instant::now() + WRITE_DEADLINE;
        let (failed, last_error) = store(sink.as_ref(), &entries, deadline).await;
        if !failed.is_empty() {
            let left: Vec<DeadLetter> = failed.iter().map(|i| entries[*i].clone()).collect();
            let Some(file) = &fallback else {
                // Named after the destination's own last error: the cause.
                let (destination, why) = match last_error {
                    Some(DeadLetterError::Destination {
                        destination,
                        message,
                    }) => (destination, message),
                    None => ("dead letters".into(), "no answer".into()),
                };
                let e = DeadLetterError::Destination {
                    destination,
                    message: format!("{} entries could not be written: {why}", left.len()),
                };
                error!(error = %e, "dead letters cannot be stored: stopping");
                return Err(e);
            };
            warn!(
                entries = left.len(),
                path = %file.path().display(),
                "dead-letter destination failed for good: writing to the fallback file"
            );
            metrics::counter!(crate::metrics::DEAD_LETTER_FALLBACKS).increment(left.len() as u64);
            if let Err(e) = file.write(&left).await {
                error!(error = %e, "the dead-letter fallback file cannot be written either: stopping");
                return Err(e);
            }
        }
        for (_, ack) in buf.drain(..) {
            if let Some(ack) = ack {
                ack.done();
            }
        }
    }
    Ok(())
}

/// Writes `entries` to `sink` with bounded retries: the whole batch up to
/// [`BATCH_ATTEMPTS`] times, then each half on its own (recursively, so one
/// bad entry cannot hold back the others), all by `deadline`. Returns the
/// indexes of the entries that failed for good, and the last error seen.
async fn store(
    sink: &dyn DeadLetterSink,
    entries: &[DeadLetter],
    deadline: Instant,
) -> (Vec<usize>, Option<DeadLetterError>) {
    let mut delays = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(2))
        .with_jitter()
        .without_max_times()
        .build();
    // (start index, length, attempts left) of each part still to write.
    let mut todo = vec![(0usize, entries.len(), BATCH_ATTEMPTS)];
    let mut failed = Vec::new();
    let mut last_error = None;
    while let Some((start, len, attempts)) = todo.pop() {
        let part = &entries[start..start + len];
        let result = match tokio::time::timeout_at(deadline, sink.write(part)).await {
            Ok(r) => r,
            Err(_) => Err(DeadLetterError::Destination {
                destination: "dead letters".into(),
                message: format!("no answer within {WRITE_DEADLINE:?}"),
            }),
        };
        let Err(e) = result else { continue };
        metrics::counter!(crate::metrics::DEAD_LETTER_WRITE_ERRORS).increment(1);
        warn!(error = %e, entries = len, "writing dead letters failed");
        last_error = Some(e);
        if Instant::now() >= deadline {
            failed.extend(start..start + len);
            failed.extend(todo.drain(..).flat_map(|(s, l, _)| s..s + l));
            break;
        }
        if attempts > 1 {
            let delay = delays.next().unwrap_or(Duration::from_secs(2));
            tokio::time::sleep_until((Instant::now() + delay).min(deadline)).await;
            todo.push((start, len, attempts - 1));
        } else if len > 1 {
            // Halves get one try each, and are split again if they fail.
            let half = len / 2;
            todo.push((start + half, len - half, 1));
            todo.push((start, half, 1));
        } else {
            failed.push(start);
        }
    }
    failed.sort_unstable();
    (failed, last_error)
}

#[cfg(test)]
mod tests {
    use super::super::entry::samples::entry;
    use super::*;
    use futures::future::BoxFuture;

    /// Refuses any call holding an entry whose payload is "poison", or
    /// every call when `down`; never answers when `hang`. Counts calls.
    #[derive(Default)]
    struct Picky {
        calls: std::sync::Mutex<Vec<usize>>,
        down: bool,
        hang: bool,
    }

    impl DeadLetterSink for Arc<Picky> {
        fn write<'a>(
            &'a self,
            entries: &'a [DeadLetter],
        ) -> BoxFuture<'a, Result<(), DeadLetterError>> {
            self.calls.lock().unwrap().push(entries.len());
            let poisoned = entries.iter().any(|e| e.payload().unwrap() == b"poison");
            let fail = self.down || poisoned;
            let hang = self.hang;
            Box::pin(async move {
                if hang {
                    std::future::pending::<()>().await;
                }
                if fail {
                    return Err(DeadLetterError::Destination {
                        destination: "picky".into(),
                        message: "refused".into(),
                    });
                }
                Ok(())
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_batch_is_split_so_only_the_bad_entry_fails() {
        let sink = Arc::new(Picky::default());
        let entries: Vec<DeadLetter> = (0..10)
            .map(|n| entry(n, if n == 6 { b"poison" } else { b"fine" }))
            .collect();
        let (failed, last) = store(&sink, &entries, Instant::now() + WRITE_DEADLINE).await;
        assert_eq!(failed, vec![6]);
        assert!(last.is_some_and(|e| e.to_string().contains("refused")));
        let calls = sink.calls.lock().unwrap().clone();
        // 3 tries of the whole batch, then halves down to the bad entry.
        assert_eq!(&calls[..BATCH_ATTEMPTS], &[10, 10, 10]);
        assert!(calls.len() <= BATCH_ATTEMPTS + 2 * 10, "{calls:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_destination_that_never_answers_is_given_up_at_the_deadline() {
        let sink = Arc::new(Picky {
            hang: true,
            ..Picky::default()
        });
        let entries: Vec<DeadLetter> = (0..4).map(|n| entry(n, b"x")).collect();
        let started = Instant::now();
        let (failed, _) = store(&sink, &entries, started + WRITE_DEADLINE).await;
        assert_eq!(failed, vec![0, 1, 2, 3]);
        assert_eq!(started.elapsed(), WRITE_DEADLINE);
    }

    #[tokio::test(start_paused = true)]
    async fn entries_that_fail_for_good_go_to_the_fallback_file_and_are_acked() {
        use tidemark_consumer::checkpoint::{AckTracker, Position};
        let dir = std::env::temp_dir().join(format!("tidemark-dlf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("fallback.jsonl");
        let _ = std::fs::remove_file(&path);
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

        // No fallback (a file destination) and a failing sink: fatal, and
        // the record stays unacknowledged.
        let (dead, task) = DeadLetters::start(Arc::new(sink.clone()), None);
        let serial = tracker.push(Position::new("9", 0)).unwrap();
        dead.send(entry(9, b"x"), Some(Ack::new(tracker.clone(), serial)));
        drop(dead);
        let e = task.await.unwrap().unwrap_err().to_string();
        assert!(e.contains("1 entries could not be written: refused"), "{e}");
        assert_eq!(tracker.in_flight(), 1);
    }

    /// A transient failure as the sinks report one (a timeout, a 5xx).
    fn transient(message: &str) -> DeadLetterError {
        DeadLetterError::Destination {
            destination: "flaky".into(),
            message: message.into(),
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
        use tidemark_consumer::checkpoint::{AckTracker, Position};
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
            assert_eq!(*sink.stored.lock().unwrap(), 3, "every entry in the destination");
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
}
