//! What the fleet simulator (`tools/fleet-sim`) plugs into a
//! [`KinesisSource`](crate::KinesisSource) to run the real lease code at
//! fleet scale on simulated time: an in-memory lease table behind
//! [`LeaseStore`] (given to the source through
//! [`LeaseTable::with_store`](crate::lease::LeaseTable::with_store) and
//! [`KinesisSource::with_lease_table`](crate::KinesisSource::with_lease_table)),
//! an in-memory [`LeaderStore`], and the [`LeaseTuning`] switches it
//! compares. [`LeaseWrite::apply`] is the reference semantics of a
//! conditional lease write, which an in-memory store must follow.
//!
//! Not for production code: the worker gets its stores from
//! [`build`](crate::build).

pub use crate::kinesis::config::LeaseTuning;
pub use crate::kinesis::lease::leader_store::{Heartbeat, LeaderLock, LeaderStore};
pub use crate::kinesis::lease::store::{LeaseDelete, LeaseStore, LeaseWrite, ScanPage};
