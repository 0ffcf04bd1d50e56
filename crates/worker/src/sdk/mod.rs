//! The AWS SDK configuration every command uses: the standard chain
//! (credentials, region, `AWS_ENDPOINT_URL_*`) plus timeouts.
//!
//! By default the SDK bounds only connecting: a request whose response never
//! comes (a half-open connection, a stuck server) waits forever. In `run`
//! that would stall a shard's reader while its lease is still renewed, or
//! stall the renewals that fence a lost lease. With an attempt timeout, such
//! an attempt fails and is retried like a 5xx.

mod credentials;

use std::time::Duration;

use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};

/// Longest wait for one attempt of an AWS call (the KCL's default failover
/// time: a lease call stuck longer than this is as good as lost anyway).
pub(crate) const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest wait to connect (the SDK's own default).
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_millis(3100);

/// Timeouts with `attempt` per attempt and `connect` to connect.
pub(crate) fn timeouts_with(attempt: Duration, connect: Duration) -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(connect)
        .operation_attempt_timeout(attempt)
        .build()
}

/// The connect timeout of `sdk` (the command line may have set it).
fn connect_timeout_of(sdk: &SdkConfig) -> Duration {
    sdk.timeout_config()
        .and_then(TimeoutConfig::connect_timeout)
        .unwrap_or(CONNECT_TIMEOUT)
}

/// What the command line sets on top of the standard chain
/// (`--profile`, `--region`, `--endpoint-url`); each wins over its
/// environment variable (`AWS_PROFILE`, `AWS_REGION`, `AWS_ENDPOINT_URL`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct AwsOverrides {
    /// Named profile of the shared config and credentials files.
    pub profile: Option<String>,
    /// Region.
    pub region: Option<String>,
    /// One endpoint for every service (a local emulator).
    pub endpoint_url: Option<String>,
    /// Longest wait to connect (default [`CONNECT_TIMEOUT`]).
    pub connect_timeout: Option<Duration>,
}

/// The SDK configuration: the standard chain with [`ATTEMPT_TIMEOUT`] and
/// `overrides` applied, its credentials kept in use while valid when a
/// refresh fails ([`credentials::KeepValid`]).
pub(crate) async fn load_with(overrides: &AwsOverrides) -> SdkConfig {
    let connect = overrides.connect_timeout.unwrap_or(CONNECT_TIMEOUT);
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .timeout_config(timeouts_with(ATTEMPT_TIMEOUT, connect));
    if let Some(p) = &overrides.profile {
        loader = loader.profile_name(p);
    }
    if let Some(r) = &overrides.region {
        loader = loader.region(aws_config::Region::new(r.clone()));
    }
    if let Some(e) = &overrides.endpoint_url {
        loader = loader.endpoint_url(e);
    }
    credentials::keep_valid(loader.load().await)
}

/// `sdk` with one attempt per call, of at most `attempt`: for callers that
/// retry on their own budget (`produce`, `verify`). A timed-out attempt the
/// SDK resent would leave the backend working on the abandoned one as well,
/// and two retry loops stacked multiply each other.
pub(crate) fn single_attempt(sdk: &SdkConfig, attempt: Duration) -> SdkConfig {
    sdk.to_builder()
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .timeout_config(timeouts_with(attempt, connect_timeout_of(sdk)))
        .build()
}

/// `sdk` for the clients whose callers retry on their own, within a
/// budget or a deadline: the SDK's retries (3 attempts) would multiply
/// those and stay outside the governor's retry budget.
pub(crate) fn own_retries(sdk: &SdkConfig) -> SdkConfig {
    sdk.to_builder()
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .build()
}

