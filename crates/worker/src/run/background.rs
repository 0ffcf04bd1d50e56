//! The worker's side jobs besides the data path: the maintenance round it
//! runs while holding the maintenance lease, and the DynamoDB probe behind
//! `/readyz`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::Utc;
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::telemetry::Readiness;
use crate::maintenance::{MaintenanceLease, RoundKind, TableManager};

/// The worker's maintenance round: a rotate round whose mutating calls the
/// maintenance lease confirms first.
pub(super) fn rotate_round(
    manager: &TableManager,
) -> impl for<'a> FnMut(&'a MaintenanceLease) -> BoxFuture<'a, ()> + use<> {
    let manager = manager.clone();
    move |lease| {
        let manager = manager.clone();
        Box::pin(async move {
            match manager
                .round_guarded(Utc::now(), RoundKind::Rotate, false, lease)
                .await
            {
                Ok(applied) => {
                    for a in &applied {
                        info!(table = a.action.table(), action = a.action.kind(), drift = ?a.action, error = a.error.as_deref(), "maintenance: drift repaired");
                    }
                    if applied.iter().all(|a| a.error.is_none()) {
                        metrics::gauge!(crate::metrics::MAINTENANCE_LAST_SUCCESS)
                            .set(Utc::now().timestamp_millis() as f64 / 1000.0);
                    }
                }
                Err(e) => warn!(error = %e, "maintenance round failed; retrying next round"),
            }
        })
    }
}

/// Keeps `dynamodb_reachable` current for /readyz with a cheap call on the
/// writer's own client: the endpoint, credentials, HTTP client (proxy) and
/// clock-skew state every write uses.
pub(super) async fn probe_dynamodb(
    transport: Arc<tidemark_writer::SdkTransport>,
    readiness: Arc<Readiness>,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(15));
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        // A probe in flight is dropped at the stop: the stop never waits on
        // a DynamoDB that does not answer.
        let probed = tokio::select! {
            () = shutdown.cancelled() => return,
            probed = transport.probe() => probed,
        };
        let ok = match probed {
            Ok(()) => true,
            Err(e) => {
                warn!(error = %e, "readiness: DynamoDB unreachable on the write path");
                false
            }
        };
        readiness.dynamodb_reachable.store(ok, Ordering::Relaxed);
    }
}
