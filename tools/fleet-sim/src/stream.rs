//! The fake Kinesis stream: the consumer's own SDK client, whose ListShards,
//! GetShardIterator and GetRecords answers are computed in process
//! (`aws-smithy-mocks` interceptors, no HTTP). Every shard receives
//! `rate` records per second of simulated time; a split closes a shard and
//! opens two children, as Kinesis does.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::operation::describe_stream_summary::{
    DescribeStreamSummaryError, DescribeStreamSummaryOutput,
};
use aws_sdk_kinesis::operation::get_records::{GetRecordsError, GetRecordsOutput};
use aws_sdk_kinesis::operation::get_shard_iterator::{
    GetShardIteratorError, GetShardIteratorOutput,
};
use aws_sdk_kinesis::operation::list_shards::{ListShardsError, ListShardsOutput};
use aws_sdk_kinesis::types::error::InvalidArgumentException;
use aws_sdk_kinesis::types::{
    ChildShard, HashKeyRange, Record, SequenceNumberRange, Shard, ShardIteratorType,
    StreamDescriptionSummary, StreamStatus,
};
use aws_smithy_mocks::{MockResponse, MockResponseInterceptor, RuleMode, mock};
use aws_smithy_types::Blob;
use tokio::time::Instant;

/// Records returned by one GetRecords at most (keeps batches small).
const MAX_PER_CALL: u64 = 50;

#[derive(Debug, Clone)]
struct FakeShard {
    parents: Vec<String>,
    range: (u128, u128),
    opened: Duration,
    closed: Option<Duration>,
    children: Vec<String>,
}

#[derive(Debug)]
struct State {
    shards: BTreeMap<String, FakeShard>,
    next_id: usize,
}

/// The stream, shared by every worker's client.
#[derive(Debug, Clone)]
pub struct Stream {
    state: Arc<Mutex<State>>,
    start: Instant,
    rate: f64,
}

/// A problem in a request (a simulator bug if it ever shows).
fn invalid(msg: &str) -> InvalidArgumentException {
    InvalidArgumentException::builder().message(msg).build()
}

fn shard_id(i: usize) -> String {
    format!("shardId-{i:012}")
}

fn seq(k: u64) -> String {
    // Fixed width: sequence numbers compare as numbers.
    format!("{:021}", k + 1)
}

