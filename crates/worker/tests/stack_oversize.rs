//! Oversized events end to end against the local stack, with
//! `schema.oversize = "s3"` (moto implements S3): the largest record a
//! local Kinesis stream takes at its default record size (1 MiB) is stored
//! as a pointer item, its payload under its content-addressed key; `tidemark query` returns the
//! payload byte for byte (`--no-payloads`: the pointer); `tidemark verify`
//! agrees, and reports the object once altered or deleted; reading the
//! record again writes no second object and no second item.
//!
//! Lives in this crate to name the built binary (`CARGO_BIN_EXE_tidemark`).
//! Ignored unless the crate's `stack` feature is on.

// Helpers outside #[test] fns: a panic there is a failed assertion too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use chrono::Utc;
use tidemark_schema::route::oversize::{object_key, sha256_hex};
use tidemark_tests::worker::{Running, config, kinesis_source, sdk, test_toml};
use tidemark_tests::{LocalStack, unique_name};

const BIN: &str = env!("CARGO_BIN_EXE_tidemark");

/// kinesis-local's default record limit: 1,048,576 bytes of data, the
/// partition key not counted (measured: 1,048,576 bytes are accepted with
/// a 256-byte key, 1,048,577 refused). It implements `UpdateMaxRecordSize`
/// (up to 10,485,760 bytes once raised to 10,240 KiB), but a 5 MiB record
/// costs this test about 30 s in the unoptimized test build (SigV4 hashing
/// and base64 of the put, the worker's read, route and hash), against
/// about 8 s for 1 MiB: the same path, so 1 MiB here.
const RECORD_BYTES: usize = 1_048_576;