/// An S3 client for `sdk`. Against an endpoint set by hand (`--endpoint-url`,
/// `AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_S3`, a profile's `services`
/// section: a local emulator or a gateway) it addresses buckets by path
/// (`http://host/bucket/key`): such endpoints rarely resolve `bucket.host`.
/// On AWS itself, the SDK's virtual-host addressing.
pub(crate) fn s3_client(sdk: &SdkConfig) -> aws_sdk_s3::Client {
    // Where the S3 client's own builder looks for an endpoint.
    let s3_endpoint = aws_types::service_config::ServiceConfigKey::builder()
        .service_id("S3")
        .env("AWS_ENDPOINT_URL")
        .profile("endpoint_url")
        .build()
        .ok()
        .and_then(|key| sdk.service_config()?.load_config(key));
    let by_hand = sdk.endpoint_url().is_some() || s3_endpoint.is_some();
    aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(sdk)
            .force_path_style(by_hand)
            .build(),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use aws_config::Region;
    use aws_config::retry::RetryConfig;
    use std::sync::Arc;
    use std::time::Instant;

    /// A server that accepts connections and never answers.
    async fn silent_server() -> (String, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                held.push(conn);
            }
        });
        (url, task)
    }

    async fn client(url: &str, timeouts: Option<TimeoutConfig>) -> aws_sdk_dynamodb::Client {
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                "test", "test", None, None, "test",
            ))
            .retry_config(RetryConfig::standard().with_max_attempts(2));
        if let Some(t) = timeouts {
            loader = loader.timeout_config(t);
        }
        let sdk = loader.load().await;
        aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(&sdk)
                .endpoint_url(url)
                .build(),
        )
    }

    #[tokio::test]
    async fn a_silent_server_fails_the_call_instead_of_hanging_it() {
        let (url, server) = silent_server().await;
        // Without an attempt timeout the call is still waiting after 2 s.
        let plain = client(&url, None).await;
        let hung = tokio::time::timeout(Duration::from_secs(2), plain.list_tables().send()).await;
        assert!(hung.is_err(), "expected the SDK's default to wait");
        // With one, both attempts time out and the call fails.
        let bounded = client(
            &url,
            Some(timeouts_with(Duration::from_millis(300), CONNECT_TIMEOUT)),
        )
        .await;
        let started = Instant::now();
        let result = tokio::time::timeout(Duration::from_secs(20), bounded.list_tables().send())
            .await
            .expect("the call hung despite the attempt timeout");
        assert!(result.is_err());
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        server.abort();
    }

    #[tokio::test]
    async fn command_line_overrides_win() {
        let sdk = load_with(&AwsOverrides {
            profile: None,
            region: Some("eu-west-3".into()),
            endpoint_url: Some("http://127.0.0.1:1".into()),
            connect_timeout: Some(Duration::from_millis(700)),
        })
        .await;
        assert_eq!(
            sdk.region().map(ToString::to_string).as_deref(),
            Some("eu-west-3")
        );
        assert_eq!(sdk.endpoint_url(), Some("http://127.0.0.1:1"));
        assert_eq!(connect_timeout_of(&sdk), Duration::from_millis(700));
        let one = single_attempt(&sdk, Duration::from_secs(1));
        assert_eq!(connect_timeout_of(&one), Duration::from_millis(700));
    }

    #[test]
    fn production_timeouts() {
        let t = timeouts_with(ATTEMPT_TIMEOUT, CONNECT_TIMEOUT);
        assert_eq!(t.operation_attempt_timeout(), Some(ATTEMPT_TIMEOUT));
        assert_eq!(t.connect_timeout(), Some(CONNECT_TIMEOUT));
    }

    /// A server that answers every request 500 and counts them.
    async fn failing_server() -> (
        String,
        Arc<std::sync::atomic::AtomicUsize>,
        tokio::task::JoinHandle<()>,
    ) {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = Arc::clone(&count);
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let seen = Arc::clone(&seen);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 65536];
                    // One request per read is enough here (small bodies);
                    // the connection is closed after each answer.
                    if matches!(conn.read(&mut buf).await, Ok(n) if n > 0) {
                        seen.fetch_add(1, Ordering::SeqCst);
                        let body = r#"{"__type":"InternalFailure","message":"down"}"#;
                        let answer = format!(
                            "HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/x-amz-json-1.0\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = conn.write_all(answer.as_bytes()).await;
                    }
                });
            }
        });
        (url, count, task)
    }

    /// The clients of callers that retry on their own (dead letters,
    /// worker reports, the maintenance lease, the SQS source) send one
    /// attempt per call, where the SDK's default would send 3.
    #[tokio::test]
    async fn clients_with_their_own_retries_send_one_attempt_per_call() {
        use std::sync::atomic::Ordering;
        let (url, count, server) = failing_server().await;
        let sdk = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                "test", "test", None, None, "test",
            ))
            .retry_config(RetryConfig::standard().with_max_attempts(3))
            .endpoint_url(&url)
            .load()
            .await;
        // The counting server sees the SDK's retries.
        let plain = aws_sdk_dynamodb::Client::new(&sdk);
        assert!(plain.list_tables().send().await.is_err());
        assert_eq!(count.swap(0, Ordering::SeqCst), 3, "the default retries");

        let once = own_retries(&sdk);
        assert!(
            aws_sdk_dynamodb::Client::new(&once)
                .describe_table()
                .table_name("coordinator")
                .send()
                .await
                .is_err()
        );
        assert_eq!(count.swap(0, Ordering::SeqCst), 1, "DynamoDB");
        assert!(
            aws_sdk_sqs::Client::new(&once)
                .receive_message()
                .queue_url(format!("{url}/000000000000/q"))
                .send()
                .await
                .is_err()
        );
        assert_eq!(count.swap(0, Ordering::SeqCst), 1, "SQS");
        // The timeouts are kept.
        let with_timeouts = sdk
            .to_builder()
            .timeout_config(timeouts_with(ATTEMPT_TIMEOUT, CONNECT_TIMEOUT))
            .build();
        assert_eq!(
            own_retries(&with_timeouts)
                .timeout_config()
                .and_then(TimeoutConfig::operation_attempt_timeout),
            Some(ATTEMPT_TIMEOUT)
        );
        server.abort();
    }
}
