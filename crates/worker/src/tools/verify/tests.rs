#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

const FAST: Duration = Duration::from_secs(3);

#[test]
fn the_limit_grows_by_about_one_per_window_of_fast_successes_up_to_the_cap() {
    let mut law = Aimd::new(2, 8, FAST);
    assert_eq!(law.limit(), 2);
    // 2 + 1/2 + 1/2.5 + 1/2.9: three fast successes, limit 3.
    for _ in 0..3 {
        law.on_success(Duration::from_millis(50), false);
    }
    assert_eq!(law.limit(), 3);
    for _ in 0..1000 {
        law.on_success(Duration::from_millis(50), false);
    }
    assert_eq!(law.limit(), 8, "capped");
}

#[test]
fn after_a_cut_the_limit_stays_below_the_level_cut_until_a_probe_is_due() {
    let mut law = Aimd::new(4, 8, FAST);
    law.on_congestion(law.window());
    assert_eq!(law.limit(), 2);
    for _ in 0..PROBE_AFTER - 1 {
        law.on_success(Duration::from_millis(50), false);
    }
    assert_eq!(law.limit(), 3, "one below the level cut");
    // 3 + 1/3 + 1/3.33 + 1/3.63 + 1/3.91: four more successes.
    for _ in 0..4 {
        law.on_success(Duration::from_millis(50), false);
    }
    assert_eq!(law.limit(), 4, "probing again");
}

#[test]
fn slow_successes_or_a_stalled_call_hold_the_limit() {
    let mut law = Aimd::new(2, 8, FAST);
    for _ in 0..100 {
        law.on_success(Duration::from_secs(5), false);
        law.on_success(Duration::from_millis(50), true);
    }
    assert_eq!(law.limit(), 2);
}

#[test]
fn congestion_halves_once_per_window_and_never_below_one() {
    let mut law = Aimd::new(8, 8, FAST);
    let w = law.window();
    // Eight calls of one window time out together: one cut.
    for _ in 0..8 {
        law.on_congestion(w);
    }
    assert_eq!(law.limit(), 4);
    law.on_congestion(law.window());
    assert_eq!(law.limit(), 2);
    law.on_congestion(law.window());
    law.on_congestion(law.window());
    law.on_congestion(law.window());
    assert_eq!(law.limit(), 1);
}

#[test]
fn back_off_grows_per_cut_is_capped_and_one_success_does_not_reset_it() {
    let mut law = Aimd::new(2, 8, FAST);
    assert_eq!(law.backoff(), Duration::ZERO);
    law.on_congestion(law.window());
    assert_eq!(law.backoff(), BACKOFF_BASE);
    law.on_congestion(law.window());
    assert_eq!(law.backoff(), BACKOFF_BASE * 2);
    for _ in 0..20 {
        law.on_congestion(law.window());
    }
    assert_eq!(law.backoff(), BACKOFF_MAX);
    law.on_success(Duration::from_millis(10), false);
    assert_eq!(law.backoff(), BACKOFF_MAX, "one success is one step down");
    for _ in 0..20 {
        law.on_success(Duration::from_millis(10), false);
    }
    assert_eq!(law.backoff(), Duration::ZERO);
}

#[test]
fn full_jitter_stays_within_its_cap() {
    let cap = Duration::from_secs(2);
    let draws: Vec<Duration> = (0..1000).map(|_| full_jitter(cap)).collect();
    assert!(draws.iter().all(|d| *d <= cap));
    assert!(draws.iter().any(|d| *d < cap / 2), "spread, not a constant");
}

fn jobs(n: usize) -> Vec<Job> {
    (0..n)
        .map(|j| Job {
            table: "t".into(),
            keys: (0..100)
                .map(|k| (format!("p{j}"), format!("s{k:03}")))
                .collect(),
        })
        .collect()
}

fn all_found(job: &Job) -> Read {
    Read {
        items: job
            .keys
            .iter()
            .map(|k| (k.clone(), HashMap::new()))
            .collect(),
        unprocessed: Vec::new(),
    }
}

fn options() -> VerifyOptions {
    VerifyOptions {
        endpoint: "http://127.0.0.1:9".into(),
        ..VerifyOptions::default()
    }
}

