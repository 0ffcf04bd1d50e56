//! tidemark-fleet-sim: a deterministic simulation of a Tidemark fleet's
//! Kinesis lease coordination, on simulated time. Test tooling, not product.
//!
//! It runs the real lease code (the consumer's `KinesisSource`: coordinator,
//! renewer and shard readers, and `LeaseTable` with its fenced writes) for
//! every simulated worker, on one current-thread runtime with a paused clock,
//! against:
//! - [`store::MemTable`]: an in-memory lease table behind the consumer's
//!   `LeaseStore` trait, with DynamoDB's conditional-write semantics, capacity
//!   metering (4 KB read units, half for eventually consistent reads, 1 MB
//!   Scan pages, 1 KB write units) and injected latency, throttling and
//!   failures;
//! - [`coord::MemCoord`]: the in-memory coordinator table of leader mode
//!   (leader lock, heartbeats) behind the consumer's `CoordStore` trait;
//! - [`stream::Stream`]: a fake Kinesis stream served to the SDK client in
//!   process (records at a fixed rate, splits).
//!
//! Modules: [`scenario`] (the TOML scenario files), [`run`] (the driver and
//! the figures), [`report`] (the table printed by the `fleet-sim` command).
//!
//! Guarantee: a run depends only on the scenario (seeded faults, paused
//! clock, one thread); figures are those of the code under test, not of a
//! model of it.

pub mod coord;
pub mod report;
pub mod run;
pub mod scenario;
pub mod store;
pub mod stream;

pub use run::{Figures, Protocol, run_blocking};
pub use scenario::Scenario;
