//! What refusing a decompression bomb costs in memory, measured as the
//! growth of this process's peak resident memory (`VmHWM`; Linux): this
//! file is its own test binary, with this one test, so nothing else runs
//! in the process meanwhile.

use std::io::Write;

use bytes::Bytes;
use tidemark_schema::framing::{FramingError, RecordFormat, frame};

/// Peak resident memory of this process so far, bytes (None off Linux).
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// A 60 KB gzip record of 20,971,520 `{}` lines (63 MB inflated, under
/// the 64 MiB inflate cap), as in `scripts/chaos bomb`: refused as too many
/// events after inflating only what it takes to count past the bound, not
/// the whole 63 MB.
#[test]
fn an_ndjson_gzip_bomb_is_refused_without_inflating_it_whole() {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let chunk = b"{}\n".repeat(64 * 1024);
    for _ in 0..320 {
        gz.write_all(&chunk).unwrap();
    }
    let bomb = Bytes::from(gz.finish().unwrap());
    drop(chunk);
    let Some(before) = peak_rss() else {
        return;
    };
    let refused = frame(RecordFormat::Ndjson, &bomb, false);
    assert!(
        matches!(refused, Err(FramingError::TooManyEvents)),
        "{refused:?}"
    );
    let grown = peak_rss().unwrap() - before;
    assert!(
        grown < 16 * 1024 * 1024,
        "refusing a {} byte bomb grew the peak memory by {:.1} MB",
        bomb.len(),
        grown as f64 / 1e6
    );
}
