//! Stream fixtures: a recorder that captures a stream's raw records into a
//! JSON-lines file, and a replay source that feeds such a file through the
//! same `Record`/`Ack` path as the live source, with no Kinesis at all.
//!
//! Format: one JSON object per line, one line per Kinesis record as stored
//! (a KPL aggregate is one line; it is split on replay exactly as live):
//!
//! | field | type | meaning |
//! |---|---|---|
//! | `stream` | string | stream name |
//! | `shard_id` | string | shard id |
//! | `parent_shard_ids` | array of strings | the shard's parents (lineage; empty for an original shard) |
//! | `sequence_number` | string | sequence number, decimal digits |
//! | `partition_key` | string | partition key |
//! | `arrival_ms` | integer | ApproximateArrivalTimestamp, epoch ms |
//! | `data` | string | the record's bytes, standard base64 with padding |
//!
//! Sub-sequence numbers are not stored: Kinesis records have none; they are
//! given by de-aggregation (user record `i` of an aggregate is `i`). Lines of
//! a shard are in sequence order. Replay delivers each shard in order and
//! starts a shard only when every parent present in the file is fully
//! acknowledged.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tidemark_schema::SharedStr;

use aws_sdk_kinesis::types::ShardIteratorType;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::checkpoint::AckTracker;
use crate::convert::{RawRecord, push_user_records};
use crate::error::{AwsError, ConsumerError};
use crate::record::Record;

/// One line of a fixture file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixtureRecord {
    /// Stream name.
    pub stream: String,
    /// Shard id.
    pub shard_id: String,
    /// Parent shard ids.
    #[serde(default)]
    pub parent_shard_ids: Vec<String>,
    /// Sequence number.
    pub sequence_number: String,
    /// Partition key.
    pub partition_key: String,
    /// Arrival time, epoch ms.
    pub arrival_ms: i64,
    /// Data, base64.
    pub data: String,
}

impl FixtureRecord {
    /// A line from raw parts (data encoded to base64).
    pub fn new(
        stream: &str,
        shard_id: &str,
        parents: &[String],
        sequence_number: &str,
        partition_key: &str,
        arrival_ms: i64,
        data: &[u8],
    ) -> Self {
        Self {
            stream: stream.to_string(),
            shard_id: shard_id.to_string(),
            parent_shard_ids: parents.to_vec(),
            sequence_number: sequence_number.to_string(),
            partition_key: partition_key.to_string(),
            arrival_ms,
            data: STANDARD.encode(data),
        }
    }

    /// The record's bytes.
    pub fn bytes(&self) -> Result<Vec<u8>, base64::DecodeError> {
        STANDARD.decode(&self.data)
    }

    /// As a raw Kinesis record.
    pub fn to_raw(&self) -> Result<RawRecord, base64::DecodeError> {
        Ok(RawRecord {
            sequence_number: self.sequence_number.as_str().into(),
            partition_key: self.partition_key.clone(),
            data: Bytes::from(self.bytes()?),
            arrival_ms: self.arrival_ms,
        })
    }
}

fn fixture_err(path: &Path, problem: impl ToString) -> ConsumerError {
    ConsumerError::Fixture {
        path: path.display().to_string(),
        problem: problem.to_string(),
    }
}

/// Reads every line of a fixture file (blank lines are skipped).
pub fn read_fixture(path: &Path) -> Result<Vec<FixtureRecord>, ConsumerError> {
    let text = std::fs::read_to_string(path).map_err(|e| fixture_err(path, e))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| fixture_err(path, format!("line {}: {e}", i + 1)))
        })
        .collect()
}

/// Writes fixture lines to `path`.
pub fn write_fixture(path: &Path, records: &[FixtureRecord]) -> Result<(), ConsumerError> {
    let mut out = String::new();
    for r in records {
        out.push_str(&serde_json::to_string(r).map_err(|e| fixture_err(path, e))?);
        out.push('\n');
    }
    std::fs::write(path, out).map_err(|e| fixture_err(path, e))
}

/// Captures a stream's raw records, every shard from TRIM_HORIZON to its
/// current end (closed shards to SHARD_END, open ones until caught up).
#[derive(Debug, Clone)]
pub struct Recorder {
    kinesis: aws_sdk_kinesis::Client,
}

impl Recorder {
    /// A recorder using `kinesis`.
    pub fn new(kinesis: aws_sdk_kinesis::Client) -> Self {
        Self { kinesis }
    }

    /// Reads `stream` (a name) and returns its records, parents' shards first.
    pub async fn capture(&self, stream: &str) -> Result<Vec<FixtureRecord>, ConsumerError> {
        self.capture_with(stream, &|_, _| {}).await
    }

