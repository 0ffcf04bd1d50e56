//! tidemark-limits: a proxy between AWS SDKs and local emulators that
//! enforces AWS's DynamoDB and Kinesis throughput limits, so throttling and
//! back-off can be tested on a laptop.
//!
//! Modules:
//! - [`bucket`]: a token bucket driven by explicit `now`.
//! - [`dynamo`]: DynamoDB write limits (table bucket with burst credit,
//!   partitions capped at 1,000 WCU/s), pure.
//! - [`kinesis`]: Kinesis per-shard read/write limits and shard mapping, pure.
//! - [`ddb_json`]: DynamoDB wire JSON: item sizes (by `tidemark_schema::size`),
//!   keys, canonical digests.
//! - [`json_ref`]: [`json_ref::JsonRef`], parsed JSON that borrows its strings
//!   from the request body (what BatchWriteItem is read into).
//! - [`aws_error`]: error bodies exactly as DynamoDB and Kinesis send them.
//! - [`fault`]: injected 5xx errors, latency and dropped connections.
//! - [`clock`]: `--clock-offset`: a proxy clock off the machine's; requests
//!   signed outside its window refused as DynamoDB does, `Date` on answers.
//! - [`sink`]: sink mode's record of accepted writes.
//! - [`proxy`]: the HTTP layer: routing on `X-Amz-Target`, parsing,
//!   forwarding, `/_limits/stats`, `/_limits/reset`, `/_limits/sink/TABLE`,
//!   `/_limits/brownout` (hold every DynamoDB request for a while).
//! - [`server`]: the accept loop.
//! - [`config`]: flags and environment variables.
//!
//! Guarantees:
//! - Requests the limits do not concern (reads, SQS, control plane) are
//!   forwarded byte for byte; only the Host header changes.
//! - A write is admitted only if its partition and its table both hold its
//!   cost in WCU at that instant; a refused item is never forwarded. A
//!   BatchWriteItem answer lists every refused item in `UnprocessedItems`.
//! - A request the proxy rejects (validation) charges nothing.
//! - In sink mode, the stats count exactly the writes admitted, and
//!   `/_limits/sink/TABLE` lists the keys they left with item digests.

pub mod aws_error;
pub mod bucket;
pub mod clock;
pub mod config;
pub mod ddb_json;
pub mod dynamo;
pub mod fault;
pub mod json_ref;
pub mod kinesis;
pub mod proxy;
pub mod server;
pub mod sink;

pub use config::Config;
pub use proxy::{Proxy, StatsReport};
pub use server::serve;
