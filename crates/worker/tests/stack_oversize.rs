//! Large events end to end against the local stack (moto implements S3).
//! With `schema.oversize = "s3"`, a 5 MiB record (its stream's record size
//! raised to 5 MiB) is stored
//! as a pointer item, its payload under its content-addressed key; `tidemark query` returns the
//! payload byte for byte (`--no-payloads`: the pointer); `tidemark verify`
//! agrees, and reports the object once altered or deleted; reading the
//! record again writes no second object and no second item. With
//! `dead_letters.kind = "s3"`, 200 poison records of 1 KB to 900 KB are
//! each found whole in S3.
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
use tidemark_tests::deadletters::{keys, new_bucket, objects, remove_bucket};
use tidemark_tests::worker::{Running, config, kinesis_source, sdk, test_toml};
use tidemark_tests::{LocalStack, unique_name};

const BIN: &str = env!("CARGO_BIN_EXE_tidemark");

/// A 5 MiB record, the size issue's users send once a stream's
/// `MaxRecordSizeInKiB` is raised. kinesis-local implements
/// `UpdateMaxRecordSize` (measured: 1,048,576 bytes of data by default, the
/// partition key not counted; up to 10,485,760 once raised to 10,240 KiB);
/// the test raises its stream to exactly this size, so one byte more is
/// refused. About 20 s in the test build, against 9 s for 1 MiB.
const RECORD_BYTES: usize = 5 * 1_048_576;

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
fn event(size: usize, at: chrono::DateTime<Utc>) -> Vec<u8> {
    let head = format!(
        r#"{{"deviceId":"big-1","timestamp":"{}","eventId":"photo-1","kind":"photo","n":7,"blob":""#,
        at.format("%Y-%m-%dT%H:%M:%S%.3fZ")
    );
    let mut e = head.into_bytes();
    let blob = size - e.len() - 2;
    e.extend(std::iter::repeat_n(b'x', blob));
    e.extend_from_slice(b"\"}");
    assert_eq!(e.len(), size);
    e
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

/// About 20 s: in the test build each of the two worker runs takes a few
/// seconds to read, route, hash and store the 5 MiB record.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn a_5_mib_kinesis_record_is_stored_as_a_pointer_and_read_back_byte_for_byte() {
    let stack = tidemark_tests::stack().await;
    let (s3, kinesis, ddb) = (stack.s3(), stack.kinesis(), stack.dynamodb());
    let name = unique_name("oversize");
    let bucket = name.to_lowercase();
    s3.create_bucket().bucket(&bucket).send().await.unwrap();
    let dir = std::env::temp_dir().join(&name);
    tidemark_tests::create_stream(&kinesis, &name, 1).await;
    let arn = kinesis
        .describe_stream_summary()
        .stream_name(&name)
        .send()
        .await
        .unwrap()
        .stream_description_summary
        .unwrap()
        .stream_arn;
    kinesis
        .update_max_record_size()
        .stream_arn(arn)
        .max_record_size_in_kib((RECORD_BYTES / 1024) as i32)
        .send()
        .await
        .unwrap();
    let put = |data: Vec<u8>| {
        kinesis
            .put_record()
            .stream_name(&name)
            .partition_key("k")
            .data(aws_sdk_kinesis::primitives::Blob::new(data))
            .send()
    };
    assert!(
        put(event(RECORD_BYTES + 1, Utc::now())).await.is_err(),
        "one byte more is over the stream's record size"
    );
    let at = Utc::now();
    let big = event(RECORD_BYTES, at);
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
    // The event's day, not the clock's: a run may straddle midnight.
    let table = format!("{name}_{}", at.format("%Y-%m-%d"));
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

/// With `dead_letters.kind = "s3"`, 200 poison records of 1 KB to 900 KB
/// (90 MB; not JSON, so each is dead-lettered as `invalid_json`) are each
/// found in S3 whole, byte for byte, end to end through the binary's
/// pipeline. Read from a recorded fixture (`tidemark replay`), the pipeline
/// `run` uses: kinesis-local spends about a second of CPU per MB put and
/// read, so these 90 MB through it would take minutes (the Kinesis path is
/// covered by stack_deadletters' 20 records).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn two_hundred_poison_records_of_1_kb_to_900_kb_are_each_found_whole_in_s3() {
    use base64::Engine as _;
    use std::io::Write as _;
    let stack = tidemark_tests::stack().await;
    let s3 = stack.s3();
    let bucket = new_bucket(&s3).await;
    let name = unique_name("poison");
    let dir = std::env::temp_dir().join(&name);
    std::fs::create_dir_all(&dir).unwrap();
    let dead = dir.join("dead.jsonl");
    let toml = test_toml(&kinesis_source(&name), &name, &dead, "127.0.0.1:0").replace(
        &format!("kind = \"file\"\npath = \"{}\"", dead.display()),
        &format!("kind = \"s3\"\nbucket = \"{bucket}\"\nprefix = \"poison\""),
    );
    assert!(toml.contains("kind = \"s3\""));
    let config_path = dir.join("tidemark.toml");
    std::fs::write(&config_path, &toml).unwrap();
    let records = tidemark_tests::deadletters::poison_records(200);
    let fixture = dir.join("poison.jsonl");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&fixture).unwrap());
    for (n, r) in records.iter().enumerate() {
        let line = serde_json::json!({
            "stream": name,
            "shard_id": format!("shardId-00000000000{}", n % 4),
            "parent_shard_ids": [],
            "sequence_number": format!("4968{n:052}"),
            "partition_key": format!("k{n}"),
            "arrival_ms": Utc::now().timestamp_millis(),
            "data": base64::engine::general_purpose::STANDARD.encode(r),
        });
        writeln!(f, "{line}").unwrap();
    }
    f.flush().unwrap();
    drop(f);

    let out = tidemark(
        &stack,
        &[
            "replay",
            "--config",
            config_path.to_str().unwrap(),
            "--fixture",
            fixture.to_str().unwrap(),
        ],
    );
    // Exits non-zero: every record was dead-lettered.
    let text = stdout(&out);
    assert!(
        text.contains("0 stored, 200 dead-lettered"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success());
    let found: Vec<tidemark_worker::deadletter::DeadLetter> = objects(&s3, &bucket, "poison/")
        .await
        .into_iter()
        .flat_map(|(_, entries)| entries)
        .collect();
    assert_eq!(found.len(), records.len());
    tidemark_tests::deadletters::assert_each_found_whole(&records, &found);
    assert!(!dead.exists(), "nothing in a file");
    remove_bucket(&s3, &bucket).await;
    tidemark_tests::deadletters::drop_tables(&stack.dynamodb(), &format!("{name}_")).await;
    std::fs::remove_dir_all(&dir).unwrap();
}