    /// [`capture`](Self::capture), telling `progress` the records read so
    /// far and the shards done out of all after every page.
    pub async fn capture_with(
        &self,
        stream: &str,
        progress: &(dyn Fn(u64, (usize, usize)) + Sync),
    ) -> Result<Vec<FixtureRecord>, ConsumerError> {
        let mut shards = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let req = match &token {
                Some(t) => self.kinesis.list_shards().next_token(t),
                None => self.kinesis.list_shards().stream_name(stream),
            };
            let page = req
                .send()
                .await
                .map_err(|e| AwsError::new("ListShards", &e))?;
            shards.extend(page.shards().iter().cloned());
            match page.next_token() {
                Some(t) => token = Some(t.to_string()),
                None => break,
            }
        }
        shards.sort_by(|a, b| {
            (a.shard_id().len(), a.shard_id()).cmp(&(b.shard_id().len(), b.shard_id()))
        });
        let mut out = Vec::new();
        for (done, s) in shards.iter().enumerate() {
            let parents: Vec<String> = [s.parent_shard_id(), s.adjacent_parent_shard_id()]
                .into_iter()
                .flatten()
                .map(str::to_string)
                .collect();
            let mut it = self
                .kinesis
                .get_shard_iterator()
                .stream_name(stream)
                .shard_id(s.shard_id())
                .shard_iterator_type(ShardIteratorType::TrimHorizon)
                .send()
                .await
                .map_err(|e| AwsError::new("GetShardIterator", &e))?
                .shard_iterator
                .unwrap_or_default();
            loop {
                let page = self
                    .kinesis
                    .get_records()
                    .shard_iterator(&it)
                    .send()
                    .await
                    .map_err(|e| AwsError::new("GetRecords", &e))?;
                for r in page.records() {
                    out.push(FixtureRecord::new(
                        stream,
                        s.shard_id(),
                        &parents,
                        r.sequence_number(),
                        r.partition_key().unwrap_or_default(),
                        r.approximate_arrival_timestamp()
                            .and_then(|t| t.to_millis().ok())
                            .unwrap_or(0),
                        r.data().as_ref(),
                    ));
                }
                progress(out.len() as u64, (done, shards.len()));
                let caught_up = page.records().is_empty() && page.millis_behind_latest() == Some(0);
                match page.next_shard_iterator() {
                    Some(next) if !caught_up => it = next.to_string(),
                    _ => break,
                }
            }
        }
        Ok(out)
    }

    /// Captures `stream` into the fixture file `path`; returns the line count.
    pub async fn record(&self, stream: &str, path: &Path) -> Result<usize, ConsumerError> {
        self.record_with(stream, path, &|_, _| {}).await
    }

    /// [`record`](Self::record) with progress, as in
    /// [`capture_with`](Self::capture_with).
    pub async fn record_with(
        &self,
        stream: &str,
        path: &Path,
        progress: &(dyn Fn(u64, (usize, usize)) + Sync),
    ) -> Result<usize, ConsumerError> {
        let records = self.capture_with(stream, progress).await?;
        write_fixture(path, &records)?;
        Ok(records.len())
    }
}

/// What a replay delivered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplaySummary {
    /// User records delivered per shard.
    pub per_shard: BTreeMap<String, usize>,
    /// Corrupt aggregates found.
    pub corrupt_aggregates: usize,
}

/// One fixture line, borrowed from the read buffer: parsing it allocates only
/// what the record keeps (sequence number, partition key, data).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LineRef<'a> {
    #[serde(borrow)]
    stream: Cow<'a, str>,
    #[serde(borrow)]
    shard_id: Cow<'a, str>,
    /// Read by the opening scan ([`LineHead`]).
    #[serde(default, rename = "parent_shard_ids")]
    _parent_shard_ids: IgnoredAny,
    #[serde(borrow)]
    sequence_number: Cow<'a, str>,
    #[serde(borrow)]
    partition_key: Cow<'a, str>,
    arrival_ms: i64,
    /// Read as bytes: base64 is ASCII, and its decoder refuses anything
    /// else, so serde_json's UTF-8 check of the text (most of a line) is
    /// skipped.
    #[serde(borrow)]
    data: Cow<'a, [u8]>,
}

/// What the opening scan reads of a line: its stream, shard and lineage.
///
/// The scan reads a line only until it has these (the recorder writes them
/// first) and skips the rest: the replay parses every line in full anyway
/// (as [`LineRef`], checking every field, its type and the base64), and
/// reading whole lines twice cost about 7% of a replay's CPU in
/// `bench/pipeline-cpu`.
#[derive(Default)]
struct LineHead<'a> {
    stream: Option<Cow<'a, str>>,
    shard_id: Option<Cow<'a, str>>,
    parent_shard_ids: Option<Vec<Text<'a>>>,
}

/// A string borrowed from the line when it has no escapes.
#[derive(Deserialize)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

/// A line's head as the scan keeps it.
struct Head<'a> {
    stream: Cow<'a, str>,
    shard_id: Cow<'a, str>,
    parent_shard_ids: Vec<Text<'a>>,
}

impl<'a> LineHead<'a> {
    fn complete(&self) -> bool {
        self.stream.is_some() && self.shard_id.is_some() && self.parent_shard_ids.is_some()
    }

