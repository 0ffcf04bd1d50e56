//! Tools the command line uses besides running the worker: synthetic
//! events for a source (`produce`, with user templates), reading events
//! back (`query`, with oversized events' payloads from S3: `payloads`) and
//! checking a produced manifest against DynamoDB
//! (`verify`). The test suites use `produce`, `query` and `verify` too.

pub mod payloads;
pub mod produce;
pub mod query;
pub(crate) mod template;
pub mod verify;
