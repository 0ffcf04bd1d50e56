//! The maintenance lease: at most one worker runs table maintenance at a
//! time, and a worker that lost the lease cannot act on a table.
//!
//! One item (`leaseKey` = [`MAINTENANCE_KEY`]) in a small coordinator table
//! (on-demand, created when absent), in the shard leases' format and written
//! with the same fenced conditional writes
//! ([`tidemark_consumer::lease::LeaseTable`]: no blind retries, bounded
//! attempts, re-read after an unanswered attempt):
//!
//! - `leaseOwner` and `leaseCounter`; every write is conditional on the
//!   counter (and the owner, for the holder's own writes) and bumps it.
//! - The holder renews every `interval`, also while a round runs.
//! - The others read the item every `interval` and judge expiry on their own
//!   clock, as for shard leases: a counter unchanged for the failover time
//!   (`3 × interval`) means the holder is gone, and the lease is taken with a
//!   write conditional on that counter. They also wake at the exact expiry.
//! - Before each mutating call of a round the holder confirms the lease
//!   ([`MaintenanceLease::confirm`]: a fenced renewal whose send time leaves
//!   the call inside the lease). A stale holder's confirmation fails its
//!   condition, and the round stops before the call.
//!
//! Takeover: a holder that stops without releasing (crash, kill) is replaced
//! at most failover + interval (4 × interval; 4 min by default) after its
//! last renewal, plus one round; a holder that shuts down releases the lease
//! and another worker takes it at its next poll (at most one interval).

use std::time::Duration;

use futures::future::BoxFuture;
use tidemark_consumer::lease::{
    Checkpoint, Lease, LeasePhase, LeaseTable, LeaseTiming, Observations, Written,
};
use tokio::sync::Mutex;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::drift::Action;
use super::manager::ActionGuard;

/// The lease item's key.
const MAINTENANCE_KEY: &str = "tidemark-maintenance";

/// Errors of the maintenance lease (its item in the coordinator table).
#[derive(Debug, thiserror::Error)]
pub enum MaintenanceLeaseError {
    /// A call on the coordinator table failed.
    #[error("coordinator table {table}: {message}")]
    Call {
        /// The table.
        table: String,
        /// What failed.
        message: String,
    },
    /// The coordinator table has another key schema than the lease format.
    #[error(transparent)]
    KeySchema(tidemark_consumer::keyschema::KeySchemaMismatch),
    /// This worker does not hold the maintenance lease (any more).
    #[error("maintenance lease not held by {owner}: {why}")]
    NotHeld {
        /// This worker.
        owner: String,
        /// Why it is not.
        why: &'static str,
    },
}

/// What a worker knows of the lease.
#[derive(Debug, Default)]
struct State {
    /// Set while held: the counter and the send time of the last renewal.
    held: Option<Written>,
    /// Counter observations, for expiry on this worker's clock.
    observations: Observations,
    /// The item as last read.
    last_seen: Option<Lease>,
}

/// The maintenance lease of one worker.
#[derive(Debug)]
pub struct MaintenanceLease {
    table: LeaseTable,
    owner: String,
    interval: Duration,
    state: Mutex<State>,
}

impl MaintenanceLease {
    /// The lease in `table`, held as `owner`, polled and renewed every
    /// `interval`; it expires after `3 × interval` without a renewal.
    pub fn new(
        client: aws_sdk_dynamodb::Client,
        table: String,
        owner: String,
        interval: Duration,
    ) -> Self {
        let timing = LeaseTiming::new(interval * 3);
        MaintenanceLease {
            table: LeaseTable::with_timing(client, table, timing).with_role("coordinator table"),
            owner,
            interval,
            state: Mutex::new(State::default()),
        }
    }

    /// The failover time: a holder silent this long is replaced.
    pub fn failover(&self) -> Duration {
        self.table.timing().failover
    }

    /// Time between polls and renewals.
    pub(crate) fn interval(&self) -> Duration {
        self.interval
    }

    fn err(&self, message: impl std::fmt::Display) -> MaintenanceLeaseError {
        MaintenanceLeaseError::Call {
            table: self.table.name().to_string(),
            message: message.to_string(),
        }
    }

