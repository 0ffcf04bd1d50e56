//! Shared set-up of the integration tests: gate on TIDEMARK_IT, start a proxy
//! in-process on 127.0.0.1 in front of the local stack.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use tidemark_limits::{Config, Proxy, serve};

/// The stack's endpoints, or `None` (test skipped) unless TIDEMARK_IT=1.
pub fn stack(test: &str) -> Option<(String, String, String)> {
    if std::env::var("TIDEMARK_IT").as_deref() != Ok("1") {
        eprintln!(
            "skipping {test}: set TIDEMARK_IT=1 and load localstack/.env to run it against the local stack"
        );
        return None;
    }
    let get = |k: &str| {
        std::env::var(k).unwrap_or_else(|_| panic!("TIDEMARK_IT=1 but {k} is unset: run localstack/up and `set -a; . localstack/.env; set +a`"))
    };
    let urls = (
        get("AWS_ENDPOINT_URL_DYNAMODB"),
        get("AWS_ENDPOINT_URL_KINESIS"),
        get("AWS_ENDPOINT_URL_SQS"),
    );
    for u in [&urls.0, &urls.1] {
        let addr = u.trim_start_matches("http://").trim_end_matches('/');
        std::net::TcpStream::connect_timeout(
            &addr.parse().expect("endpoint is host:port"),
            Duration::from_secs(2),
        )
        .unwrap_or_else(|e| panic!("TIDEMARK_IT=1 but the local stack at {u} is unreachable: {e}"));
    }
    Some(urls)
}

/// A running proxy.
pub struct Running {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The proxy, for reading stats directly.
    pub proxy: Arc<Proxy>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// Starts a proxy with `tweak` applied to its config.
pub async fn start(urls: &(String, String, String), tweak: impl FnOnce(&mut Config)) -> Running {
    let mut cfg = Config::with_upstreams(&urls.0, &urls.1, &urls.2);
    tweak(&mut cfg);
    cfg.validate().expect("valid config");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let proxy = Arc::new(Proxy::new(cfg).expect("proxy"));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(listener, proxy.clone(), async move {
        let _ = rx.await;
    }));
    Running {
        url,
        proxy,
        stop: Some(tx),
    }
}

/// SDK config pointed at `url`, with SDK retries off so throttles are seen.
pub async fn sdk_config(url: &str) -> aws_config::SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(url)
        .region(aws_config::Region::new("us-east-1"))
        .retry_config(RetryConfig::disabled())
        .load()
        .await
}

/// A table/stream name unique to this run.
pub fn unique(prefix: &str) -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{prefix}-{n}")
}

/// Polls `f` until it returns `Some`, or panics at the deadline.
pub async fn wait_for<T, F, Fut>(what: &str, deadline: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let end = Instant::now() + deadline;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