    /// Reads the head of one line.
    fn read(line: &'a [u8]) -> Result<Head<'a>, serde_json::Error> {
        let mut head = LineHead::default();
        let mut de = serde_json::Deserializer::from_slice(line);
        match serde::Deserializer::deserialize_map(&mut de, HeadVisitor(&mut head)) {
            Ok(()) => de.end()?,
            // The visitor stopped at the head: serde_json then finds the
            // rest of the object where it expected its end. Stopping this
            // way makes one error; returning one from the visitor made three.
            Err(_) if head.complete() => {}
            Err(e) => return Err(e),
        }
        let missing = serde::de::Error::missing_field;
        Ok(Head {
            stream: head.stream.ok_or_else(|| missing("stream"))?,
            shard_id: head.shard_id.ok_or_else(|| missing("shard_id"))?,
            parent_shard_ids: head.parent_shard_ids.unwrap_or_default(),
        })
    }
}

struct HeadVisitor<'h, 'a>(&'h mut LineHead<'a>);

impl<'de: 'a, 'a> serde::de::Visitor<'de> for HeadVisitor<'_, 'a> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a fixture line (a JSON object)")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(Text(key)) = map.next_key()? {
            match key.as_ref() {
                "stream" => self.0.stream = Some(map.next_value::<Text<'de>>()?.0),
                "shard_id" => self.0.shard_id = Some(map.next_value::<Text<'de>>()?.0),
                "parent_shard_ids" => self.0.parent_shard_ids = Some(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            if self.0.complete() {
                return Ok(());
            }
        }
        // No `parent_shard_ids`: the shard has no parents.
        self.0.parent_shard_ids.get_or_insert_with(Vec::new);
        Ok(())
    }
}

/// The lines of one shard in a fixture file: where each starts.
#[derive(Debug, Clone)]
struct ShardLines {
    stream: String,
    parents: Vec<String>,
    offsets: Vec<u64>,
}

/// Where a replay's lines are.
#[derive(Debug, Clone)]
enum Lines {
    /// Parsed lines in memory, per shard (tests, small fixtures).
    Memory(BTreeMap<String, (Vec<String>, Vec<FixtureRecord>)>),
    /// A file and the offsets of each shard's lines: only the lines of the
    /// batches in flight are ever in memory.
    File {
        path: PathBuf,
        shards: BTreeMap<String, ShardLines>,
    },
}

/// Replays a fixture through the pipeline.
///
/// A file is scanned once up front (each line's shard and lineage are
/// read, its offset kept: 8 bytes per line), then read back as the pipeline
/// takes its batches, so memory stays bounded by the channel and the
/// writer's in-flight limit, not by the fixture's size. When no shard in the
/// file has a parent in it (the usual capture), one sequential pass feeds
/// every shard; otherwise each shard has its own reader, started once its
/// parents are acknowledged.
#[derive(Debug, Clone)]
pub struct ReplaySource {
    lines: Lines,
    len: usize,
    batch_size: usize,
}

impl ReplaySource {
    /// Scans `path`: reads every line's stream, shard and lineage and
    /// indexes it by shard. A line without them fails here, with its number;
    /// the rest of each line (every field, its type, the base64) is checked
    /// as the line is replayed, and a bad one ends the replay with its
    /// offset (lines before it may already be delivered).
    pub fn open(path: &Path) -> Result<Self, ConsumerError> {
        let mut lines = LineReader::open(path)?;
        let mut shards: BTreeMap<String, ShardLines> = BTreeMap::new();
        let mut len = 0usize;
        while let Some((start, line_no)) = lines.next()? {
            let Head {
                stream,
                shard_id,
                parent_shard_ids,
            } = LineHead::read(lines.buf())
                .map_err(|e| fixture_err(path, format!("line {line_no}: {e}")))?;
            // Looked up by reference first: the id is owned once per shard,
            // not once per line.
            match shards.get_mut(shard_id.as_ref()) {
                Some(shard) => shard.offsets.push(start),
                None => {
                    let shard = ShardLines {
                        stream: stream.into_owned(),
                        parents: parent_shard_ids
                            .into_iter()
                            .map(|p| p.0.into_owned())
                            .collect(),
                        offsets: vec![start],
                    };
                    shards.insert(shard_id.into_owned(), shard);
                }
            }
            len += 1;
        }
        Ok(Self {
            lines: Lines::File {
                path: path.to_path_buf(),
                shards,
            },
            len,
            batch_size: 500,
        })
    }

    /// A replay of records already in memory.
    pub fn from_records(records: Vec<FixtureRecord>) -> Self {
        let len = records.len();
        let mut shards: BTreeMap<String, (Vec<String>, Vec<FixtureRecord>)> = BTreeMap::new();
        for r in records {
            let entry = shards
                .entry(r.shard_id.clone())
                .or_insert_with(|| (r.parent_shard_ids.clone(), Vec::new()));
            entry.1.push(r);
        }
        Self {
            lines: Lines::Memory(shards),
            len,
            batch_size: 500,
        }
    }

    /// Records per delivered batch (default 500).
    pub fn with_batch_size(mut self, n: usize) -> Self {
        self.batch_size = n.max(1);
        self
    }

    /// Kinesis records (fixture lines) in the replay; a KPL aggregate
    /// delivers several user records.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the fixture has no record.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Loads `path` and replays it; see [`ReplaySource::replay`].
    pub async fn run(
        path: impl AsRef<Path>,
        sink: mpsc::Sender<Vec<Record>>,
        shutdown: CancellationToken,
    ) -> Result<ReplaySummary, ConsumerError> {
        Self::open(path.as_ref())?.replay(sink, shutdown).await
    }

    /// Delivers every shard in sequence order, a shard only after its parents
    /// (those present in the fixture) are fully acknowledged, and returns when
    /// every record is acknowledged or `shutdown` is cancelled.
    pub async fn replay(
        self,
        sink: mpsc::Sender<Vec<Record>>,
        shutdown: CancellationToken,
    ) -> Result<ReplaySummary, ConsumerError> {
        if let Lines::File { path, shards } = &self.lines
            && !shards
                .values()
                .any(|l| l.parents.iter().any(|p| shards.contains_key(p)))
        {
            // No shard waits for another: one sequential read serves them
            // all, instead of each shard's reader reading the whole file.
            let pass = OnePass {
                path: path.clone(),
                shards: shards
                    .iter()
                    .map(|(id, l)| (id.clone(), PassShard::new(id, &l.stream)))
                    .collect(),
                sink,
                shutdown,
                batch_size: self.batch_size,
                runtime: tokio::runtime::Handle::current(),
            };
            return tokio::task::spawn_blocking(move || pass.run())
                .await
                .map_err(join_failed)?;
        }
        let readers: Vec<(String, Vec<String>, ShardReader)> = match self.lines {
            Lines::Memory(shards) => shards
                .into_iter()
                .map(|(shard, (parents, records))| {
                    (shard, parents, ShardReader::Memory(records.into_iter()))
                })
                .collect(),
            Lines::File { path, shards } => shards
                .into_iter()
                .map(|(shard, lines)| {
                    let reader = ShardReader::File(FileLines {
                        path: path.clone(),
                        stream: lines.stream.into(),
                        offsets: lines.offsets.into_iter(),
                        reader: None,
                        pos: 0,
                        buf: Vec::new(),
                    });
                    (shard, lines.parents, reader)
                })
                .collect(),
        };
        let mut done: HashMap<String, watch::Sender<bool>> = HashMap::new();
        for (k, _, _) in &readers {
            done.insert(k.clone(), watch::Sender::new(false));
        }
        let runtime = tokio::runtime::Handle::current();
        let mut tasks = tokio::task::JoinSet::new();
        for (shard, parents, reader) in readers {
            let waits: Vec<watch::Receiver<bool>> = parents
                .iter()
                .filter_map(|p| done.get(p).map(watch::Sender::subscribe))
                .collect();
            let finished = done.get(&shard).cloned();
            let replay = ShardReplay {
                shard,
                waits,
                finished,
                reader,
                sink: sink.clone(),
                shutdown: shutdown.clone(),
                batch_size: self.batch_size,
                runtime: runtime.clone(),
            };
            // Reading the file blocks, so each shard runs on a blocking
            // thread and enters the runtime only to wait.
            tasks.spawn_blocking(move || replay.run());
        }
        drop(done);
        let mut summary = ReplaySummary::default();
        while let Some(res) = tasks.join_next().await {
            let (shard, n, c) = res.map_err(join_failed)??;
            summary.per_shard.insert(shard, n);
            summary.corrupt_aggregates += c;
        }
        Ok(summary)
    }
}
/// The records of one shard, in order.
enum ShardReader {
    Memory(std::vec::IntoIter<FixtureRecord>),
    File(FileLines),
}

impl ShardReader {
    /// The next record as Kinesis returned it, with its stream name.
    fn next_raw(&mut self) -> Option<Result<(SharedStr, RawRecord), ConsumerError>> {
        match self {
            ShardReader::Memory(it) => {
                let r = it.next()?;
                Some(match r.to_raw() {
                    Ok(raw) => Ok((r.stream.into(), raw)),
                    Err(e) => Err(ConsumerError::Fixture {
                        path: format!("{}/{}", r.shard_id, r.sequence_number),
                        problem: e.to_string(),
                    }),
                })
            }
            ShardReader::File(f) => f.next_raw(),
        }
    }
}

/// Reads one shard's lines back from the fixture file by offset. Offsets
/// only grow, so short skips stay inside the read buffer.
struct FileLines {
    path: PathBuf,
    stream: SharedStr,
    offsets: std::vec::IntoIter<u64>,
    reader: Option<BufReader<File>>,
    pos: u64,
    buf: Vec<u8>,
}

impl FileLines {
    fn next_raw(&mut self) -> Option<Result<(SharedStr, RawRecord), ConsumerError>> {
        let offset = self.offsets.next()?;
        Some(self.read_at(offset))
    }

    fn read_at(&mut self, offset: u64) -> Result<(SharedStr, RawRecord), ConsumerError> {
        // Split borrows: the error builder reads `path` while the reader,
        // position and buffer change, with no per-record copy of the path.
        let FileLines {
            path,
            stream,
            reader,
            pos,
            buf,
            ..
        } = self;
        let err = |e: &dyn std::fmt::Display| fixture_err(path, format!("offset {offset}: {e}"));
        let reader = match reader {
            Some(r) => r,
            None => {
                let file = File::open(&*path).map_err(|e| err(&e))?;
                reader.insert(BufReader::with_capacity(1 << 16, file))
            }
        };
        if offset != *pos {
            let skip = i64::try_from(offset - *pos).map_err(|e| err(&e))?;
            reader.seek_relative(skip).map_err(|e| err(&e))?;
            *pos = offset;
        }
        buf.clear();
        let n = reader.read_until(b'\n', buf).map_err(|e| err(&e))?;
        *pos += n as u64;
        let line: LineRef<'_> = serde_json::from_slice(buf).map_err(|e| err(&e))?;
        line.into_raw(stream).map_err(|e| err(&e))
    }
}

impl LineRef<'_> {
    /// The record as Kinesis returned it, with its stream name (`stream`,
    /// the shard's, shared when the line names it; copied if not).
    fn into_raw(self, stream: &SharedStr) -> Result<(SharedStr, RawRecord), base64::DecodeError> {
        // As a boxed slice, `Bytes` takes the buffer as is (a vector with
        // spare capacity would cost it a shared header allocation).
        let data = decode_data(&self.data)?;
        let raw = RawRecord {
            sequence_number: SharedStr::from(&*self.sequence_number),
            partition_key: self.partition_key.into_owned(),
            data: Bytes::from(data),
            arrival_ms: self.arrival_ms,
        };
        let stream = if self.stream == stream.as_str() {
            stream.clone()
        } else {
            SharedStr::from(&*self.stream)
        };
        Ok((stream, raw))
    }
}

/// A line's `data`: standard base64 with padding. The SIMD decoder (the one
/// the SDK decodes live Kinesis data with) is several times faster; when it
/// refuses, the base64 crate decides, and names what is wrong.
fn decode_data(text: &[u8]) -> Result<Box<[u8]>, base64::DecodeError> {
    match base64_simd::STANDARD.decode_type(text) {
        Ok(data) => Ok(data),
        Err(_) => Ok(STANDARD.decode(text)?.into_boxed_slice()),
    }
}

/// A fixture file's non-blank lines, in order, with where each starts.
///
/// Reads the file in large chunks and hands out each line in place: no copy
/// per line, and SIMD newline search (this reader runs over every byte of
/// the file twice per replay: the opening scan, then the one-pass feed).
struct LineReader<'p> {
    path: &'p Path,
    file: File,
    chunk: Vec<u8>,
    /// `chunk[pos..end]` is read but not yet handed out.
    pos: usize,
    end: usize,
    /// The current line, `chunk[line.0..line.1]` (newline excluded).
    line: (usize, usize),
    eof: bool,
    /// File offset of `chunk[0]`.
    base: u64,
    line_no: usize,
}