    fn not_held(&self, why: &'static str) -> MaintenanceLeaseError {
        MaintenanceLeaseError::NotHeld {
            owner: self.owner.clone(),
            why,
        }
    }

    /// Creates the coordinator table when absent (checking the key schema of
    /// one that exists), waits until it is usable, and creates the lease item.
    pub async fn ensure_table(&self) -> Result<(), MaintenanceLeaseError> {
        self.table
            .create_if_absent(Duration::from_secs(300))
            .await
            .map_err(|e| match e {
                tidemark_consumer::ConsumerError::KeySchema(m) => {
                    MaintenanceLeaseError::KeySchema(m)
                }
                e => self.err(e),
            })?;
        let item = Lease::new(MAINTENANCE_KEY, Checkpoint::TrimHorizon, Vec::new());
        self.table
            .create_lease(&item)
            .await
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// True while this worker holds the lease (as far as it knows).
    pub async fn is_held(&self) -> bool {
        self.state.lock().await.held.is_some()
    }

    /// One poll: the holder renews; the others read the item and take it when
    /// it is free or expired on their clock. Returns whether this worker
    /// holds the lease now.
    pub async fn tick(&self) -> Result<bool, MaintenanceLeaseError> {
        let mut st = self.state.lock().await;
        if let Some(held) = st.held {
            return match self
                .table
                .renew(MAINTENANCE_KEY, &self.owner, held.counter)
                .await
            {
                Ok(Some(w)) => {
                    st.held = Some(w);
                    Ok(true)
                }
                Ok(None) => {
                    warn!(owner = %self.owner, "maintenance lease lost to another worker");
                    st.held = None;
                    Ok(false)
                }
                Err(e) => {
                    let timing = self.table.timing();
                    if timing.phase(held.sent, Instant::now()) == LeasePhase::Lost {
                        warn!(owner = %self.owner, "maintenance lease not renewed within failover time; giving it up");
                        st.held = None;
                    }
                    Err(self.err(e))
                }
            };
        }
        let item = match self.table.get(MAINTENANCE_KEY).await {
            Ok(Some(item)) => item,
            Ok(None) => {
                // Deleted behind our back (or an old table): recreate it.
                self.ensure_table().await?;
                return Ok(false);
            }
            Err(e) => return Err(self.err(e)),
        };
        let now = Instant::now();
        let failover = self.failover();
        st.observations.observe(std::slice::from_ref(&item), now);
        st.last_seen = Some(item.clone());
        // An item in our own name that we do not hold is judged like any
        // other: it may be a live process with the same id (SQS workers on
        // one host share the host name), and a restarted worker only waits
        // out one failover time.
        if !st.observations.is_expired(&item, now, failover) {
            return Ok(false);
        }
        match self.table.acquire(&item, &self.owner).await {
            Ok(Some(w)) => {
                info!(owner = %self.owner, counter = w.counter, previous = ?item.owner, "maintenance lease taken");
                st.held = Some(w);
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(e) => Err(self.err(e)),
        }
    }

    /// When the lease, held by another worker, expires if its counter does
    /// not move: the time to poll again.
    pub(crate) async fn next_expiry(&self) -> Option<Instant> {
        let st = self.state.lock().await;
        let item = st.last_seen.as_ref()?;
        st.observations.next_expiry(
            std::slice::from_ref(item),
            &self.owner,
            Instant::now(),
            self.failover(),
        )
    }

    /// Proves the lease is still ours right now, with a fenced renewal,
    /// before a mutating call: refused when another worker took it, when the
    /// renewal fails, or when it came back too late to act within the lease.
    pub async fn confirm(&self) -> Result<(), MaintenanceLeaseError> {
        let mut st = self.state.lock().await;
        let Some(held) = st.held else {
            return Err(self.not_held("not taken"));
        };
        match self
            .table
            .renew(MAINTENANCE_KEY, &self.owner, held.counter)
            .await
        {
            Ok(Some(w)) => {
                st.held = Some(w);
                match self.table.timing().phase(w.sent, Instant::now()) {
                    LeasePhase::Live { .. } => Ok(()),
                    _ => Err(self.not_held("confirmed too late to act")),
                }
            }
            Ok(None) => {
                warn!(owner = %self.owner, "maintenance lease taken by another worker; round stopped");
                st.held = None;
                Err(self.not_held("taken by another worker"))
            }
            Err(e) => Err(self.err(e)),
        }
    }

    /// Gives the lease up (at shutdown), if held, so another worker takes it
    /// at its next poll.
    pub(crate) async fn release(&self) -> Result<(), MaintenanceLeaseError> {
        let mut st = self.state.lock().await;
        let Some(held) = st.held.take() else {
            return Ok(());
        };
        self.table
            .release(MAINTENANCE_KEY, &self.owner, held.counter)
            .await
            .map_err(|e| self.err(e))?;
        info!(owner = %self.owner, "maintenance lease released");
        Ok(())
    }
}

impl ActionGuard for MaintenanceLease {
    fn confirm<'a>(&'a self, _action: &'a Action) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            MaintenanceLease::confirm(self)
                .await
                .map_err(|e| e.to_string())
        })
    }
}