/// A backend that serves `capacity` calls at a time in 100 ms. A call
/// beyond that is throttled at once (DynamoDB), or with `hang` waits
/// out the attempt timeout (an emulator or a connection that is stuck).
struct Backend {
    capacity: usize,
    hang: bool,
    in_flight: Cell<usize>,
    peak: Cell<usize>,
    calls: Cell<usize>,
    timeouts: Cell<usize>,
}

impl Backend {
    fn new(capacity: usize, hang: bool) -> Rc<Backend> {
        Rc::new(Backend {
            capacity,
            hang,
            in_flight: Cell::new(0),
            peak: Cell::new(0),
            calls: Cell::new(0),
            timeouts: Cell::new(0),
        })
    }

    fn throttled_share(&self) -> f64 {
        self.timeouts.get() as f64 / self.calls.get() as f64
    }

    async fn call(self: Rc<Self>, job: Job, timeout: Duration) -> Result<Read, CallError> {
        self.calls.set(self.calls.get() + 1);
        self.in_flight.set(self.in_flight.get() + 1);
        self.peak.set(self.peak.get().max(self.in_flight.get()));
        let overloaded = self.in_flight.get() > self.capacity;
        let result = if overloaded && self.hang {
            tokio::time::sleep(timeout).await;
            self.timeouts.set(self.timeouts.get() + 1);
            Err(CallError::Congestion("attempt timeout".into()))
        } else if overloaded {
            tokio::time::sleep(Duration::from_millis(5)).await;
            self.timeouts.set(self.timeouts.get() + 1);
            Err(CallError::Congestion("ThrottlingException".into()))
        } else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Ok(all_found(&job))
        };
        self.in_flight.set(self.in_flight.get() - 1);
        result
    }
}

#[tokio::test(start_paused = true)]
async fn a_throttling_backend_gets_few_excess_calls_and_every_key_is_read() {
    let backend = Backend::new(3, false);
    let opts = options();
    let stored = drive(jobs(200), &opts, |job| {
        backend.clone().call(job, opts.attempt_timeout)
    })
    .await
    .unwrap();
    assert_eq!(stored["t"].len(), 200 * 100);
    assert!(backend.peak.get() <= opts.max_concurrency);
    // Each probe past capacity costs a throttle, then the limit halves
    // and backs off: a few wasted calls over 200 jobs, not a storm.
    let throttled = backend.throttled_share();
    assert!(throttled < 0.05, "{throttled}");
    assert_eq!(
        backend.calls.get(),
        200 + backend.timeouts.get(),
        "only failed calls are repeated"
    );
}

#[tokio::test(start_paused = true)]
async fn a_backend_that_hangs_past_capacity_costs_few_timeouts() {
    let backend = Backend::new(3, true);
    let opts = options();
    let stored = drive(jobs(200), &opts, |job| {
        backend.clone().call(job, opts.attempt_timeout)
    })
    .await
    .unwrap();
    assert_eq!(stored["t"].len(), 200 * 100);
    // Every probe of the 4th slot hangs the backend's whole queue (4
    // timeouts); probes are PROBE_AFTER successes apart.
    let timeouts = backend.timeouts.get();
    assert!(timeouts <= 20, "{timeouts} timeouts");
}

