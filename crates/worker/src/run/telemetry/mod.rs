//! Metrics and health over HTTP: Prometheus text at `/metrics`, liveness at
//! `/healthz` (503 with the cause once a fatal error is stopping the
//! worker, or while it makes no progress holding work: `stall.rs`), readiness at `/readyz` (sources running and DynamoDB reachable
//! through the writer's own client). Also the client side of `tidemark
//! healthcheck`, and the process's recorder: Prometheus plus the typed
//! `MetricsSnapshot` that worker reports and EMF lines read (`snapshot.rs`).

mod snapshot;
mod stall;

pub(crate) use snapshot::{Last, MetricsSnapshot, TypedMetrics, TypedRecorder, delta};
pub(crate) use stall::watch as watch_progress;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// What `/readyz` reports; set by the worker's wiring.
#[derive(Debug, Default)]
pub(crate) struct Readiness {
    /// The source is running (leases taken or queue polled).
    pub source_running: AtomicBool,
    /// The last DynamoDB probe, on the writer's own client (same endpoint,
    /// credentials, HTTP client and proxy as the writes), succeeded.
    pub dynamodb_reachable: AtomicBool,
    /// The worker is still starting (connecting to AWS, checking tables):
    /// `/healthz` answers 200 `starting`, so a health check does not kill a
    /// task that waits for AWS; `/readyz` is 503.
    pub starting: AtomicBool,
    /// The fatal error stopping the worker (the first one), if any.
    fatal: OnceLock<String>,
    /// Why the worker counts as stalled (no progress while holding work,
    /// `stall.rs`), if it does: `/healthz` answers 503 meanwhile.
    stalled: Mutex<Option<String>>,
}

impl Readiness {
    /// Ready when both hold and no fatal error is stopping the worker.
    pub(crate) fn is_ready(&self) -> bool {
        self.source_running.load(Ordering::Relaxed)
            && self.dynamodb_reachable.load(Ordering::Relaxed)
            && self.fatal().is_none()
    }

    /// Records the fatal error that stops the worker; `/healthz` reports it
    /// from then on. The first cause is kept (later ones follow from it).
    pub(crate) fn set_fatal(&self, cause: String) {
        let _ = self.fatal.set(cause);
    }

    /// The fatal error stopping the worker, if any.
    pub(crate) fn fatal(&self) -> Option<&str> {
        self.fatal.get().map(String::as_str)
    }

    /// Sets (or clears, with `None`) the stall `/healthz` reports.
    pub(crate) fn set_stalled(&self, cause: Option<String>) {
        if let Ok(mut s) = self.stalled.lock() {
            *s = cause;
        }
    }

    /// Why the worker counts as stalled, if it does.
    pub(crate) fn stalled(&self) -> Option<String> {
        self.stalled.lock().ok().and_then(|s| s.clone())
    }
}

/// Installs the global recorder for the `metrics` facade (once per
/// process: a worker started again in the same process, as the end-to-end
/// tests do, shares it) and describes every metric. Returns the Prometheus
/// handle `/metrics` renders and the typed copy reports and EMF read.
pub(crate) fn install_recorder()
-> Result<(PrometheusHandle, TypedMetrics), metrics_exporter_prometheus::BuildError> {
    static INSTALLED: OnceLock<(PrometheusHandle, TypedMetrics)> = OnceLock::new();
    // Held across the check and the install: two workers built at once in
    // one process (parallel tests) would otherwise both try to install, and
    // the second would fail.
    static INSTALLING: Mutex<()> = Mutex::new(());
    let _installing = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(installed) = INSTALLED.get() {
        return Ok(installed.clone());
    }
    let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = prometheus.handle();
    let recorder = TypedRecorder::new(prometheus);
    let typed = recorder.metrics();
    metrics::set_global_recorder(recorder).map_err(|e| {
        // The error PrometheusBuilder::install_recorder would give.
        metrics_exporter_prometheus::BuildError::FailedToSetGlobalRecorder(
            metrics::SetRecorderError(e.into_inner().into_inner()),
        )
    })?;
    describe_all();
    Ok(INSTALLED.get_or_init(|| (handle, typed)).clone())
}

/// Describes the metrics of every crate to the current recorder, so each
/// has a `# HELP` line on `/metrics`. THE one place to list the crates'
/// `describe()` functions.
pub(crate) fn describe_all() {
    crate::metrics::describe();
    tidemark_writer::metrics::describe();
    tidemark_consumer::metrics::describe();
    tidemark_governor::metrics::describe();
}

/// Serves the endpoints on `listener` until `shutdown`.
pub(crate) async fn serve(
    listener: Arc<TcpListener>,
    metrics: PrometheusHandle,
    ready: Arc<Readiness>,
    shutdown: CancellationToken,
) {
    loop {
        let (stream, _) = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    warn!(error = %e, "telemetry accept failed");
                    continue;
                }
            },
        };
        let metrics = metrics.clone();
        let ready = ready.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let response = respond(req.uri().path(), &metrics, &ready);
                async move { Ok::<_, Infallible>(response) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                debug!(error = %e, "telemetry connection ended");
            }
        });
    }
}