/// The reader's chunk size; a longer line grows the chunk.
const CHUNK_BYTES: usize = 1 << 20;

impl<'p> LineReader<'p> {
    fn open(path: &'p Path) -> Result<Self, ConsumerError> {
        Self::with_chunk(path, CHUNK_BYTES)
    }

    fn with_chunk(path: &'p Path, chunk: usize) -> Result<Self, ConsumerError> {
        let file = File::open(path).map_err(|e| fixture_err(path, e))?;
        Ok(LineReader {
            path,
            file,
            chunk: vec![0; chunk.max(1)],
            pos: 0,
            end: 0,
            line: (0, 0),
            eof: false,
            base: 0,
            line_no: 0,
        })
    }

    /// The current line's bytes.
    fn buf(&self) -> &[u8] {
        &self.chunk[self.line.0..self.line.1]
    }

    /// Moves to the next non-blank line: its byte offset and line number
    /// (blank lines count), or `None` at the end.
    fn next(&mut self) -> Result<Option<(u64, usize)>, ConsumerError> {
        loop {
            let Some((start, stop, next)) = self.next_span()? else {
                return Ok(None);
            };
            self.line_no += 1;
            self.line = (start, stop);
            self.pos = next;
            if !self.chunk[start..stop].trim_ascii().is_empty() {
                return Ok(Some((self.base + start as u64, self.line_no)));
            }
        }
    }