#[tokio::test(start_paused = true)]
async fn a_fast_backend_is_read_at_the_cap() {
    let backend = Backend::new(usize::MAX, false);
    let opts = options();
    let started = Instant::now();
    drive(jobs(400), &opts, |job| {
        backend.clone().call(job, opts.attempt_timeout)
    })
    .await
    .unwrap();
    assert_eq!(backend.peak.get(), opts.max_concurrency);
    assert_eq!(backend.calls.get(), 400);
    // 400 calls of 100 ms at (soon) 8 at a time: about 5 s, not 40 s.
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_dead_backend_is_unavailable_at_the_deadline_with_few_calls() {
    let backend = Backend::new(0, true);
    let opts = VerifyOptions {
        unavailable_after: Duration::from_secs(120),
        ..options()
    };
    let started = Instant::now();
    let err = drive(jobs(50), &opts, |job| {
        backend.clone().call(job, opts.attempt_timeout)
    })
    .await
    .unwrap_err();
    assert_eq!(started.elapsed(), opts.unavailable_after);
    let VerifyError::Unavailable {
        endpoint,
        failures,
        last,
        ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(endpoint, "http://127.0.0.1:9");
    assert!(last.contains("attempt timeout"));
    // 2 calls, then 1 at a time every 30 s plus back-off: about 5 in all.
    assert!(backend.calls.get() <= 6, "{} calls", backend.calls.get());
    assert!(*failures >= 3);
    assert!(err.to_string().contains("http://127.0.0.1:9"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn refused_calls_back_off_instead_of_spinning() {
    let calls = Cell::new(0usize);
    let opts = VerifyOptions {
        unavailable_after: Duration::from_secs(60),
        ..options()
    };
    let err = drive(jobs(5), &opts, |_job| {
        calls.set(calls.get() + 1);
        async { Err::<Read, _>(CallError::Congestion("connection refused".into())) }
    })
    .await
    .unwrap_err();
    assert!(matches!(err, VerifyError::Unavailable { .. }));
    // Back-off capped at 10 s (mean 5 s) over 60 s: tens of calls, not
    // the millions an instant retry loop would send.
    assert!(calls.get() < 60, "{} calls", calls.get());
}

#[tokio::test(start_paused = true)]
async fn unprocessed_keys_are_read_again_after_a_back_off() {
    let seen = RefCell::new(Vec::new());
    let opts = options();
    let stored = drive(jobs(4), &opts, |job| {
        seen.borrow_mut().push(job.keys.len());
        // The first read of each full job leaves its second half.
        let read = if job.keys.len() == 100 {
            let (done, rest) = job.keys.split_at(50);
            Read {
                items: done.iter().map(|k| (k.clone(), HashMap::new())).collect(),
                unprocessed: rest.to_vec(),
            }
        } else {
            all_found(&job)
        };
        async move { Ok(read) }
    })
    .await
    .unwrap();
    assert_eq!(stored["t"].len(), 400);
    assert_eq!(seen.borrow().iter().filter(|n| **n == 50).count(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_fatal_error_stops_at_once_and_a_missing_table_holds_nothing() {
    let opts = options();
    let err = drive(jobs(3), &opts, |_job| async {
        Err::<Read, _>(CallError::Fatal("AccessDeniedException".into()))
    })
    .await
    .unwrap_err();
    assert!(matches!(err, VerifyError::Failed(ref e) if e.contains("AccessDenied")));
    let stored = drive(jobs(3), &opts, |_job| async {
        Err::<Read, _>(CallError::MissingTable)
    })
    .await
    .unwrap();
    assert!(stored.is_empty());
}

/// Real time, real SDK: nothing listens on the port, so every call is
/// refused; verify must give up at its deadline, naming the endpoint.
#[tokio::test]
async fn an_unreachable_endpoint_is_unavailable_within_the_deadline() {
    use aws_config::{BehaviorVersion, Region};
    use tidemark_schema::route::RouterConfig;
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}");
    let sdk = aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "test", "test", None, None, "test",
        ))
        .load()
        .await;
    let client = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&sdk)
            .endpoint_url(&url)
            .build(),
    );
    let router = Router::new(RouterConfig::with_prefix("verify_unreachable")).unwrap();
    let spec = crate::tools::produce::ProduceSpec {
        devices: 5,
        count: 300,
        hot_factor: 1,
        seed: 7,
    };
    let events: Vec<Vec<u8>> = (0..spec.count)
        .map(|n| serde_json::to_vec(&spec.event(n, Utc::now())).unwrap())
        .collect();
    let opts = VerifyOptions {
        endpoint: url.clone(),
        unavailable_after: Duration::from_secs(3),
        ..VerifyOptions::default()
    };
    let started = std::time::Instant::now();
    let err = verify(&client, &router, &events, &opts).await.unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, VerifyError::Unavailable { .. }), "{err:?}");
    assert!(err.to_string().contains(&url), "{err}");
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(5),
        "{took:?}"
    );
}