impl Stream {
    /// A stream of `shards` shards over even hash ranges, `rate` records/s
    /// each, from now.
    pub fn new(shards: usize, rate: f64) -> Self {
        let step = u128::MAX / shards.max(1) as u128;
        let map = (0..shards)
            .map(|i| {
                let lo = step * i as u128;
                let hi = if i + 1 == shards {
                    u128::MAX
                } else {
                    lo + step - 1
                };
                (
                    shard_id(i),
                    FakeShard {
                        parents: Vec::new(),
                        range: (lo, hi),
                        opened: Duration::ZERO,
                        closed: None,
                        children: Vec::new(),
                    },
                )
            })
            .collect();
        Self {
            state: Arc::new(Mutex::new(State {
                shards: map,
                next_id: shards,
            })),
            start: Instant::now(),
            rate,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> Duration {
        Instant::now().duration_since(self.start)
    }

    /// Splits the first `count` open shards in two each; returns how many.
    pub fn split(&self, count: usize) -> usize {
        let now = self.now();
        let mut st = self.lock();
        let open: Vec<String> = st
            .shards
            .iter()
            .filter(|(_, s)| s.closed.is_none() && s.parents.is_empty())
            .map(|(k, _)| k.clone())
            .take(count)
            .collect();
        for parent in &open {
            let Some(p) = st.shards.get(parent).cloned() else {
                continue;
            };
            let mid = p.range.0 + (p.range.1 - p.range.0) / 2;
            let mut kids = Vec::new();
            for range in [(p.range.0, mid), (mid + 1, p.range.1)] {
                let id = shard_id(st.next_id);
                st.next_id += 1;
                st.shards.insert(
                    id.clone(),
                    FakeShard {
                        parents: vec![parent.clone()],
                        range,
                        opened: now,
                        closed: None,
                        children: Vec::new(),
                    },
                );
                kids.push(id);
            }
            if let Some(s) = st.shards.get_mut(parent) {
                s.closed = Some(now);
                s.children = kids;
            }
        }
        open.len()
    }

    /// Records written to a shard until `at` (or its close).
    fn produced(&self, s: &FakeShard, at: Duration) -> u64 {
        let end = s.closed.map_or(at, |c| c.min(at));
        (end.saturating_sub(s.opened).as_secs_f64() * self.rate) as u64
    }

    fn list(&self) -> ListShardsOutput {
        let st = self.lock();
        let shards = st
            .shards
            .iter()
            .filter_map(|(id, s)| {
                let mut range = SequenceNumberRange::builder().starting_sequence_number(seq(0));
                if let Some(c) = s.closed {
                    range = range.ending_sequence_number(seq(self.produced(s, c)));
                }
                Shard::builder()
                    .shard_id(id)
                    .set_parent_shard_id(s.parents.first().cloned())
                    .hash_key_range(
                        HashKeyRange::builder()
                            .starting_hash_key(s.range.0.to_string())
                            .ending_hash_key(s.range.1.to_string())
                            .build()
                            .ok()?,
                    )
                    .sequence_number_range(range.build().ok()?)
                    .build()
                    .ok()
            })
            .collect();
        ListShardsOutput::builder().set_shards(Some(shards)).build()
    }

    fn iterator(
        &self,
        shard: &str,
        kind: Option<&ShardIteratorType>,
        at: Option<&str>,
    ) -> Result<GetShardIteratorOutput, InvalidArgumentException> {
        let st = self.lock();
        let s = st
            .shards
            .get(shard)
            .ok_or_else(|| invalid("no such shard"))?;
        let number = || -> Result<u64, InvalidArgumentException> {
            at.and_then(|n| n.parse::<u64>().ok())
                .ok_or_else(|| invalid("bad sequence number"))
        };
        let k = match kind {
            Some(ShardIteratorType::AtSequenceNumber) => number()?.saturating_sub(1),
            Some(ShardIteratorType::AfterSequenceNumber) => number()?,
            Some(ShardIteratorType::Latest) => self.produced(s, self.now()),
            _ => 0,
        };
        Ok(GetShardIteratorOutput::builder()
            .shard_iterator(format!("{shard}|{k}"))
            .build())
    }

    fn records(&self, iterator: &str) -> Result<GetRecordsOutput, InvalidArgumentException> {
        let (shard, k) = iterator
            .split_once('|')
            .and_then(|(s, k)| Some((s, k.parse::<u64>().ok()?)))
            .ok_or_else(|| invalid("bad iterator"))?;
        let st = self.lock();
        let s = st
            .shards
            .get(shard)
            .ok_or_else(|| invalid("no such shard"))?;
        let now = self.now();
        let produced = self.produced(s, now);
        let upto = produced.min(k + MAX_PER_CALL);
        let at_ms = now.as_millis() as f64;
        let records = (k..upto)
            .filter_map(|i| {
                Record::builder()
                    .sequence_number(seq(i))
                    .partition_key(format!("pk{i}"))
                    .data(Blob::new(b"{}".to_vec()))
                    .approximate_arrival_timestamp(aws_smithy_types::DateTime::from_secs_f64(
                        at_ms / 1000.0,
                    ))
                    .build()
                    .ok()
            })
            .collect();
        let out = GetRecordsOutput::builder()
            .set_records(Some(records))
            .millis_behind_latest(0);
        let ended = s.closed.is_some() && upto >= produced;
        let out = if ended {
            let kids = s
                .children
                .iter()
                .filter_map(|c| {
                    let cs = st.shards.get(c)?;
                    ChildShard::builder()
                        .shard_id(c)
                        .parent_shards(shard)
                        .hash_key_range(
                            HashKeyRange::builder()
                                .starting_hash_key(cs.range.0.to_string())
                                .ending_hash_key(cs.range.1.to_string())
                                .build()
                                .ok()?,
                        )
                        .build()
                        .ok()
                })
                .collect();
            out.set_child_shards(Some(kids))
        } else {
            out.next_shard_iterator(format!("{shard}|{upto}"))
        };
        out.build().map_err(|e| invalid(&e.to_string()))
    }

    /// DescribeStreamSummary, which every worker calls once at start (the
    /// stream's settings): a provisioned stream of the open shards.
    fn summary(&self) -> DescribeStreamSummaryOutput {
        let open = self
            .lock()
            .shards
            .values()
            .filter(|s| s.closed.is_none())
            .count();
        let summary = StreamDescriptionSummary::builder()
            .stream_name("sim")
            .stream_arn("arn:aws:kinesis:us-east-1:000000000000:stream/sim")
            .stream_status(StreamStatus::Active)
            .retention_period_hours(24)
            .stream_creation_timestamp(aws_smithy_types::DateTime::from_secs(1))
            .set_enhanced_monitoring(Some(Vec::new()))
            .open_shard_count(i32::try_from(open).unwrap_or(i32::MAX))
            .consumer_count(0)
            .build()
            .ok();
        DescribeStreamSummaryOutput::builder()
            .set_stream_description_summary(summary)
            .build()
    }

    /// A Kinesis client answered by this stream.
    pub fn client(&self) -> Client {
        let (a, b, c, d) = (self.clone(), self.clone(), self.clone(), self.clone());
        let list = mock!(Client::list_shards)
            .then_compute_response(move |_| MockResponse::<_, ListShardsError>::Output(a.list()));
        let iter = mock!(Client::get_shard_iterator).then_compute_response(move |req| {
            match b.iterator(
                req.shard_id().unwrap_or_default(),
                req.shard_iterator_type(),
                req.starting_sequence_number(),
            ) {
                Ok(o) => MockResponse::Output(o),
                Err(e) => MockResponse::Error(GetShardIteratorError::InvalidArgumentException(e)),
            }
        });
        let get = mock!(Client::get_records).then_compute_response(move |req| {
            match c.records(req.shard_iterator().unwrap_or_default()) {
                Ok(o) => MockResponse::Output(o),
                Err(e) => MockResponse::Error(GetRecordsError::InvalidArgumentException(e)),
            }
        });
        let describe = mock!(Client::describe_stream_summary).then_compute_response(move |_| {
            MockResponse::<_, DescribeStreamSummaryError>::Output(d.summary())
        });
        let interceptor = MockResponseInterceptor::new()
            .rule_mode(RuleMode::MatchAny)
            .with_rule(&describe)
            .with_rule(&list)
            .with_rule(&iter)
            .with_rule(&get);
        let conf = aws_sdk_kinesis::Config::builder()
            .behavior_version(aws_sdk_kinesis::config::BehaviorVersion::latest())
            .region(aws_sdk_kinesis::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_kinesis::config::Credentials::new(
                "sim",
                "sim",
                None,
                None,
                "fleet-sim",
            ))
            .http_client(aws_smithy_mocks::create_mock_http_client())
            .interceptor(interceptor)
            .build();
        Client::from_conf(conf)
    }
}
