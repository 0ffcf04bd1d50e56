//! Credentials that keep serving while they are still valid.
//!
//! The SDK's identity cache (shared by every client built from one
//! `SdkConfig`) loads credentials once per refresh, however many calls wait:
//! concurrent callers share the one load. It refreshes them a little before
//! they expire (10 s plus jitter), and if that early load fails (an IMDS,
//! ECS-endpoint or STS hiccup) it fails the call, although the credentials
//! it held are valid for a few seconds more. [`KeepValid`] wraps the
//! provider chain under the cache: when a load fails and the credentials
//! last loaded are still valid, it hands those out again (with their real
//! expiry) and asks the chain again at most once per [`RETRY_AFTER`]. Once
//! they have expired, the failure is the caller's, as before.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use aws_config::SdkConfig;
use aws_credential_types::Credentials;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider, future};
use aws_types::sdk_config::SharedTimeSource;

/// After a failed load, how long the last credentials are served before the
/// provider chain is asked again.
pub(crate) const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Credentials expiring sooner than this are not handed out again: a call
/// signed with them could arrive after they expired.
pub(crate) const MIN_VALIDITY: Duration = Duration::from_secs(2);

/// `sdk` with its credentials provider wrapped in [`KeepValid`] (no change
/// when it has none).
pub(crate) fn keep_valid(sdk: SdkConfig) -> SdkConfig {
    let Some(inner) = sdk.credentials_provider() else {
        return sdk;
    };
    let time = sdk.time_source().unwrap_or_default();
    sdk.to_builder()
        .credentials_provider(SharedCredentialsProvider::new(KeepValid::new(inner, time)))
        .build()
}

/// A credentials provider that serves the last credentials it loaded, while
/// they are valid, when loading new ones fails.
pub(crate) struct KeepValid {
    inner: SharedCredentialsProvider,
    time: SharedTimeSource,
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    /// The credentials last loaded.
    last: Option<Credentials>,
    /// After a failure: do not ask the chain again before this.
    quiet_until: Option<SystemTime>,
}

impl State {
    /// The last credentials, if they stay valid for [`MIN_VALIDITY`].
    fn valid(&self, now: SystemTime) -> Option<Credentials> {
        let c = self.last.as_ref()?;
        c.expiry()
            .is_none_or(|e| e > now + MIN_VALIDITY)
            .then(|| c.clone())
    }
}

impl fmt::Debug for KeepValid {
    // Never the credentials themselves.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeepValid")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl KeepValid {
    /// Wraps `inner`; `time` says when credentials expire (the SDK's clock).
    pub(crate) fn new(inner: SharedCredentialsProvider, time: SharedTimeSource) -> KeepValid {
        KeepValid {
            inner,
            time,
            state: Arc::new(Mutex::new(State::default())),
        }
    }

    async fn load(&self) -> aws_credential_types::provider::Result {
        let now = self.time.now();
        {
            let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if st.quiet_until.is_some_and(|t| now < t)
                && let Some(c) = st.valid(now)
            {
                return Ok(c);
            }
        }
        let result = self.inner.provide_credentials().await;
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Ok(c) => {
                st.last = Some(c.clone());
                st.quiet_until = None;
                Ok(c)
            }
            Err(e) => match st.valid(now) {
                Some(c) => {
                    tracing::warn!(error = %e, expiry = ?c.expiry(), "refreshing credentials failed; the current ones are still valid and stay in use");
                    st.quiet_until = Some(now + RETRY_AFTER);
                    Ok(c)
                }
                None => Err(e),
            },
        }
    }
}

