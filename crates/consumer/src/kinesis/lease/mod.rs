//! Shard leases in a DynamoDB table of the KCL 2.x format: the item, the
//! fenced writes, the laws that decide who holds what, and where leader
//! mode keeps its lock and heartbeats.
//!
//! Files, each depending only on those above it:
//! - `key`: KCL multi-stream lease keys (`account:stream:creationEpoch:shardId`)
//!   and the two key formats a table can hold (pure);
//! - `item`: [`Lease`] and [`Checkpoint`], the item format;
//! - `timing`: [`LeaseTiming`], the lease-deadline law ([`LeasePhase`]);
//! - `write`: `write_once`, the one place lease writes are sent and retried
//!   (bounded, no blind resends);
//! - `store`: the `LeaseStore` trait (one attempt of each call: DynamoDB, or
//!   the fleet simulator's in-memory table), `LeaseWrite` and its reference
//!   semantics, and the DynamoDB store;
//! - `scoped`: one stream's view of a multi-stream table;
//! - `table`: [`LeaseTable`], fenced writes through a store;
//! - `balance`: the listing mode's pure balancing law ([`Observations`]);
//! - `leader_store`: leader mode's lock and heartbeats (`LeaderStore`).
//!
//! Guarantees: every write of a held lease is conditional on `leaseCounter`
//! (and owner), so a worker that lost a lease cannot write it; expiry is
//! judged on the observer's own clock (a counter unchanged for the failover
//! time), so clock skew between workers does not matter; items stay readable
//! and writable by KCL 2.x workers.

pub(crate) mod balance;
pub(crate) mod item;
pub(crate) mod key;
pub(crate) mod leader_store;
mod scoped;
pub(crate) mod store;
pub(crate) mod table;
pub(crate) mod timing;
mod write;

#[cfg(test)]
mod tests;

pub use balance::Observations;
pub use item::{Checkpoint, Lease};
pub use key::{StreamIdentifier, parse_lease_key};
pub use leader_store::DynamoLeaderStore;
pub use store::OWNER_INDEX;
pub use table::LeaseTable;
pub use timing::{LeasePhase, LeaseTiming, Written};