    /// The next line's span in `chunk` and where the one after starts,
    /// reading more of the file as needed.
    fn next_span(&mut self) -> Result<Option<(usize, usize, usize)>, ConsumerError> {
        let mut searched = self.pos;
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.chunk[searched..self.end]) {
                let nl = searched + i;
                return Ok(Some((self.pos, nl, nl + 1)));
            }
            if self.eof {
                // A last line without a newline.
                return Ok((self.pos < self.end).then_some((self.pos, self.end, self.end)));
            }
            searched = self.end - self.pos;
            self.refill()?;
        }
    }

    /// Moves the unread bytes to the front and reads after them (growing
    /// the chunk when one line fills it).
    fn refill(&mut self) -> Result<(), ConsumerError> {
        self.chunk.copy_within(self.pos..self.end, 0);
        self.base += self.pos as u64;
        self.end -= self.pos;
        self.pos = 0;
        if self.end == self.chunk.len() {
            self.chunk.resize(self.chunk.len() * 2, 0);
        }
        let n = loop {
            match self.file.read(&mut self.chunk[self.end..]) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => break r.map_err(|e| fixture_err(self.path, e))?,
            }
        };
        self.end += n;
        self.eof = n == 0;
        Ok(())
    }
}

/// The replay of a file in which no shard has a parent: every shard's lines
/// read in one sequential pass on a blocking thread, each shard batched and
/// acknowledged on its own, as [`ShardReplay`] does for one.
struct OnePass {
    path: PathBuf,
    /// By shard id, from the opening scan.
    shards: HashMap<String, PassShard>,
    sink: mpsc::Sender<Vec<Record>>,
    shutdown: CancellationToken,
    batch_size: usize,
    runtime: tokio::runtime::Handle,
}

/// One shard's state in a [`OnePass`].
struct PassShard {
    id: SharedStr,
    stream: SharedStr,
    tracker: Arc<AckTracker>,
    batch: Vec<Record>,
    lines: usize,
    delivered: usize,
    corrupt: usize,
}

impl PassShard {
    fn new(id: &str, stream: &str) -> Self {
        PassShard {
            id: id.into(),
            stream: stream.into(),
            tracker: Arc::new(AckTracker::new()),
            batch: Vec::new(),
            lines: 0,
            delivered: 0,
            corrupt: 0,
        }
    }
}

impl OnePass {
    fn run(mut self) -> Result<ReplaySummary, ConsumerError> {
        if self.feed()? {
            let trackers = self.shards.values().map(|s| &s.tracker);
            wait_acked(&self.runtime, &self.shutdown, trackers);
        }
        let mut summary = ReplaySummary::default();
        for (id, s) in self.shards {
            summary.per_shard.insert(id, s.delivered);
            summary.corrupt_aggregates += s.corrupt;
        }
        Ok(summary)
    }

