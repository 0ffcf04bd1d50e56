//! Tidemark's shared, pure logic: how an event becomes a DynamoDB item in the
//! right period table under the right key, how those tables age, how big
//! things must be, and how to read the data back. No network I/O.
//!
//! Modules:
//! - [`event`]: JSON record to [`event::Event`] (entity id, UTC millisecond
//!   timestamp, event id, payload) with typed, field-naming errors. Its
//!   files: the `[event]` table ([`EventConfig`]), errors, field paths, the
//!   timestamp reader, and [`mapping`] (also `event::mapping`): the rest of
//!   the `[event]` table compiled once (time formats and zones, include /
//!   exclude / rename, type coercion, the policy for payload fields named
//!   like Tidemark's attributes).
//! - `raw` (private): the record's one parse, values kept as JSON text
//!   (shared by `event`, `route` and `wire`).
//! - [`framing`]: record formats (one JSON event, an object or an array,
//!   NDJSON, a JSON array, each optionally gzip-compressed) split into inner
//!   events, the same way for every source.
//! - [`strategy`]: key strategies (`entity`, `random_suffix`,
//!   `calculated_suffix`, `time_bucket`), [`strategy::shard_of`] (seed 003's
//!   SHA-256 hash, bit for bit), and shard-count migrations.
//! - [`period`]: period tables: names, periods, lifecycle states, capacity
//!   tiers and billing mode.
//! - [`route`]: the hot path, record bytes to (table, key, item, WCU) or a
//!   dead-letter [`Reason`]. [`Router::route`] is its one entry point; its
//!   files are [`RouterConfig`] and its checks, [`RouteError`], the item
//!   encoder, and `route::oversize` (`schema.oversize`: an oversized
//!   event's pointer item and the content-addressed S3 object its payload
//!   goes to, [`route::Offload`]; the write itself is the worker's).
//! - [`wire`]: [`WireItem`], an item encoded once as DynamoDB JSON (what the
//!   writer sends), with its size; encode from and decode to SDK maps (the
//!   readers take any [`wire::Tree`]: serde_json's `Value`, or the limits
//!   proxy's borrowed tree); and the payload encoder the router writes items
//!   with (a record's JSON text to DynamoDB JSON, sized as it goes).
//! - [`split`]: adaptive write sharding: split records (one hot entity's
//!   extra partition keys in one table, from an event time on), their
//!   DynamoDB encoding under the reserved partition key, the pure keying
//!   they give, and `[schema.adaptive_sharding]`.
//! - [`sizing`]: the sizing planner: [`sizing::recommend`] turns rates and
//!   sizes into a [`sizing::SizingPlan`]: one recommendation per decision
//!   (key strategy, write shards, period, billing) with its reason,
//!   trade-off and arithmetic, all from one model of how keys spread over
//!   partitions; a config's layout judged beside it; Kinesis shards; the
//!   monthly cost of each setup (fixed, auto-scaled, on demand; history
//!   class; PITR, export) and the cheapest that meets the load; a table's
//!   monthly cost ([`sizing::table_monthly_usd`]).
//! - [`query`]: query plans for a time range or the latest event, and the
//!   k-way merge of their results.
//! - `origin`, `key`, `reason` (private, their types re-exported here) and
//!   [`size`]: shared types: source positions ([`Origin`]; their stream,
//!   shard and sequence strings reference-counted: [`SharedStr`]), item keys
//!   ([`ItemKey`]), dead-letter reasons ([`Reason`]), DynamoDB item sizing.
//! - [`timefmt`]: fixed-width UTC rendering and the accepted time range.
//!
//! Imports run one way, and no two modules import each other: `route` →
//! {`event`, `wire`, `split`, `strategy`, `period`} → {`raw`, `timefmt`, `size`,
//! the shared types}; `split` sits on {`strategy`, the shared types}; `sizing` and `query`
//! sit on `route` and `split`.
//!
//! Guarantees:
//! - Determinism: every function here is pure. The same record, config and
//!   `now` always give the same table, key and item, on any machine and
//!   across releases (hashes are SHA-256 and a fixed SplitMix64, never a
//!   process-seeded hasher or a crate RNG whose stream may change).
//! - Idempotent keys: a replayed record gets the key it got the first time,
//!   so rewriting it overwrites rather than duplicates. Without a producer
//!   event id, the id is derived from the source position; `random_suffix`
//!   draws its suffix from a generator seeded by the event's identity.
//! - Exact numbers: payload numbers are stored with the producer's digits.
//! - Complete reads: a range plan's queries return exactly the events of the
//!   entity in the range, whatever strategy wrote them.
//! - Names: a table name parses back to its period; foreign names parse to
//!   `None` and must be left alone.

pub mod event;
pub mod framing;
mod key;
mod origin;
pub mod period;
pub mod query;
mod raw;
mod reason;
pub mod route;
pub mod size;
pub mod sizing;
pub mod split;
pub mod strategy;
pub mod timefmt;
pub mod wire;

pub use event::mapping;
pub use event::{Event, EventConfig, EventError, Extractor};
pub use key::ItemKey;
pub use origin::{Origin, SharedStr};
pub use reason::Reason;
pub use route::{RouteCache, RouteError, Routed, Router, RouterConfig, Routes, TableLayouts};
pub use size::Item;
pub use strategy::{KeyAttributes, KeyStrategy, shard_of};
pub use wire::WireItem;
