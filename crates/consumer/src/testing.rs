//! What only tests and fuzz targets reach into, behind the `testing`
//! feature: the KPL de-aggregation and the SQS body decoding, each tested
//! against recorded fixtures and fuzzed on its own. Not part of the API a
//! source's caller uses.

/// KPL aggregated records (the Kinesis reader de-aggregates them).
pub mod kpl {
    pub use crate::kinesis::kpl::{KplError, MAGIC, UserRecord, aggregate, deaggregate};
}

/// SQS message bodies (SNS envelopes, base64 gzip) split into events.
pub mod sqs_body {
    pub use crate::sqs::body::{
        BASE64_GZIP_PREFIX, Decoded, Format, RecordFormat, Undecodable, decode,
    };
}
