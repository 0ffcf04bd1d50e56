//! The balancing loop of one stream: runs the renewer and the cleaner,
//! passes of the configured balancer (listing or leader mode) until
//! shutdown, then waits (bounded) for the readers' drains.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tracing::{Instrument, warn};

use crate::error::ConsumerError;
use crate::kinesis::assign::Assigner;
use crate::kinesis::cleanup;
use crate::kinesis::config::LeaseAssignment;
use crate::kinesis::listing::ListingBalancer;
use crate::kinesis::renewer;
use crate::kinesis::run::StreamRun;
use crate::metrics::kinesis as metric;

/// Who decides which lease this worker holds.
#[derive(Debug)]
enum Balancer {
    /// Every worker lists the table and takes its share.
    Listing(ListingBalancer),
    /// One elected worker assigns; the others follow.
    Leader(Assigner),
}

impl Balancer {
    async fn pass(&mut self, stream: &Arc<StreamRun>) -> Result<Instant, ConsumerError> {
        match self {
            Balancer::Listing(b) => b.pass(stream).await,
            Balancer::Leader(a) => a.pass(stream).await,
        }
    }

    fn sync_asked(&mut self) {
        match self {
            Balancer::Listing(b) => b.sync_asked(),
            Balancer::Leader(a) => a.sync_asked(),
        }
    }
}

/// Balances until shutdown, then lets the readers drain (they checkpoint
/// and release on their own; the renewer keeps their leases meanwhile so
/// nobody steals them mid-drain) and aborts those still running past the
/// hard stop, counting them unfinished.
pub(crate) async fn run(stream: Arc<StreamRun>) -> Result<(), ConsumerError> {
    let cfg = &stream.config;
    let tick = cfg.failover_time / 3;
    // Renewals run on their own clock: a slow Scan or ListShards in this
    // loop never delays them.
    let renewer_stop = CancellationToken::new();
    let renewer = AbortOnDropHandle::new(tokio::spawn(
        renewer::run(stream.clone(), renewer_stop.clone()).in_current_span(),
    ));
    let mut balancer = match stream.leader_store.clone() {
        Some(store) if cfg.lease_assignment == LeaseAssignment::Leader => {
            Balancer::Leader(Assigner::start(&stream, store))
        }
        _ => Balancer::Listing(ListingBalancer::new()),
    };
    let cleaner = AbortOnDropHandle::new(tokio::spawn(
        cleanup::run(stream.clone(), renewer_stop.clone()).in_current_span(),
    ));
    loop {
        if stream.shutdown.is_cancelled() {
            break;
        }
        stream.held.prune(&stream.status);
        let wake = balancer.pass(&stream).await?;
        metrics::gauge!(metric::LEASES_HELD).set(stream.held.len() as f64);
        tokio::select! {
            _ = stream.shutdown.cancelled() => {}
            _ = tokio::time::sleep_until(wake) => {}
            _ = stream.sync_now.notified() => balancer.sync_asked(),
        }
    }
    if let Balancer::Leader(a) = balancer {
        a.stop(&stream).await;
    }
    let deadline = Instant::now() + cfg.shutdown_grace;
    stream.set_drain_deadline(deadline);
    // Past the grace, a reader still writes its final checkpoint and its
    // release: two fenced operations, each bounded by the table's op_bound.
    let hard_stop = deadline + stream.table.timing().op_bound() * 2 + cfg.failover_time / 10;
    while !stream.held.drop_finished() && Instant::now() < hard_stop {
        tokio::time::sleep(Duration::from_millis(50).min(tick)).await;
    }
    renewer_stop.cancel();
    drop(renewer);
    drop(cleaner);
    for key in stream.held.abort_all() {
        warn!(shard = %key, "reader did not finish in time; aborting it");
        stream.unfinished(&key);
    }
    metrics::gauge!(metric::LEASES_HELD).set(0.0);
    metrics::gauge!(metric::LEASE_LISTING_FAILING).set(0.0);
    Ok(())
}