    /// Delivers every line; false when the pipeline went away or shutdown
    /// began first.
    fn feed(&mut self) -> Result<bool, ConsumerError> {
        let OnePass {
            path,
            shards,
            sink,
            shutdown,
            batch_size,
            runtime,
        } = self;
        let send = |s: &mut PassShard| {
            let batch = std::mem::replace(&mut s.batch, Vec::with_capacity(*batch_size));
            s.lines = 0;
            s.delivered += batch.len();
            deliver(runtime, sink, shutdown, batch)
        };
        let mut lines = LineReader::open(path)?;
        while let Some((start, _)) = lines.next()? {
            let err = |e: &dyn std::fmt::Display| fixture_err(path, format!("offset {start}: {e}"));
            let line: LineRef<'_> = serde_json::from_slice(lines.buf()).map_err(|e| err(&e))?;
            let Some(s) = shards.get_mut(line.shard_id.as_ref()) else {
                return Err(err(&format!(
                    "shard {} was not in the file when it was opened",
                    line.shard_id
                )));
            };
            let (stream, raw) = line.into_raw(&s.stream).map_err(|e| err(&e))?;
            s.corrupt += push_user_records(&stream, &s.id, raw, None, &s.tracker, &mut s.batch)?;
            s.lines += 1;
            if s.lines >= *batch_size && !send(s) {
                return Ok(false);
            }
        }
        for s in shards.values_mut() {
            if s.lines > 0 && !send(s) {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Sends a batch from a blocking thread; false when the pipeline is gone or
/// shutdown began first.
fn deliver(
    runtime: &tokio::runtime::Handle,
    sink: &mpsc::Sender<Vec<Record>>,
    shutdown: &CancellationToken,
    batch: Vec<Record>,
) -> bool {
    runtime.block_on(async {
        tokio::select! {
            r = sink.send(batch) => r.is_ok(),
            _ = shutdown.cancelled() => false,
        }
    })
}

/// Waits, from a blocking thread, until no tracker has a record in flight;
/// false when shutdown began first.
fn wait_acked<'t>(
    runtime: &tokio::runtime::Handle,
    shutdown: &CancellationToken,
    trackers: impl IntoIterator<Item = &'t Arc<AckTracker>>,
) -> bool {
    runtime.block_on(async {
        tokio::select! {
            _ = async {
                for t in trackers {
                    t.wait_for(|w| w.in_flight() == 0).await;
                }
            } => true,
            _ = shutdown.cancelled() => false,
        }
    })
}

/// A replay thread that panicked or was cancelled.
fn join_failed(e: tokio::task::JoinError) -> ConsumerError {
    ConsumerError::Fixture {
        path: "replay".into(),
        problem: e.to_string(),
    }
}

/// One shard's replay, run on a blocking thread.
struct ShardReplay {
    shard: String,
    waits: Vec<watch::Receiver<bool>>,
    finished: Option<watch::Sender<bool>>,
    reader: ShardReader,
    sink: mpsc::Sender<Vec<Record>>,
    shutdown: CancellationToken,
    batch_size: usize,
    runtime: tokio::runtime::Handle,
}

impl ShardReplay {
    /// Returns (shard, user records delivered, corrupt aggregates).
    fn run(mut self) -> Result<(String, usize, usize), ConsumerError> {
        let shutdown = self.shutdown.clone();
        for mut w in std::mem::take(&mut self.waits) {
            let parent_done = self.runtime.block_on(async {
                tokio::select! {
                    r = w.wait_for(|d| *d) => r.is_ok(),
                    _ = shutdown.cancelled() => false,
                }
            });
            if !parent_done {
                return Ok((self.shard, 0, 0));
            }
        }
        let tracker = Arc::new(AckTracker::new());
        let shard_id = SharedStr::from(self.shard.as_str());
        let (mut delivered, mut corrupt) = (0, 0);
        loop {
            let mut batch = Vec::with_capacity(self.batch_size);
            let mut lines = 0;
            while lines < self.batch_size {
                let Some(next) = self.reader.next_raw() else {
                    break;
                };
                let (stream, raw) = next?;
                corrupt += push_user_records(&stream, &shard_id, raw, None, &tracker, &mut batch)?;
                lines += 1;
            }
            if lines == 0 {
                break;
            }
            delivered += batch.len();
            if !deliver(&self.runtime, &self.sink, &shutdown, batch) {
                return Ok((self.shard, delivered, corrupt));
            }
        }
        if wait_acked(&self.runtime, &shutdown, [&tracker])
            && let Some(f) = &self.finished
        {
            f.send_replace(true);
        }
        Ok((self.shard, delivered, corrupt))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::Position;
    use tidemark_schema::Origin;

    fn line(shard: &str, parents: &[&str], seq: u64, pk: &str, data: &[u8]) -> FixtureRecord {
        let parents: Vec<String> = parents.iter().map(|p| p.to_string()).collect();
        FixtureRecord::new(
            "s",
            shard,
            &parents,
            &seq.to_string(),
            pk,
            1000 + seq as i64,
            data,
        )
    }

    #[test]
    fn lines_round_trip_through_a_file() {
        let dir = std::env::temp_dir().join(format!("tm-fixture-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f.jsonl");
        let recs = vec![
            line("a", &[], 1, "k", b"\x00\xffbin"),
            line("b", &["a"], 2, "k", b"{}"),
        ];
        write_fixture(&path, &recs).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2);
        assert!(text.contains("\"data\":\"AP9iaW4=\""), "{text}");
        assert_eq!(read_fixture(&path).unwrap(), recs);
        assert_eq!(recs[0].bytes().unwrap(), b"\x00\xffbin");
        std::fs::write(&path, "{\"stream\":\"s\",\"bogus\":1}\n").unwrap();
        assert!(read_fixture(&path).is_err(), "unknown fields are rejected");
    }

    /// Every line with its offset and number, through chunks far smaller
    /// than the lines (refills and growth) and without a final newline.
    #[test]
    fn line_reader_hands_out_lines_across_chunks() {
        let dir = std::env::temp_dir().join(format!("tm-fixture-lines-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("lines.jsonl");
        let text = "first\n\n  \nsecond line, longer than the chunk\r\nx\nlast";
        std::fs::write(&path, text).unwrap();
        for chunk in [1, 3, 7, 64, CHUNK_BYTES] {
            let mut r = LineReader::with_chunk(&path, chunk).unwrap();
            let mut got = Vec::new();
            while let Some((offset, no)) = r.next().unwrap() {
                got.push((offset, no, String::from_utf8(r.buf().to_vec()).unwrap()));
            }
            assert_eq!(
                got,
                vec![
                    (0, 1, "first".to_owned()),
                    (10, 4, "second line, longer than the chunk\r".to_owned()),
                    (46, 5, "x".to_owned()),
                    (48, 6, "last".to_owned()),
                ],
                "chunk {chunk}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn lineage_records() -> Vec<FixtureRecord> {
        let mut recs = Vec::new();
        for i in 0..50 {
            recs.push(line("p1", &[], 10 + i, &format!("k{}", i % 3), b"x"));
            recs.push(line("p2", &[], 10 + i, "m", b"y"));
        }
        for i in 0..30 {
            recs.push(line("child", &["p1", "p2"], 100 + i, "k0", b"z"));
        }
        let agg = crate::kpl::aggregate(&[("u1", b"1"), ("u2", b"2")]);
        recs.push(line("child", &["p1", "p2"], 500, "agg", &agg));
        recs
    }

    /// Parents before children, per-shard order, and completion only when
    /// everything is acknowledged, from memory.
    #[tokio::test]
    async fn replay_orders_parents_before_children() {
        check_lineage_order(ReplaySource::from_records(lineage_records())).await;
    }

    /// The same from a file whose child lines come first and whose shards
    /// are interleaved: the streaming reader must neither deadlock on the
    /// waiting child nor mix up lines.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn file_replay_streams_each_shard_in_order() {
        let mut recs = lineage_records();
        recs.rotate_left(100);
        let dir = std::env::temp_dir().join(format!("tm-fixture-stream-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f.jsonl");
        write_fixture(&path, &recs).unwrap();
        // A blank line is skipped, not counted.
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, format!("\n{text}\n")).unwrap();
        let source = ReplaySource::open(&path).unwrap();
        assert_eq!(source.len(), recs.len());
        check_lineage_order(source).await;
        // A bad line is reported with its number before anything replays.
        std::fs::write(&path, format!("{text}{{\"stream\":1}}\n")).unwrap();
        let err = ReplaySource::open(&path).unwrap_err().to_string();
        assert!(err.contains(&format!("line {}", recs.len() + 1)), "{err}");
    }

    proptest::proptest! {
        /// Replay decodes `data` exactly as the base64 crate does: the same
        /// bytes, and the same refusals (bad symbols, padding, trailing
        /// bits), with its message.
        #[test]
        fn data_decodes_as_the_base64_crate_does(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            text in "[A-Za-z0-9+/= -]{0,12}",
        ) {
            let encoded = STANDARD.encode(&bytes);
            proptest::prop_assert_eq!(decode_data(encoded.as_bytes()).unwrap().to_vec(), bytes);
            match (decode_data(text.as_bytes()), STANDARD.decode(&text)) {
                (Ok(a), Ok(b)) => proptest::prop_assert_eq!(a.to_vec(), b),
                (Err(a), Err(b)) => proptest::prop_assert_eq!(a.to_string(), b.to_string()),
                (a, b) => proptest::prop_assert!(false, "{text:?}: {a:?} against {b:?}"),
            }
        }
    }

    /// The scan reads each line's stream, shard and lineage, whatever the
    /// field order; a line whose other fields are bad opens, and its replay
    /// delivers the lines before it, then fails naming the line's offset.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_bad_record_field_ends_the_replay_at_its_line() {
        let recs: Vec<_> = (0..5).map(|i| line("a", &[], 10 + i, "k", b"x")).collect();
        let dir = std::env::temp_dir().join(format!("tm-fixture-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f.jsonl");
        write_fixture(&path, &recs).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        // Fields in another order, and no `parent_shard_ids`: the head is
        // still found (and the shard has no parents).
        let reordered = r#"{"data":"eA==","arrival_ms":1,"partition_key":"k","sequence_number":"1","shard_id":"b","stream":"s"}"#;
        let bad = r#"{"stream":"s","shard_id":"a","parent_shard_ids":[],"sequence_number":"99","partition_key":"k","arrival_ms":"soon","data":"eA=="}"#;
        let offset = text.len() + reordered.len() + 1;
        std::fs::write(&path, format!("{text}{reordered}\n{bad}\n")).unwrap();
        let source = ReplaySource::open(&path).unwrap().with_batch_size(2);
        assert_eq!(source.len(), 7);
        let (tx, mut rx) = mpsc::channel::<Vec<Record>>(16);
        let err = source
            .replay(tx, CancellationToken::new())
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains(&format!("offset {offset}:")), "{err}");
        assert!(
            err.contains("arrival_ms") || err.contains("invalid type"),
            "{err}"
        );
        // Shard a's two full batches went out; its fifth line and shard b's
        // line were still in unsent batches, unacknowledged, when it failed.
        let mut delivered = Vec::new();
        while let Ok(batch) = rx.try_recv() {
            delivered.extend(batch.into_iter().map(|r| r.origin.to_string()));
        }
        assert_eq!(delivered.len(), 4, "{delivered:?}");
        assert!(
            delivered.iter().all(|o| o.starts_with("kinesis:s/a/")),
            "{delivered:?}"
        );

        // A line without a shard still fails the scan, with its number.
        std::fs::write(
            &path,
            format!("{text}{{\"stream\":\"s\",\"parent_shard_ids\":[]}}\n"),
        )
        .unwrap();
        let err = ReplaySource::open(&path).unwrap_err().to_string();
        assert!(err.contains("line 6") && err.contains("shard_id"), "{err}");
    }

    /// Shards without parents in the file are replayed in one pass: every
    /// shard's records in order (a KPL aggregate split), batches of one
    /// shard only, and the replay ends only once everything is acknowledged.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn parentless_shards_replay_in_one_pass() {
        let mut recs = Vec::new();
        for i in 0..40 {
            recs.push(line("a", &[], 10 + i, "k", b"x"));
            recs.push(line("b", &["gone"], 10 + i, "m", b"y"));
        }
        recs.push(line("c", &[], 7, "k", b"z"));
        let agg = crate::kpl::aggregate(&[("u1", b"1"), ("u2", b"2")]);
        recs.push(line("a", &[], 500, "agg", &agg));
        let dir = std::env::temp_dir().join(format!("tm-fixture-pass-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f.jsonl");
        write_fixture(&path, &recs).unwrap();
        let source = ReplaySource::open(&path).unwrap().with_batch_size(6);
        let (tx, mut rx) = mpsc::channel::<Vec<Record>>(2);
        let replay = tokio::spawn(source.replay(tx, CancellationToken::new()));
        let mut seen: BTreeMap<String, Vec<(String, u64)>> = BTreeMap::new();
        let mut acks = Vec::new();
        // The sender lives until everything is acknowledged: read exactly
        // the 83 records, then acknowledge.
        while acks.len() < 83 {
            let batch = rx.recv().await.unwrap();
            let shards: std::collections::BTreeSet<String> = batch
                .iter()
                .map(|r| match &r.origin {
                    Origin::Kinesis { shard_id, .. } => shard_id.to_string(),
                    Origin::Sqs { .. } => panic!("kinesis origin"),
                })
                .collect();
            assert!(shards.len() <= 1, "a batch mixes shards: {shards:?}");
            for r in batch {
                if let Origin::Kinesis {
                    shard_id,
                    sequence_number,
                    sub_sequence_number,
                    ..
                } = &r.origin
                {
                    seen.entry(shard_id.to_string())
                        .or_default()
                        .push((sequence_number.to_string(), *sub_sequence_number));
                }
                acks.push(r.ack);
            }
        }
        assert!(!replay.is_finished(), "ended before the acks");
        for a in acks.drain(..).rev() {
            a.done();
        }
        let summary = replay.await.unwrap().unwrap();
        assert_eq!(summary.per_shard["a"], 42, "40 plain + an aggregate of 2");
        assert_eq!(summary.per_shard["b"], 40);
        assert_eq!(summary.per_shard["c"], 1);
        let a = &seen["a"];
        assert_eq!(a.len(), 42);
        assert!(
            a.windows(2).all(|w| {
                let (x, y) = (
                    Position::new(w[0].0.as_str(), w[0].1),
                    Position::new(w[1].0.as_str(), w[1].1),
                );
                x < y
            }),
            "shard a in order: {a:?}"
        );
        assert_eq!(seen["b"].len(), 40);
    }

    /// Acknowledges lazily, out of order, a batch late, and records every
    /// delivery; checks parents come before children and per-shard order.
    async fn check_lineage_order(source: ReplaySource) {
        let (tx, mut rx) = mpsc::channel::<Vec<Record>>(4);
        let replay = tokio::spawn(
            source
                .with_batch_size(7)
                .replay(tx, CancellationToken::new()),
        );
        let mut seen: Vec<(String, String, u64)> = Vec::new();
        let mut pending = Vec::new();
        while let Some(batch) = rx.recv().await {
            for r in batch {
                let Origin::Kinesis {
                    shard_id,
                    sequence_number,
                    sub_sequence_number,
                    ..
                } = &r.origin
                else {
                    panic!("kinesis origin");
                };
                seen.push((
                    shard_id.to_string(),
                    sequence_number.to_string(),
                    *sub_sequence_number,
                ));
                pending.push(r.ack);
            }
            // Acknowledge lazily, out of order, a batch late.
            if pending.len() > 20 {
                for a in pending.drain(..).rev() {
                    a.done();
                }
            }
            if rx.is_empty() {
                for a in pending.drain(..) {
                    a.done();
                }
            }
        }
        let summary = replay.await.unwrap().unwrap();
        assert_eq!(summary.per_shard["child"], 32, "aggregate split into 2");
        let first_child = seen.iter().position(|s| s.0 == "child").unwrap();
        let last_parent = seen.iter().rposition(|s| s.0 != "child").unwrap();
        assert!(
            last_parent < first_child,
            "a child record before a parent's"
        );
        for shard in ["p1", "p2", "child"] {
            let seqs: Vec<(u64, u64)> = seen
                .iter()
                .filter(|s| s.0 == shard)
                .map(|s| (s.1.parse().unwrap(), s.2))
                .collect();
            assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{shard} out of order");
        }
    }
}