/// Runs `round` every interval while this worker holds the maintenance
/// lease, renewing it meanwhile; polls the lease otherwise; releases it when
/// `shutdown` is cancelled. `round` is given the lease to confirm before each
/// mutating call (see [`MaintenanceLease::confirm`]).
pub async fn maintain<F>(lease: MaintenanceLease, shutdown: CancellationToken, mut round: F)
where
    F: for<'a> FnMut(&'a MaintenanceLease) -> BoxFuture<'a, ()>,
{
    let interval = lease.interval();
    // Never silently unmaintained: a coordinator table that cannot be used
    // is an error every interval until it can (a wrong key schema already
    // stopped `Worker::build`).
    let mut ready = false;
    let mut wake = Instant::now();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep_until(wake) => {}
        }
        wake = Instant::now() + interval;
        // Everything a wake does is raced against the stop: a round may
        // wait minutes for a table to become ACTIVE, and the coordinator
        // table's own check as long, while the stop has `shutdown_timeout`.
        // An abandoned round is idempotent (the next maintainer plans from
        // what it finds); the lease is released below.
        let step = step(&lease, &mut ready, &mut wake, &mut round);
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = step => {}
        }
    }
    metrics::gauge!(crate::metrics::MAINTENANCE_HELD).set(0.0);
    // Best effort and short: the stop has its own deadline (shutdown_timeout),
    // and an unreleased lease only delays the next maintainer by one failover.
    match tokio::time::timeout(RELEASE_BUDGET, lease.release()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            warn!(error = %e, "releasing the maintenance lease failed; it expires by itself");
        }
        Err(_) => warn!(
            after = ?RELEASE_BUDGET,
            "releasing the maintenance lease timed out; it expires by itself"
        ),
    }
}

/// One wake of [`maintain`]: the coordinator table checked (until it is
/// usable), the lease polled or renewed, and the round run while held.
async fn step<F>(lease: &MaintenanceLease, ready: &mut bool, wake: &mut Instant, round: &mut F)
where
    F: for<'a> FnMut(&'a MaintenanceLease) -> BoxFuture<'a, ()>,
{
    let interval = lease.interval();
    if !*ready {
        match lease.ensure_table().await {
            Ok(()) => *ready = true,
            Err(e) => {
                error!(error = %e, "table maintenance cannot run: the coordinator table is unusable; retrying");
                return;
            }
        }
    }
    let ticked = lease.tick().await;
    metrics::gauge!(crate::metrics::MAINTENANCE_HELD).set(if matches!(ticked, Ok(true)) {
        1.0
    } else {
        0.0
    });
    match ticked {
        Ok(true) => {
            // A round may wait minutes for a table to become ACTIVE: the
            // lease is renewed alongside, so it is not lost meanwhile.
            let mut r = round(lease);
            loop {
                tokio::select! {
                    () = &mut r => break,
                    () = tokio::time::sleep(interval) => {
                        if let Err(e) = lease.tick().await {
                            warn!(error = %e, "renewing the maintenance lease failed");
                        }
                    }
                }
            }
        }
        Ok(false) => {
            if let Some(t) = lease.next_expiry().await {
                *wake = (*wake).min(t + Duration::from_millis(5));
            }
        }
        Err(e) => warn!(error = %e, "maintenance lease unavailable"),
    }
}