fn respond(path: &str, metrics: &PrometheusHandle, ready: &Readiness) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match path {
        "/metrics" => (
            StatusCode::OK,
            "text/plain; version=0.0.4",
            metrics.render(),
        ),
        "/healthz" => match ready.fatal() {
            None if ready.starting.load(Ordering::Relaxed) => {
                (StatusCode::OK, "text/plain", "starting\n".to_string())
            }
            // Alive but not moving while it holds work: let the
            // orchestrator replace it (`stall.rs`).
            None => match ready.stalled() {
                Some(cause) => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    format!("stalled: {cause}\n"),
                ),
                None => (StatusCode::OK, "text/plain", "ok\n".to_string()),
            },
            // Not healthy, whatever else works: the process is stopping.
            Some(cause) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                format!("stopping: fatal error: {cause}\n"),
            ),
        },
        "/readyz" if ready.is_ready() => (StatusCode::OK, "text/plain", "ready\n".to_string()),
        "/readyz" => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            format!(
                "not ready: source_running={} dynamodb_reachable={}\n",
                ready.source_running.load(Ordering::Relaxed),
                ready.dynamodb_reachable.load(Ordering::Relaxed)
            ),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found\n".to_string(),
        ),
    };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

/// `tidemark healthcheck`: GET `path` on `addr` (a worker's telemetry
/// address); Ok when it answers 200 within `timeout`. A plain HTTP/1.0
/// request, so the container image needs no curl.
pub(crate) async fn check(addr: SocketAddr, path: &str, timeout: Duration) -> Result<(), String> {
    let attempt = async {
        let mut s = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&buf);
        let status = text
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_string();
        if status == "200" {
            Ok(())
        } else {
            Err(format!(
                "{path} answered {}",
                text.lines().next().unwrap_or("nothing")
            ))
        }
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .map_err(|_| format!("{path} did not answer within {timeout:?}"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Workers built at once in one process (the end-to-end tests run in
    /// parallel) share the one recorder; none fails to install it.
    #[test]
    fn workers_built_at_once_share_one_recorder() {
        let start = Arc::new(std::sync::Barrier::new(8));
        let installs: Vec<_> = (0..8)
            .map(|_| {
                let start = start.clone();
                std::thread::spawn(move || {
                    start.wait();
                    install_recorder().map(|_| ()).map_err(|e| e.to_string())
                })
            })
            .collect();
        for install in installs {
            assert_eq!(install.join().unwrap(), Ok(()));
        }
    }

    #[test]
    fn writer_and_consumer_metrics_render_help_lines() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            tidemark_writer::metrics::describe();
            tidemark_consumer::metrics::describe();
            metrics::counter!(tidemark_writer::metrics::CALLS).increment(1);
            metrics::gauge!(tidemark_consumer::metrics::sqs::RECEIVERS).set(1.0);
        });
        let text = handle.render();
        assert!(
            text.contains("# HELP tidemark_writer_calls_total BatchWriteItem calls made."),
            "{text}"
        );
        assert!(
            text.contains("# HELP tidemark_consumer_sqs_receivers Receivers running."),
            "{text}"
        );
    }

    #[tokio::test]
    async fn endpoints_answer_and_readiness_follows_state() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            metrics::counter!("tidemark_records_read_total").increment(3);
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let ready = Arc::new(Readiness::default());
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(serve(
            Arc::new(listener),
            handle,
            ready.clone(),
            shutdown.clone(),
        ));

        let t = Duration::from_secs(5);
        check(addr, "/healthz", t).await.unwrap();
        let err = check(addr, "/readyz", t).await.unwrap_err();
        assert!(err.contains("503"), "{err}");
        ready.source_running.store(true, Ordering::Relaxed);
        ready.dynamodb_reachable.store(true, Ordering::Relaxed);
        check(addr, "/readyz", t).await.unwrap();
        assert!(check(addr, "/nope", t).await.unwrap_err().contains("404"));

        // A fatal error: /healthz says so, with the cause, while stopping.
        ready.set_fatal("fatal DynamoDB error on table t: AccessDeniedException: no".into());
        let err = check(addr, "/healthz", t).await.unwrap_err();
        assert!(err.contains("503"), "{err}");
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").await.unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).await.unwrap();
        assert!(
            body.contains(
                "stopping: fatal error: fatal DynamoDB error on table t: AccessDeniedException"
            ),
            "{body}"
        );
        assert!(check(addr, "/readyz", t).await.unwrap_err().contains("503"));

        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await.unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).await.unwrap();
        assert!(body.contains("tidemark_records_read_total 3"), "{body}");

        shutdown.cancel();
        server.await.unwrap();
    }

    /// A stalled worker (no progress while holding work) answers 503 on
    /// `/healthz` with the cause, and 200 again once it moves.
    #[tokio::test]
    async fn healthz_answers_503_while_stalled() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let ready = Arc::new(Readiness::default());
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(serve(
            Arc::new(listener),
            recorder.handle(),
            ready.clone(),
            shutdown.clone(),
        ));
        let t = Duration::from_secs(5);
        check(addr, "/healthz", t).await.unwrap();
        ready.set_stalled(Some(
            "no progress for 300s while holding 2 leases held".into(),
        ));
        let err = check(addr, "/healthz", t).await.unwrap_err();
        assert!(err.contains("503"), "{err}");
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").await.unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).await.unwrap();
        assert!(body.contains("stalled: no progress for 300s"), "{body}");
        ready.set_stalled(None);
        check(addr, "/healthz", t).await.unwrap();
        shutdown.cancel();
        server.await.unwrap();
    }

    #[test]
    fn every_metric_on_the_page_has_a_help_line() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            describe_all();
            for name in crate::metrics::ALL {
                metrics::counter!(name).increment(1);
            }
        });
        let page = handle.render();
        let typed: Vec<&str> = page
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        assert_eq!(typed.len(), crate::metrics::ALL.len(), "{page}");
        for name in typed {
            assert!(
                page.lines()
                    .any(|l| l.starts_with(&format!("# HELP {name} "))),
                "no HELP line for {name}:\n{page}"
            );
        }
    }
}
