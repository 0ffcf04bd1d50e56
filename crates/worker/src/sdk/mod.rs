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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use aws_config::Region;
    use aws_config::retry::RetryConfig;
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
}