/// How long a stopping worker tries to release the maintenance lease.
const RELEASE_BUDGET: Duration = Duration::from_secs(2);

/// The maintenance loop's stop, against a mocked coordinator table.
#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::describe_table::DescribeTableOutput;
    use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
    use aws_sdk_dynamodb::operation::put_item::PutItemOutput;
    use aws_sdk_dynamodb::operation::update_item::UpdateItemOutput;
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, AttributeValue, KeySchemaElement, KeyType, ScalarAttributeType,
        TableDescription, TableStatus,
    };
    use aws_smithy_mocks::{Rule, RuleMode, mock, mock_client};

    fn describe(status: TableStatus) -> Rule {
        mock!(Client::describe_table).then_output(move || {
            DescribeTableOutput::builder()
                .table(
                    TableDescription::builder()
                        .table_name("coordinator")
                        .table_status(status.clone())
                        .key_schema(
                            KeySchemaElement::builder()
                                .attribute_name("leaseKey")
                                .key_type(KeyType::Hash)
                                .build()
                                .unwrap(),
                        )
                        .attribute_definitions(
                            AttributeDefinition::builder()
                                .attribute_name("leaseKey")
                                .attribute_type(ScalarAttributeType::S)
                                .build()
                                .unwrap(),
                        )
                        .build(),
                )
                .build()
        })
    }

    fn lease(client: Client) -> MaintenanceLease {
        MaintenanceLease::new(
            client,
            "coordinator".into(),
            "me".into(),
            Duration::from_secs(60),
        )
    }

    /// Runs `maintain` with `round`, asks it to stop after 1 s, and returns
    /// how long the stop took (`None`: still running 30 s later).
    async fn stop_time(
        lease: MaintenanceLease,
        round: impl for<'a> FnMut(&'a MaintenanceLease) -> BoxFuture<'a, ()> + Send + 'static,
    ) -> Option<Duration> {
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(maintain(lease, shutdown.clone(), round));
        tokio::time::sleep(Duration::from_secs(1)).await;
        shutdown.cancel();
        let asked = Instant::now();
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .ok()
            .map(|joined| {
                joined.unwrap();
                asked.elapsed()
            })
    }

    /// A coordinator table still CREATING is waited for (up to 5 min), but
    /// a stop does not wait for it.
    #[tokio::test(start_paused = true)]
    async fn a_stop_does_not_wait_for_the_coordinator_table_to_be_active() {
        let creating = describe(TableStatus::Creating);
        let took = stop_time(
            lease(mock_client!(
                aws_sdk_dynamodb,
                RuleMode::MatchAny,
                [&creating]
            )),
            |_| Box::pin(async {}),
        )
        .await;
        assert!(
            took.is_some_and(|t| t <= RELEASE_BUDGET),
            "stopped after {took:?}"
        );
    }

    /// A round that hangs (a table that never turns ACTIVE) is abandoned at
    /// the stop, and the lease is released for the next maintainer.
    #[tokio::test(start_paused = true)]
    async fn a_stop_abandons_a_hanging_round_and_releases_the_lease() {
        let active = describe(TableStatus::Active);
        let put = mock!(Client::put_item).then_output(|| PutItemOutput::builder().build());
        let get = mock!(Client::get_item).then_output(|| {
            GetItemOutput::builder()
                .item("leaseKey", AttributeValue::S(MAINTENANCE_KEY.into()))
                .item("leaseCounter", AttributeValue::N("3".into()))
                .build()
        });
        let update = mock!(Client::update_item).then_output(|| UpdateItemOutput::builder().build());
        let lease = lease(mock_client!(
            aws_sdk_dynamodb,
            RuleMode::MatchAny,
            [&active, &put, &get, &update]
        ));
        let took = stop_time(lease, |_| Box::pin(std::future::pending())).await;
        assert!(
            took.is_some_and(|t| t <= RELEASE_BUDGET),
            "stopped after {took:?}"
        );
        // Taken, then released.
        assert_eq!(update.num_calls(), 2);
    }
}