impl ProvideCredentials for KeepValid {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::new(self.load())
    }

    fn fallback_on_interrupt(&self) -> Option<Credentials> {
        self.inner.fallback_on_interrupt()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use aws_credential_types::provider::error::CredentialsError;
    use aws_smithy_runtime_api::client::http::{
        HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
    };
    use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
    use aws_smithy_types::body::SdkBody;
    use aws_types::sdk_config::TimeSource;
    use tidemark_writer::{SdkTransport, Transport};

    /// A clock the test moves.
    #[derive(Debug, Clone)]
    struct Clock(Arc<Mutex<SystemTime>>);

    impl Clock {
        fn advance_to(&self, t: SystemTime) {
            *self.0.lock().unwrap() = t;
        }
    }

    impl TimeSource for Clock {
        fn now(&self) -> SystemTime {
            *self.0.lock().unwrap()
        }
    }

    /// A provider that counts its loads, returns credentials valid for
    /// `lifetime` from the clock's now, or fails while `failing`.
    #[derive(Debug)]
    struct Counting {
        loads: Arc<AtomicUsize>,
        failing: Arc<AtomicBool>,
        clock: Clock,
        lifetime: Duration,
    }

    impl ProvideCredentials for Counting {
        fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            let n = self.loads.fetch_add(1, Ordering::SeqCst);
            let failing = self.failing.load(Ordering::SeqCst);
            let expiry = self.clock.now() + self.lifetime;
            future::ProvideCredentials::new(async move {
                // A real load takes a while: concurrent callers pile up.
                tokio::time::sleep(Duration::from_millis(20)).await;
                if failing {
                    return Err(CredentialsError::provider_error("IMDS is down"));
                }
                Ok(Credentials::new(
                    format!("AKID{n}"),
                    "secret",
                    Some("token".into()),
                    Some(expiry),
                    "counting",
                ))
            })
        }
    }

    /// DynamoDB answering every BatchWriteItem with success.
    #[derive(Debug, Clone, Default)]
    struct Ok200(Arc<AtomicUsize>);

    impl HttpConnector for Ok200 {
        fn call(&self, _request: aws_smithy_runtime_api::http::Request) -> HttpConnectorFuture {
            self.0.fetch_add(1, Ordering::SeqCst);
            let resp = aws_smithy_runtime_api::http::Response::new(
                200.try_into().unwrap(),
                SdkBody::from(r#"{"UnprocessedItems":{}}"#),
            );
            HttpConnectorFuture::ready(Ok(resp))
        }
    }

    impl HttpClient for Ok200 {
        fn http_connector(
            &self,
            _settings: &HttpConnectorSettings,
            _components: &RuntimeComponents,
        ) -> SharedHttpConnector {
            SharedHttpConnector::new(self.clone())
        }
    }

    /// 100 concurrent writes through the writer's transport; how many failed.
    async fn burst(t: &SdkTransport) -> usize {
        let calls: Vec<_> = (0..100)
            .map(|_| t.batch_write_item(bytes::Bytes::from_static(b"{\"RequestItems\":{}}")))
            .collect();
        futures::future::join_all(calls)
            .await
            .into_iter()
            .filter(|r| !matches!(r, Ok(resp) if resp.status == 200))
            .count()
    }

    /// The issue's credentials test: credentials near expiry under 100
    /// concurrent calls are loaded once per refresh (the SDK's identity
    /// cache, which the writer now goes through), and a failed early
    /// refresh does not fail writes while the old credentials are valid.
    #[tokio::test]
    async fn loaded_once_per_refresh_and_kept_while_valid() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let clock = Clock(Arc::new(Mutex::new(t0)));
        let loads = Arc::new(AtomicUsize::new(0));
        let failing = Arc::new(AtomicBool::new(false));
        let lifetime = Duration::from_secs(60);
        let provider = Counting {
            loads: loads.clone(),
            failing: failing.clone(),
            clock: clock.clone(),
            lifetime,
        };
        let http = Ok200::default();
        let sdk = SdkConfig::builder()
            .region(aws_types::region::Region::new("eu-west-1"))
            .credentials_provider(SharedCredentialsProvider::new(provider))
            .time_source(SharedTimeSource::new(clock.clone()))
            .http_client(http.clone())
            .identity_cache(aws_config::identity::IdentityCache::lazy().build())
            .sleep_impl(aws_types::sdk_config::SharedAsyncSleep::new(
                aws_smithy_async::rt::sleep::TokioSleep::new(),
            ))
            .behavior_version(aws_config::BehaviorVersion::latest())
            .build();
        let t = SdkTransport::new(&keep_valid(sdk)).unwrap();

        // First use: one load for 100 concurrent calls.
        assert_eq!(burst(&t).await, 0);
        assert_eq!(loads.load(Ordering::SeqCst), 1);
        assert_eq!(http.0.load(Ordering::SeqCst), 100);

        // Near expiry (inside the cache's refresh window, still valid): one
        // more load for the next 100.
        clock.advance_to(t0 + lifetime - Duration::from_secs(3));
        assert_eq!(burst(&t).await, 0);
        assert_eq!(loads.load(Ordering::SeqCst), 2);

        // The next refresh fails while the credentials are still valid:
        // every write goes out, and the chain is asked once, not per call.
        let t1 = t0 + lifetime - Duration::from_secs(3);
        clock.advance_to(t1 + lifetime - Duration::from_secs(5));
        failing.store(true, Ordering::SeqCst);
        assert_eq!(burst(&t).await, 0);
        assert_eq!(loads.load(Ordering::SeqCst), 3);
        assert_eq!(http.0.load(Ordering::SeqCst), 300);

        // Expired and the chain still down: writes fail (retried by the
        // writer), nothing is sent with expired credentials.
        clock.advance_to(t1 + lifetime + Duration::from_secs(1));
        assert_eq!(burst(&t).await, 100);
        assert_eq!(http.0.load(Ordering::SeqCst), 300);

        // The chain is back: writes go out again.
        failing.store(false, Ordering::SeqCst);
        assert_eq!(burst(&t).await, 0);
        assert_eq!(http.0.load(Ordering::SeqCst), 400);
    }
}