/// The binary with the local stack's endpoints.
fn tidemark(stack: &LocalStack, args: &[&str]) -> Output {
    stack.command(BIN).args(args).output().unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// The standard output of a command that must have succeeded.
fn succeeded(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout(&out)
}

/// An event of exactly `size` bytes: identity fields, small fields, a blob.
fn event(size: usize) -> Vec<u8> {
    let head = format!(
        r#"{{"deviceId":"big-1","timestamp":"{}","eventId":"photo-1","kind":"photo","n":7,"blob":""#,
        Utc::now().format("%Y-%m-%dT%H:%M:%S%.3fZ")
    );
    let mut e = head.into_bytes();
    let blob = size - e.len() - 2;
    e.extend(std::iter::repeat_n(b'x', blob));
    e.extend_from_slice(b"\"}");
    assert_eq!(e.len(), size);
    e
}

/// Objects under `prefix`.
async fn keys(s3: &aws_sdk_s3::Client, bucket: &str, prefix: &str) -> Vec<String> {
    let out = s3
        .list_objects_v2()
        .bucket(bucket)
        .prefix(prefix)
        .send()
        .await
        .unwrap();
    out.contents()
        .iter()
        .filter_map(|o| o.key().map(str::to_owned))
        .collect()
}

/// The worker's config for `name`, oversized events to `bucket`, leases
/// in `leases` (a new lease table reads the stream again from its start).
fn toml(name: &str, bucket: &str, leases: &str, dir: &Path) -> String {
    test_toml(&kinesis_source(name), name, &dir.join("dead.jsonl"), "127.0.0.1:0")
        .replace(
            &format!("lease_table = \"{name}-leases\""),
            &format!("lease_table = \"{leases}\""),
        )
        .replace(
            "[schema]\n",
            &format!(
                "[schema]\noversize = \"s3\"\noversize_s3 = {{ bucket = \"{bucket}\", prefix = \"big\" }}\n"
            ),
        )
}

/// Runs a worker until it stored one item, and stops it.
async fn run_once(stack: &LocalStack, dir: &Path, toml: &str) {
    let run = Running::start(&config(dir, toml), &sdk(stack)).await;
    tidemark_tests::wait_until("the event stored", Duration::from_secs(60), || async {
        (run.stored() >= 1).then_some(())
    })
    .await;
    let report = run.stop().await;
    assert_eq!(report.dead_lettered(), 0, "{report:?}");
}

/// About 8 s: in the unoptimized test build each of the two worker runs
/// takes about 2 s to read, route, hash and store the 1 MiB record.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn a_1_mib_kinesis_record_is_stored_as_a_pointer_and_read_back_byte_for_byte() {
    let stack = tidemark_tests::stack().await;
    let (s3, kinesis, ddb) = (stack.s3(), stack.kinesis(), stack.dynamodb());
    let name = unique_name("oversize");
    let bucket = name.to_lowercase();
    s3.create_bucket().bucket(&bucket).send().await.unwrap();
    let dir = std::env::temp_dir().join(&name);
    tidemark_tests::create_stream(&kinesis, &name, 1).await;
    let put = |data: Vec<u8>| {
        kinesis
            .put_record()
            .stream_name(&name)
            .partition_key("k")
            .data(aws_sdk_kinesis::primitives::Blob::new(data))
            .send()
    };
    assert!(
        put(event(RECORD_BYTES + 1)).await.is_err(),
        "one byte more is over the stream's record size"
    );
    let big = event(RECORD_BYTES);
    put(big.clone()).await.unwrap();

    let toml = toml(&name, &bucket, &format!("{name}-leases"), &dir);
    run_once(&stack, &dir, &toml).await;
    let hex = sha256_hex(&big);
    let key = object_key("big", &hex);
    assert_eq!(keys(&s3, &bucket, "big/").await, vec![key.clone()]);
    let object = s3
        .get_object()
        .bucket(&bucket)
        .key(&key)
        .send()
        .await
        .unwrap()
        .body
        .collect()
        .await
        .unwrap()
        .into_bytes();
    assert!(object == big, "the object is the record, byte for byte");
    let table = format!("{name}_{}", Utc::now().format("%Y-%m-%d"));
    let items = tidemark_tests::scan_items(&ddb, &table).await;
    assert_eq!(items.len(), 1);
    let s = |n: &str| match items[0].get(n) {
        Some(aws_sdk_dynamodb::types::AttributeValue::S(s)) => s.clone(),
        Some(aws_sdk_dynamodb::types::AttributeValue::N(n)) => n.clone(),
        other => panic!("{n}: {other:?}"),
    };
    assert_eq!(s("tidemark_payload_s3"), format!("s3://{bucket}/{key}"));
    assert_eq!(s("tidemark_payload_bytes"), RECORD_BYTES.to_string());
    assert_eq!(s("tidemark_payload_sha256"), hex);
    assert_eq!(s("kind"), "photo");
    assert!(!items[0].contains_key("blob"));

    // query: the payload, byte for byte; --no-payloads: the pointer.
    let config_path = dir.join("tidemark.toml");
    let config_path = config_path.to_str().unwrap();
    let query = |extra: &[&str]| {
        let mut args = vec![
            "query",
            "--config",
            config_path,
            "--entity",
            "big-1",
            "--last",
            "1h",
        ];
        args.extend(extra);
        tidemark(&stack, &args)
    };
    let line = succeeded(query(&[]));
    let want = format!(
        ",\"tidemark_payload\":{}}}\n",
        String::from_utf8(big.clone()).unwrap()
    );
    assert!(
        line.ends_with(&want),
        "query prints the event byte for byte"
    );
    assert_eq!(line.lines().count(), 1);
    let pointer = succeeded(query(&["--no-payloads"]));
    assert!(pointer.contains(&format!("\"tidemark_payload_sha256\":\"{hex}\"")));
    assert!(!pointer.contains("\"tidemark_payload\":"), "{pointer}");

    // verify agrees; a replay (a new lease table reads the stream again)
    // writes the same object and item, no second one.
    let manifest = dir.join("manifest.jsonl");
    std::fs::write(&manifest, [big.as_slice(), b"\n"].concat()).unwrap();
    let manifest = manifest.to_str().unwrap();
    let verify = || {
        tidemark(
            &stack,
            &["verify", "--config", config_path, "--manifest", manifest],
        )
    };
    let ok = succeeded(verify());
    assert!(
        ok.contains("found 1") && ok.contains("payloads in S3 1"),
        "{ok}"
    );
    let again = toml.replace(&format!("{name}-leases"), &format!("{name}-leases2"));
    run_once(&stack, &dir, &again).await;
    assert_eq!(keys(&s3, &bucket, "big/").await, vec![key.clone()]);
    assert_eq!(tidemark_tests::scan_items(&ddb, &table).await, items);

    // An altered object is a mismatch, a deleted one missing: never passed.
    s3.put_object()
        .bucket(&bucket)
        .key(&key)
        .body(aws_sdk_s3::primitives::ByteStream::from(
            b"altered".to_vec(),
        ))
        .send()
        .await
        .unwrap();
    let altered = verify();
    assert!(!altered.status.success());
    assert!(
        stdout(&altered).contains("mismatched 1"),
        "{}",
        stdout(&altered)
    );
    let out = query(&[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("differs"));
    s3.delete_object()
        .bucket(&bucket)
        .key(&key)
        .send()
        .await
        .unwrap();
    let missing = verify();
    assert!(!missing.status.success());
    assert!(
        stdout(&missing).contains("missing 1"),
        "{}",
        stdout(&missing)
    );

    kinesis
        .delete_stream()
        .stream_name(&name)
        .send()
        .await
        .unwrap();
    s3.delete_bucket().bucket(&bucket).send().await.unwrap();
}
