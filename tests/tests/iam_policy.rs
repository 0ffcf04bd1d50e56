//! The ECS task role in `deploy/cloudformation/tidemark.yaml` grants exactly
//! what the worker calls: every AWS action the code calls is granted, and
//! every granted action is called. No network, not a stack test.
//!
//! How the two sides are found:
//!
//! - **The code.** Every `.rs` file under `crates/{consumer,writer,worker}/src`
//!   (the schema crate does no I/O; the limits proxy and the tests are not the
//!   worker) is stripped of comments, string and char literals and
//!   `#[cfg(test)]` items, then scanned for zero-argument method calls
//!   `.name()` whose name is an operation of the AWS SDK for Rust: the fluent
//!   builders (`client.batch_write_item()...send()`,
//!   `client.list_tables().into_paginator()`) always start that way, whatever
//!   follows, over however many lines. The operation names are not typed in
//!   here: they are read from the SDK crates' `src/operation.rs`, at the
//!   versions in `Cargo.lock`, so a call to an operation this test has never
//!   heard of is still caught.
//! - **Raw calls.** The writer sends BatchWriteItem itself (see
//!   `crates/writer/src/transport.rs`); an `X-Amz-Target` literal
//!   `DynamoDB_20120810.<Operation>` in the source counts as a call.
//! - **The service** of a call is the SDK crate that has the operation and
//!   that the file names (`aws_sdk_dynamodb`, `aws_sdk_kinesis`,
//!   `aws_sdk_sqs`). A name no named crate has (a helper that happens to be
//!   called like an operation, in a file without an SDK client) or that
//!   several named crates have fails the test with the call site, to be
//!   listed in `NOT_SDK` or `SERVICE_OF` below with a reason: a missed call
//!   is worse than a question.
//! - **API operation to IAM action** is `service:PascalCase` except where
//!   `IAM_ACTION_OF` says otherwise (SQS batch calls are authorised by the
//!   single-message action). Operations whose authorisation depends on the
//!   request (PartiQL, transactions) are refused until mapped.
//! - **Operator commands** (`produce`, `query`, `verify`) run from an
//!   operator's shell with their own credentials, not in the task: their
//!   calls are listed in `OPERATOR_ONLY` by file and action, with the reason.
//!   A call there that the worker also makes elsewhere is still required.
//! - **The template.** The `TaskRole` resource is read with a small line
//!   scanner (the tests crate has no YAML parser, and CloudFormation's `!Ref`
//!   tags defeat a plain one): the statements under `Policies:`, each opened
//!   by a `Sid:`, their `Action:` lists and `Resource:` lines. The scanner
//!   refuses what it does not model (wildcard actions, `NotAction`, `Deny`,
//!   managed policies or policies attached from elsewhere) rather than
//!   misread it.

// Helpers outside #[test] fns panic on purpose: this whole file is a test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Crates whose code runs in the worker task.
const SCANNED: &[&str] = &[
    "crates/consumer/src",
    "crates/writer/src",
    "crates/worker/src",
];

/// The SDK crates the worker can call, and the IAM service prefix of each.
const SERVICES: &[(&str, &str)] = &[
    ("aws-sdk-dynamodb", "dynamodb"),
    ("aws-sdk-kinesis", "kinesis"),
    ("aws-sdk-sqs", "sqs"),
    ("aws-sdk-applicationautoscaling", "application-autoscaling"),
    ("aws-sdk-s3", "s3"),
];

/// API operations whose IAM action is not `service:OperationName`. An empty
/// list means "depends on the request": the test refuses such a call until
/// someone decides what to grant.
const IAM_ACTION_OF: &[(&str, &[&str])] = &[
    // SQS authorises batch calls with the single-message actions.
    ("sqs:SendMessageBatch", &["sqs:SendMessage"]),
    ("sqs:DeleteMessageBatch", &["sqs:DeleteMessage"]),
    (
        "sqs:ChangeMessageVisibilityBatch",
        &["sqs:ChangeMessageVisibility"],
    ),
    // PartiQL: PartiQLSelect/Insert/Update/Delete depending on the statement.
    ("dynamodb:ExecuteStatement", &[]),
    ("dynamodb:BatchExecuteStatement", &[]),
    ("dynamodb:ExecuteTransaction", &[]),
    // Transactions: the per-item actions plus ConditionCheckItem.
    ("dynamodb:TransactWriteItems", &[]),
    ("dynamodb:TransactGetItems", &[]),
];

/// (file, IAM action, why the task does not need it): calls made only by
/// operator commands.
const OPERATOR_ONLY: &[(&str, &str, &str)] = &[
    (
        "crates/worker/src/tools/produce.rs",
        "kinesis:PutRecords",
        "`tidemark produce` writes synthetic load from an operator's shell",
    ),
    (
        "crates/worker/src/tools/produce.rs",
        "sqs:SendMessage",
        "`tidemark produce` into an SQS source (dead letters still need it)",
    ),
    (
        "crates/worker/src/tools/query.rs",
        "dynamodb:Query",
        "`tidemark query` reads for an operator",
    ),
    (
        "crates/worker/src/tools/verify.rs",
        "dynamodb:BatchGetItem",
        "`tidemark verify` proves a produced manifest was stored",
    ),
    (
        "crates/worker/src/cli/cmd/consumer.rs",
        "kinesis:DeregisterStreamConsumer",
        "`tidemark consumer deregister`: workers never deregister the fan-out consumer",
    ),
    (
        "crates/worker/src/cli/cmd/status.rs",
        "sqs:GetQueueAttributes",
        "`tidemark status` shows an SQS source's queue depth to an operator",
    ),
    (
        "crates/worker/src/cli/cmd/config/environment.rs",
        "sqs:GetQueueAttributes",
        "`tidemark config check --environment` checks the queue from an operator's shell",
    ),
    (
        "crates/worker/src/cli/cmd/dead_letters.rs",
        "s3:ListObjectsV2",
        "`tidemark dead-letters` lists dead-letter objects from an operator's shell",
    ),
    (
        "crates/worker/src/cli/cmd/dead_letters.rs",
        "s3:GetObject",
        "`tidemark dead-letters` reads dead-letter objects from an operator's shell",
    ),
    (
        "crates/worker/src/tools/payloads.rs",
        "s3:GetObject",
        "`tidemark query` and `verify` read oversized events' payloads from an operator's shell",
    ),
    (
        "crates/worker/src/cli/cmd/dead_letters/replay.rs",
        "s3:CopyObject",
        "`tidemark dead-letters replay` moves replayed objects under replayed/ from an operator's shell",
    ),
    (
        "crates/worker/src/cli/cmd/dead_letters/replay.rs",
        "s3:DeleteObject",
        "`tidemark dead-letters replay` moves replayed objects under replayed/ from an operator's shell",
    ),
];

/// (file, method name, why it is not an SDK call): zero-argument calls that
/// look like SDK operations but are not.
const NOT_SDK: &[(&str, &str, &str)] = &[];

/// (file, method name, service prefix): calls whose service the file's SDK
/// imports leave ambiguous (e.g. `tag_resource` in a file using both the
/// DynamoDB and the Kinesis client).
const SERVICE_OF: &[(&str, &str, &str)] = &[
    // The table manager holds an Application Auto Scaling client too; its
    // tags are DynamoDB's.
    (
        "crates/worker/src/maintenance/manager.rs",
        "tag_resource",
        "dynamodb",
    ),
];

/// (IAM action, template condition its statement must be under, why):
/// permissions a service uses with the task's rights while serving a call
/// the code makes, so no SDK call of the code names them. Each must be
/// granted, only under its condition.
const ON_BEHALF: &[(&str, &str, &str)] = &[
    (
        "cloudwatch:PutMetricAlarm",
        "HasTableAutoScaling",
        "PutScalingPolicy creates the target-tracking policy's alarms as the caller",
    ),
    (
        "cloudwatch:DescribeAlarms",
        "HasTableAutoScaling",
        "PutScalingPolicy reads the policy's alarms as the caller",
    ),
    (
        "cloudwatch:DeleteAlarms",
        "HasTableAutoScaling",
        "DeregisterScalableTarget deletes the policy's alarms as the caller",
    ),
    (
        "iam:CreateServiceLinkedRole",
        "HasTableAutoScaling",
        "the first RegisterScalableTarget for DynamoDB creates AWSServiceRoleForApplicationAutoScaling_DynamoDBTable",
    ),
    (
        "s3:PutObject",
        "IsExport",
        "ExportTableToPointInTime writes the export's files into the bucket as the caller",
    ),
    (
        "s3:AbortMultipartUpload",
        "IsExport",
        "ExportTableToPointInTime uploads in parts as the caller and aborts failed uploads",
    ),
    (
        "s3:PutObjectAcl",
        "IsExport",
        "ExportTableToPointInTime sets the export objects' ACL (bucket-owner-full-control) as the caller",
    ),
    (
        "kms:Decrypt",
        "HasKmsKey",
        "GetRecords on a stream, and ReceiveMessage/SendMessage on a queue, under a customer managed key decrypt as the caller",
    ),
    (
        "kms:GenerateDataKey",
        "HasKmsKey",
        "SendMessage to a dead-letter queue under a customer managed key makes SQS generate a data key as the caller",
    ),
];

/// (IAM action, condition, why): an `ON_BEHALF` action also granted under
/// another condition, for another use.
const ON_BEHALF_ALSO: &[(&str, &str, &str)] = &[
    (
        "s3:PutObject",
        "HasDeadLetterBucket",
        "the worker writes dead-letter objects itself (deadletter/s3.rs)",
    ),
    (
        "kms:GenerateDataKey",
        "DeadLetterObjectsUnderKmsKey",
        "PutObject of a dead-letter object under SSE-KMS makes S3 generate a data key as the caller",
    ),
    (
        "s3:PutObject",
        "OversizeToS3",
        "the worker writes oversized events' payloads itself (run/offload.rs)",
    ),
    (
        "kms:GenerateDataKey",
        "OversizeObjectsUnderKmsKey",
        "PutObject of an oversized event's payload under SSE-KMS makes S3 generate a data key as the caller",
    ),
];

/// Actions AWS does not scope to a resource, so `Resource: "*"` is allowed.
const RESOURCE_STAR_OK: &[&str] = &[
    "dynamodb:ListTables",
    "kinesis:DescribeAccountSettings",
    "application-autoscaling:DescribeScalableTargets",
    "application-autoscaling:DescribeScalingPolicies",
    "cloudwatch:DescribeAlarms",
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests crate sits in the workspace")
        .to_path_buf()
}

// ---------------------------------------------------------------- SDK side

/// snake_case builder name -> PascalCase API name, per IAM service prefix.
type Operations = BTreeMap<&'static str, BTreeMap<String, String>>;

/// Reads each SDK crate's operation list from its source in the cargo
/// registry, at the version Cargo.lock pins.
fn sdk_operations() -> Operations {
    let lock = std::fs::read_to_string(workspace_root().join("Cargo.lock")).expect("Cargo.lock");
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME or CARGO_HOME")).join(".cargo")
        });
    let registry = cargo_home.join("registry").join("src");
    let mut out = Operations::new();
    for (krate, prefix) in SERVICES {
        let version =
            locked_version(&lock, krate).unwrap_or_else(|| panic!("{krate} is not in Cargo.lock"));
        let dir = format!("{krate}-{version}");
        let file = std::fs::read_dir(&registry)
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", registry.display()))
            .filter_map(Result::ok)
            .map(|index| index.path().join(&dir).join("src").join("operation.rs"))
            .find(|p| p.is_file())
            .unwrap_or_else(|| {
                panic!(
                    "{dir}/src/operation.rs not found under {} (set CARGO_HOME if cargo's home is elsewhere)",
                    registry.display()
                )
            });
        let text = std::fs::read_to_string(&file).expect("operation.rs");
        let ops = parse_operation_rs(&text);
        assert!(
            ops.len() > 10,
            "{} lists only {} operations: has the SDK's layout changed?",
            file.display(),
            ops.len()
        );
        out.insert(prefix, ops);
    }
    out
}

fn locked_version(lock: &str, krate: &str) -> Option<String> {
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line.trim() == format!("name = \"{krate}\"") {
            let v = lines.next()?.trim().strip_prefix("version = \"")?;
            return Some(v.trim_end_matches('"').to_string());
        }
    }
    None
}

/// `pub mod batch_write_item;` lines, each under a doc comment naming the
/// operation: "/// Types for the `BatchWriteItem` operation."
fn parse_operation_rs(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut api_name: Option<String> = None;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("/// Types for the `") {
            api_name = rest.split('`').next().map(str::to_string);
        } else if let Some(m) = line.strip_prefix("pub mod ") {
            let snake = m.trim_end_matches(';').to_string();
            let pascal = api_name.take().unwrap_or_else(|| pascal_case(&snake));
            out.insert(snake, pascal);
        }
    }
    out
}

fn pascal_case(snake: &str) -> String {
    snake
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

// ---------------------------------------------------------------- code side

/// One SDK call found in the code.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Call {
    file: String,
    line: usize,
    /// `service:ApiOperation`.
    api: String,
}

/// Blanks comments, string/char literals (keeping newlines, so line numbers
/// hold) and then removes `#[cfg(test)]` items.
fn strip_source(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !b[..i]
                .last()
                .is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            // Raw string r"..." / r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            for &ch in &b[i..j.min(b.len())] {
                out.push(blank(ch));
            }
            i = j;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < b.len() {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{1F600}'), not a lifetime ('a).
            let end = if next == Some('\\') {
                (i + 2..b.len()).find(|&k| b[k] == '\'')
            } else if b.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(e) => {
                    for &ch in &b[i..=e] {
                        out.push(blank(ch));
                    }
                    i = e + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    remove_cfg_test_items(&out)
}

/// Blanks each `#[cfg(test)]` item: up to its `;` or its balanced `{...}`.
fn remove_cfg_test_items(src: &str) -> String {
    let mut b: Vec<char> = src.chars().collect();
    let marker: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut i = 0;
    while i + marker.len() <= b.len() {
        if b[i..i + marker.len()] != marker[..] {
            i += 1;
            continue;
        }
        let mut j = i + marker.len();
        let mut depth = 0usize;
        while j < b.len() {
            match b[j] {
                ';' if depth == 0 => break,
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            j += 1;
        }
        let end = (j + 1).min(b.len());
        for ch in &mut b[i..end] {
            if *ch != '\n' {
                *ch = ' ';
            }
        }
        i = j + 1;
    }
    b.into_iter().collect()
}

/// Zero-argument method calls `.name()`: (name, line).
fn zero_arg_calls(stripped: &str) -> Vec<(String, usize)> {
    let b: Vec<char> = stripped.chars().collect();
    let skip_ws = |mut k: usize| {
        while k < b.len() && b[k].is_whitespace() {
            k += 1;
        }
        k
    };
    let mut out = Vec::new();
    for i in 0..b.len() {
        if b[i] != '.' || b.get(i + 1) == Some(&'.') || (i > 0 && b[i - 1] == '.') {
            continue;
        }
        let start = skip_ws(i + 1);
        let mut end = start;
        while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == '_') {
            end += 1;
        }
        if end == start || b[start].is_ascii_digit() {
            continue;
        }
        let open = skip_ws(end);
        if b.get(open) != Some(&'(') {
            continue;
        }
        let close = skip_ws(open + 1);
        if b.get(close) != Some(&')') {
            continue;
        }
        let line = 1 + b[..start].iter().filter(|&&c| c == '\n').count();
        out.push((b[start..end].iter().collect(), line));
    }
    out
}

/// Problems that need a person: names the scanner cannot attribute.
#[derive(Debug, Default)]
struct Scan {
    calls: Vec<Call>,
    unresolved: Vec<String>,
}

/// Finds the SDK calls of one file (`rel` is its path from the workspace root).
/// Calls sent without the SDK's fluent builders (the writer's own
/// BatchWriteItem transport) name their operation in an `X-Amz-Target`
/// value, `DynamoDB_20120810.<Operation>`: each such literal counts as a
/// call. Searched in the source before literals are stripped.
const RAW_TARGETS: &[(&str, &str)] = &[("DynamoDB_20120810.", "dynamodb")];

fn raw_target_calls(rel: &str, source: &str, ops: &Operations, scan: &mut Scan) {
    for (i, line) in source.lines().enumerate() {
        for (prefix, svc) in RAW_TARGETS {
            for (at, _) in line.match_indices(prefix) {
                let op: String = line[at + prefix.len()..]
                    .chars()
                    .take_while(char::is_ascii_alphanumeric)
                    .collect();
                let known = ops[svc].values().any(|pascal| *pascal == op);
                if known {
                    scan.calls.push(Call {
                        file: rel.to_string(),
                        line: i + 1,
                        api: format!("{svc}:{op}"),
                    });
                } else {
                    scan.unresolved.push(format!(
                        "{rel}:{}: `{prefix}{op}` names no {svc} operation",
                        i + 1
                    ));
                }
            }
        }
    }
}

fn scan_file(rel: &str, source: &str, ops: &Operations, scan: &mut Scan) {
    raw_target_calls(rel, source, ops, scan);
    let stripped = strip_source(source);
    let named: BTreeSet<&str> = SERVICES
        .iter()
        .filter(|(krate, _)| stripped.contains(&krate.replace('-', "_")))
        .map(|(_, prefix)| *prefix)
        .collect();
    for (name, line) in zero_arg_calls(&stripped) {
        let having: Vec<&str> = ops
            .iter()
            .filter(|(_, o)| o.contains_key(&name))
            .map(|(p, _)| *p)
            .collect();
        if having.is_empty() {
            continue;
        }
        if NOT_SDK.iter().any(|(f, n, _)| *f == rel && *n == name) {
            continue;
        }
        let chosen: Vec<&str> = match SERVICE_OF.iter().find(|(f, n, _)| *f == rel && *n == name) {
            Some((_, _, svc)) => vec![*svc],
            None => having
                .iter()
                .copied()
                .filter(|p| named.contains(p))
                .collect(),
        };
        match chosen.as_slice() {
            [svc] => scan.calls.push(Call {
                file: rel.to_string(),
                line,
                api: format!("{svc}:{}", ops[svc][&name]),
            }),
            [] => scan.unresolved.push(format!(
                "{rel}:{line}: `.{name}()` is an SDK operation of {having:?} but the file names none \
                 of those SDK crates; if it is an SDK call name the client type in the file, \
                 otherwise add it to NOT_SDK with the reason"
            )),
            several => scan.unresolved.push(format!(
                "{rel}:{line}: `.{name}()` could be {several:?}; add it to SERVICE_OF"
            )),
        }
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

fn scan_code(ops: &Operations) -> Scan {
    let root = workspace_root();
    let mut scan = Scan::default();
    for dir in SCANNED {
        let mut files = Vec::new();
        rust_files(&root.join(dir), &mut files);
        assert!(!files.is_empty(), "no Rust files under {dir}");
        for f in files {
            let rel = f
                .strip_prefix(&root)
                .expect("under root")
                .to_string_lossy()
                .replace('\\', "/");
            let text = std::fs::read_to_string(&f).expect("readable source");
            scan_file(&rel, &text, ops, &mut scan);
        }
    }
    scan
}

/// IAM actions needed by one API call; Err when the mapping is undecided.
fn iam_actions(api: &str) -> Result<Vec<String>, String> {
    match IAM_ACTION_OF.iter().find(|(a, _)| *a == api) {
        None => Ok(vec![api.to_string()]),
        Some((_, [])) => Err(format!(
            "{api}: its IAM actions depend on the request; map it in IAM_ACTION_OF"
        )),
        Some((_, actions)) => Ok(actions.iter().map(|s| s.to_string()).collect()),
    }
}

// ---------------------------------------------------------------- template side

/// One statement of the task role's inline policies.
#[derive(Debug, Default)]
struct Statement {
    sid: String,
    actions: Vec<String>,
    resources: Vec<String>,
    /// The lines of its `Condition:` block, trimmed (operators, keys and
    /// values as written, e.g. `aws:ResourceTag/tidemark:prefix: !Ref TablePrefix`).
    condition: Vec<String>,
    /// The template condition of an enclosing `!If [Cond, statement,
    /// !Ref AWS::NoValue]`: the statement exists only when it holds.
    only_if: Option<String>,
    text: String,
}

impl Statement {
    /// True when its Condition block has `op` with `key: !Ref TablePrefix`.
    fn has_condition(&self, op: &str, key: &str) -> bool {
        let mut current = "";
        for line in &self.condition {
            // Operators (StringEquals:, ForAllValues:StringLike:) have no
            // colon in their name but a set qualifier's; keys
            // (aws:ResourceTag/...) do.
            if let Some(name) = line.strip_suffix(':')
                && (!name.contains(':')
                    || name.starts_with("ForAllValues:")
                    || name.starts_with("ForAnyValue:"))
            {
                current = name;
            } else if current == op && *line == format!("{key}: !Ref TablePrefix") {
                return true;
            }
        }
        false
    }

    /// True when its Condition block requires `key` to equal `!Ref TablePrefix`.
    fn requires_prefix_tag(&self, key: &str) -> bool {
        self.has_condition("StringEquals", key)
    }

    /// The values its Condition block gives `key` under `op`: the rest of
    /// the key's line, or the `- item` lines of a block list under it.
    fn condition_values(&self, op: &str, key: &str) -> Vec<String> {
        let mut current = "";
        let mut out = Vec::new();
        let mut in_key = false;
        for line in &self.condition {
            if let Some(item) = line.strip_prefix("- ") {
                if in_key {
                    out.push(unquote(item));
                }
                continue;
            }
            in_key = false;
            if let Some(name) = line.strip_suffix(':')
                && (!name.contains(':')
                    || name.starts_with("ForAllValues:")
                    || name.starts_with("ForAnyValue:"))
            {
                current = name;
            } else if current == op
                && let Some(v) = line.strip_prefix(key).and_then(|r| r.strip_prefix(':'))
            {
                let v = v.trim();
                if v.is_empty() {
                    in_key = true;
                } else {
                    out.push(unquote(v));
                }
            }
        }
        out
    }
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

fn is_blank_or_comment(line: &str) -> bool {
    let t = line.trim();
    t.is_empty() || t.starts_with('#')
}

/// The lines of a top-level resource (`  Name:` under `Resources:`).
fn resource_block<'a>(template: &'a str, name: &str) -> Option<Vec<&'a str>> {
    let lines: Vec<&str> = template.lines().collect();
    let head = format!("  {name}:");
    let start = lines.iter().position(|l| l.trim_end() == head)?;
    let mut block = Vec::new();
    for l in &lines[start + 1..] {
        if !is_blank_or_comment(l) && indent(l) <= 2 {
            break;
        }
        block.push(*l);
    }
    Some(block)
}

fn unquote(s: &str) -> String {
    s.trim().trim_matches(|c| c == '"' || c == '\'').to_string()
}

/// The value after `key:` on a line (after an optional list dash).
fn value_of<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let t = line.trim_start();
    let t = t.strip_prefix("- ").unwrap_or(t).trim_start();
    t.strip_prefix(key)?.strip_prefix(':').map(str::trim)
}

/// Parses the task role's `Policies:` into statements. Errors name what the
/// scanner does not model.
fn task_role_statements(template: &str) -> Result<Vec<Statement>, String> {
    // A policy resource could attach more rights to the role from outside its block.
    for kind in [
        "AWS::IAM::Policy",
        "AWS::IAM::ManagedPolicy",
        "AWS::IAM::RolePolicy",
    ] {
        if template.lines().any(|l| value_of(l, "Type") == Some(kind)) {
            return Err(format!(
                "the template has a {kind} resource: grant inline in TaskRole only"
            ));
        }
    }
    let block = resource_block(template, "TaskRole").ok_or("no TaskRole resource")?;
    if !block
        .iter()
        .any(|l| value_of(l, "Type") == Some("AWS::IAM::Role"))
    {
        return Err("TaskRole is not an AWS::IAM::Role".into());
    }
    for key in ["ManagedPolicyArns", "PermissionsBoundary"] {
        if block.iter().any(|l| value_of(l, key).is_some()) {
            return Err(format!("TaskRole has {key}: grant inline actions only"));
        }
    }
    let start = block
        .iter()
        .position(|l| value_of(l, "Policies").is_some())
        .ok_or("TaskRole has no Policies")?;
    let policies_indent = indent(block[start]);
    let policies: Vec<&str> = block[start + 1..]
        .iter()
        .take_while(|l| is_blank_or_comment(l) || indent(l) > policies_indent)
        .copied()
        .filter(|l| !is_blank_or_comment(l))
        .collect();
    for l in &policies {
        for bad in ["NotAction", "NotResource"] {
            if value_of(l, bad).is_some() {
                return Err(format!("`{}`: {bad} is not modelled", l.trim()));
            }
        }
        if let Some(e) = value_of(l, "Effect")
            && unquote(e) != "Allow"
        {
            return Err(format!(
                "`{}`: only Allow statements are modelled",
                l.trim()
            ));
        }
    }
    let effects = policies
        .iter()
        .filter(|l| value_of(l, "Effect").is_some())
        .count();
    let mut statements: Vec<Statement> = Vec::new();
    // (condition, indent of its `- !If`) of the `!If` that opens next.
    let mut pending_if: Option<(String, usize)> = None;
    let mut i = 0;
    while i < policies.len() {
        let l = policies[i];
        if l.trim() == "- !If" {
            // A conditional statement: `- !If`, `- Cond`, the statement,
            // `- !Ref AWS::NoValue`.
            let cond = policies
                .get(i + 1)
                .and_then(|c| c.trim().strip_prefix("- "))
                .filter(|c| c.chars().all(|ch| ch.is_ascii_alphanumeric()))
                .ok_or_else(|| {
                    format!("`{}`: `- !If` not followed by a condition name", l.trim())
                })?;
            pending_if = Some((cond.to_string(), indent(l)));
            i += 2;
            continue;
        }
        if l.contains("!If") && value_of(l, "Resource").is_none() {
            return Err(format!(
                "`{}`: only the block form `- !If` / `- Cond` / statement / `- !Ref AWS::NoValue` is modelled around statements",
                l.trim()
            ));
        }
        if let Some(sid) = value_of(l, "Sid") {
            let only_if = match pending_if.take() {
                Some((cond, at)) if indent(l) > at => Some(cond),
                Some((cond, _)) => {
                    return Err(format!(
                        "statement {sid}: the `!If {cond}` before it wraps no statement"
                    ));
                }
                None => None,
            };
            statements.push(Statement {
                sid: unquote(sid),
                only_if,
                ..Statement::default()
            });
        }
        if let Some(st) = statements.last_mut() {
            st.text.push_str(l);
            st.text.push('\n');
            if let Some(v) = value_of(l, "Condition") {
                if !v.is_empty() {
                    return Err(format!(
                        "statement {}: write its Condition as a block, not inline",
                        st.sid
                    ));
                }
                let key_indent = indent(l);
                while i + 1 < policies.len() && indent(policies[i + 1]) > key_indent {
                    i += 1;
                    st.text.push_str(policies[i]);
                    st.text.push('\n');
                    st.condition.push(policies[i].trim().to_string());
                }
                i += 1;
                continue;
            }
            for (key, list) in [("Action", true), ("Resource", false)] {
                let Some(v) = value_of(l, key) else { continue };
                let items: Vec<String> = if v.is_empty() {
                    // A block list: the following deeper lines starting with `- `.
                    let key_indent = indent(l);
                    let mut items = Vec::new();
                    while i + 1 < policies.len() && indent(policies[i + 1]) > key_indent {
                        i += 1;
                        let item = policies[i];
                        st.text.push_str(item);
                        st.text.push('\n');
                        if let Some(x) = item.trim_start().strip_prefix("- ") {
                            items.push(unquote(x));
                        }
                    }
                    items
                } else if let Some(inner) = v.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
                    inner.split(',').map(unquote).collect()
                } else {
                    vec![unquote(v)]
                };
                if list {
                    st.actions.extend(items);
                } else {
                    st.resources.extend(items);
                }
            }
        } else if value_of(l, "Action").is_some() {
            return Err(format!(
                "`{}`: every statement must open with a Sid",
                l.trim()
            ));
        }
        i += 1;
    }
    if statements.len() != effects {
        return Err(format!(
            "{} statements with a Sid but {effects} Effect lines: give every statement a Sid",
            statements.len()
        ));
    }
    for st in &statements {
        if st.actions.is_empty() {
            return Err(format!("statement {} grants no action", st.sid));
        }
        for a in &st.actions {
            let ok = a.split_once(':').is_some_and(|(svc, name)| {
                !svc.is_empty()
                    && !name.is_empty()
                    && name.chars().all(|c| c.is_ascii_alphanumeric())
            });
            if !ok {
                return Err(format!(
                    "statement {}: `{a}` is not one exact action (no wildcards)",
                    st.sid
                ));
            }
        }
    }
    Ok(statements)
}

fn template_text() -> String {
    std::fs::read_to_string(workspace_root().join("deploy/cloudformation/tidemark.yaml"))
        .expect("deploy/cloudformation/tidemark.yaml")
}

// ---------------------------------------------------------------- the checks

#[test]
fn task_role_grants_exactly_what_the_worker_calls() {
    let ops = sdk_operations();
    let scan = scan_code(&ops);
    assert!(
        scan.unresolved.is_empty(),
        "calls the scanner cannot attribute:\n{}",
        scan.unresolved.join("\n")
    );

    // Operator-only entries must still match a call, or they hide nothing
    // and only go stale.
    let mut stale = Vec::new();
    for (file, action, _) in OPERATOR_ONLY {
        let used = scan.calls.iter().any(|c| {
            c.file == *file && iam_actions(&c.api).is_ok_and(|a| a.iter().any(|x| x == action))
        });
        if !used {
            stale.push(format!("{file} / {action}"));
        }
    }
    assert!(
        stale.is_empty(),
        "OPERATOR_ONLY entries with no matching call: {stale:?}"
    );

    // action -> call sites that need it in the task.
    let mut needed: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut unmapped = Vec::new();
    for c in &scan.calls {
        match iam_actions(&c.api) {
            Err(e) => unmapped.push(format!("{}:{}: {e}", c.file, c.line)),
            Ok(actions) => {
                for a in actions {
                    let operator = OPERATOR_ONLY
                        .iter()
                        .any(|(f, x, _)| *f == c.file && *x == a);
                    if !operator {
                        needed
                            .entry(a)
                            .or_default()
                            .push(format!("{}:{}", c.file, c.line));
                    }
                }
            }
        }
    }
    assert!(unmapped.is_empty(), "{}", unmapped.join("\n"));
    // The scanner must see the worker's core call; an empty scan proves nothing.
    assert!(
        needed.contains_key("dynamodb:BatchWriteItem"),
        "the scan found no BatchWriteItem call: the scanner is broken; found {:?}",
        needed.keys().collect::<Vec<_>>()
    );

    let statements = task_role_statements(&template_text()).unwrap_or_else(|e| panic!("{e}"));
    let granted: BTreeSet<String> = statements
        .iter()
        .flat_map(|s| s.actions.iter().cloned())
        .collect();

    let missing: Vec<String> = needed
        .iter()
        .filter(|(a, _)| !granted.contains(*a))
        .map(|(a, sites)| format!("  {a}  (called at {})", sites.join(", ")))
        .collect();
    let unused: Vec<String> = granted
        .iter()
        .filter(|a| !needed.contains_key(*a) && !ON_BEHALF.iter().any(|(x, _, _)| x == a))
        .map(|a| {
            let sids: Vec<&str> = statements
                .iter()
                .filter(|s| s.actions.contains(a))
                .map(|s| s.sid.as_str())
                .collect();
            format!("  {a}  (statement {})", sids.join(", "))
        })
        .collect();
    assert!(
        missing.is_empty() && unused.is_empty(),
        "task role and code disagree.\nCalled by the worker but not granted:\n{}\nGranted but never called by the worker:\n{}",
        if missing.is_empty() {
            "  (none)".into()
        } else {
            missing.join("\n")
        },
        if unused.is_empty() {
            "  (none)".into()
        } else {
            unused.join("\n")
        },
    );
}

#[test]
fn on_behalf_grants_are_granted_only_under_their_condition() {
    let statements = task_role_statements(&template_text()).unwrap_or_else(|e| panic!("{e}"));
    for (action, cond, why) in ON_BEHALF {
        let granting: Vec<&Statement> = statements
            .iter()
            .filter(|s| s.actions.iter().any(|a| a == action))
            .collect();
        assert!(
            !granting.is_empty(),
            "ON_BEHALF lists {action} ({why}) but no statement grants it: remove the entry"
        );
        for st in granting {
            if ON_BEHALF_ALSO
                .iter()
                .any(|(a, c, _)| a == action && st.only_if.as_deref() == Some(*c))
            {
                continue;
            }
            assert_eq!(
                st.only_if.as_deref(),
                Some(*cond),
                "statement {} grants {action} outside `!If {cond}`",
                st.sid
            );
        }
    }
    // KMS only through the services that use the key for the task.
    for st in statements
        .iter()
        .filter(|s| s.actions.iter().any(|a| a.starts_with("kms:")))
    {
        assert!(
            st.condition
                .iter()
                .any(|l| l.starts_with("kms:ViaService:")),
            "statement {} grants KMS without a kms:ViaService condition",
            st.sid
        );
        assert_eq!(st.resources, ["!Ref KmsKeyArn"], "statement {}", st.sid);
    }
}

/// A KCL application's side tables are only read, and only when a lease
/// table is taken over; the stream's settings are readable in both read
/// modes.
#[test]
fn kcl_side_tables_are_read_only_and_stream_settings_readable_in_every_mode() {
    let statements = task_role_statements(&template_text()).unwrap_or_else(|e| panic!("{e}"));
    for (table, actions) in [
        (
            "${LeaseTableName}-CoordinatorState",
            ["dynamodb:DescribeTable", "dynamodb:GetItem"],
        ),
        (
            "${LeaseTableName}-WorkerMetricStats",
            ["dynamodb:DescribeTable", "dynamodb:Scan"],
        ),
    ] {
        let on: Vec<&Statement> = statements
            .iter()
            .filter(|s| s.text.contains(table))
            .collect();
        assert_eq!(on.len(), 1, "one statement on {table}");
        assert_eq!(on[0].actions, actions, "{table} is read, never written");
        assert_eq!(on[0].only_if.as_deref(), Some("TakesOverALeaseTable"));
    }
    let describe: Vec<&Statement> = statements
        .iter()
        .filter(|s| {
            s.actions
                .iter()
                .any(|a| a == "kinesis:DescribeStreamSummary")
        })
        .collect();
    assert_eq!(describe.len(), 1);
    assert_eq!(describe[0].sid, "ReadTheOneStream");
    assert_eq!(describe[0].only_if.as_deref(), Some("IsKinesis"));
}

/// Another team's table that merely matches `<prefix>_*` is out of reach:
/// period tables are created with the tag `tidemark:prefix` = TablePrefix,
/// and every change needs that tag on the table.
#[test]
fn period_table_changes_need_the_prefix_tag() {
    let template = template_text();
    let statements = task_role_statements(&template).unwrap_or_else(|e| panic!("{e}"));
    const CHANGES: &[&str] = &[
        "dynamodb:UpdateTable",
        "dynamodb:DeleteTable",
        "dynamodb:UpdateTimeToLive",
        "dynamodb:UpdateContinuousBackups",
        // An export copies a whole table out: our tables only.
        "dynamodb:ExportTableToPointInTime",
    ];
    /// The tags CreateTable puts on a period table
    /// (crates/worker/src/maintenance/tags.rs).
    const CREATION_TAGS: &[&str] = &[
        "tidemark:prefix",
        "tidemark:layout",
        "tidemark:layout-from",
        "tidemark:migration",
    ];
    let mut seen = BTreeSet::new();
    for st in &statements {
        for a in &st.actions {
            let creates = a == "dynamodb:CreateTable";
            let tags = a == "dynamodb:TagResource";
            if creates {
                assert!(
                    st.requires_prefix_tag("aws:RequestTag/tidemark:prefix"),
                    "statement {} grants CreateTable without requiring the request tag tidemark:prefix = TablePrefix:\n{}",
                    st.sid,
                    st.text
                );
            } else if tags {
                // Tagging a table that carries no tidemark:prefix is what
                // CreateTable with tags is authorised as: IAM cannot tell it
                // from tagging another application's untagged table, so that
                // grant sets only the tags a creation sets (not the expired
                // or export tags), with our prefix, never over another
                // prefix's tag. Any other tagging is of our own tables.
                let own_table = st.requires_prefix_tag("aws:ResourceTag/tidemark:prefix");
                let our_tag_on_no_other = st.requires_prefix_tag("aws:RequestTag/tidemark:prefix")
                    && st.has_condition("StringEqualsIfExists", "aws:ResourceTag/tidemark:prefix");
                assert!(
                    own_table || our_tag_on_no_other,
                    "statement {} grants TagResource on tables of another prefix:\n{}",
                    st.sid,
                    st.text
                );
                if !own_table {
                    let keys = st.condition_values("ForAllValues:StringEquals", "aws:TagKeys");
                    assert!(
                        !keys.is_empty()
                            && keys.iter().all(|k| CREATION_TAGS.contains(&k.as_str())),
                        "statement {} lets TagResource set any tag on a table that is not yet ours \
                         (aws:TagKeys {keys:?}; creation sets only {CREATION_TAGS:?}):\n{}",
                        st.sid,
                        st.text
                    );
                }
            } else if CHANGES.contains(&a.as_str()) {
                assert!(
                    st.requires_prefix_tag("aws:ResourceTag/tidemark:prefix"),
                    "statement {} grants {a} without requiring the table's tag tidemark:prefix = TablePrefix:\n{}",
                    st.sid,
                    st.text
                );
            } else {
                continue;
            }
            seen.insert(a.as_str());
        }
    }
    for a in CHANGES
        .iter()
        .chain(&["dynamodb:CreateTable", "dynamodb:TagResource"])
    {
        assert!(seen.contains(a), "no statement grants {a}");
    }

    // DeleteTable only when OnExpiry deletes (delete, or export then delete).
    for st in statements
        .iter()
        .filter(|s| s.actions.iter().any(|a| a == "dynamodb:DeleteTable"))
    {
        assert_eq!(
            st.only_if.as_deref(),
            Some("DeletesTables"),
            "statement {} grants DeleteTable whatever OnExpiry is",
            st.sid
        );
    }
    let deletes = template
        .lines()
        .find_map(|l| l.trim().strip_prefix("DeletesTables:"))
        .expect("a DeletesTables condition");
    let holds = |on_expiry: &str| {
        deletes.contains(&format!("!Equals [!Ref OnExpiry, {on_expiry}]"))
            || (on_expiry == "export" && deletes.contains("Condition: IsExport"))
    };
    assert!(
        holds("delete")
            && holds("export")
            && !holds("tag")
            && deletes.trim_start().starts_with("!Or"),
        "DeletesTables must hold for OnExpiry delete and export only: {deletes}"
    );
    assert!(
        template.contains("IsExport: !Equals [!Ref OnExpiry, export]"),
        "IsExport must mean OnExpiry export"
    );
    // Export actions only with OnExpiry export.
    for st in statements.iter().filter(|s| {
        s.actions
            .iter()
            .any(|a| a == "dynamodb:ExportTableToPointInTime" || a == "dynamodb:DescribeExport")
    }) {
        assert_eq!(
            st.only_if.as_deref(),
            Some("IsExport"),
            "statement {}",
            st.sid
        );
    }
}

/// The worker reads period tables only to count (`Scan` with `Select =
/// COUNT`, `Limit 1`: does a table hold items?): the role may not read
/// their items, whatever the code does.
#[test]
fn period_table_scans_only_count() {
    let statements = task_role_statements(&template_text()).unwrap_or_else(|e| panic!("{e}"));
    let mut seen = false;
    for st in statements
        .iter()
        .filter(|s| s.actions.iter().any(|a| a == "dynamodb:Scan"))
        .filter(|s| s.text.contains("table/${TablePrefix}_*"))
    {
        seen = true;
        assert_eq!(
            st.condition_values("StringEquals", "dynamodb:Select"),
            ["COUNT"],
            "statement {} grants Scan on period tables beyond counting:\n{}",
            st.sid,
            st.text
        );
        assert!(
            st.actions.iter().all(|a| a == "dynamodb:Scan"),
            "statement {}: the Select condition would bind its other actions too",
            st.sid
        );
    }
    assert!(
        seen,
        "no statement grants the start-up count of period tables"
    );
}

#[test]
fn task_role_resources_are_scoped() {
    let statements = task_role_statements(&template_text()).unwrap_or_else(|e| panic!("{e}"));
    for st in &statements {
        assert!(
            !st.resources.is_empty(),
            "statement {} has no Resource",
            st.sid
        );
        if st.resources.iter().any(|r| r == "*") {
            let unscoped: Vec<&String> = st
                .actions
                .iter()
                .filter(|a| !RESOURCE_STAR_OK.contains(&a.as_str()))
                .collect();
            assert!(
                unscoped.is_empty(),
                "statement {} grants {unscoped:?} on every resource",
                st.sid
            );
        }
    }
    // Seed 002's scoping: table actions only on <prefix>_<period> tables.
    let creates: Vec<&Statement> = statements
        .iter()
        .filter(|s| s.actions.iter().any(|a| a == "dynamodb:CreateTable"))
        .collect();
    assert!(
        !creates.is_empty(),
        "no statement grants dynamodb:CreateTable"
    );
    for st in creates {
        assert!(
            st.text.contains("table/${TablePrefix}_*") && !st.resources.iter().any(|r| r == "*"),
            "statement {} must scope CreateTable to table/${{TablePrefix}}_*:\n{}",
            st.sid,
            st.text
        );
    }
}

#[test]
fn scanner_finds_multi_line_calls_and_ignores_comments_strings_and_tests() {
    let ops: Operations = BTreeMap::from([
        (
            "dynamodb",
            BTreeMap::from([
                ("batch_write_item".to_string(), "BatchWriteItem".to_string()),
                ("list_tables".to_string(), "ListTables".to_string()),
                ("tag_resource".to_string(), "TagResource".to_string()),
                ("scan".to_string(), "Scan".to_string()),
            ]),
        ),
        (
            "kinesis",
            BTreeMap::from([
                ("get_records".to_string(), "GetRecords".to_string()),
                ("tag_resource".to_string(), "TagResource".to_string()),
            ]),
        ),
    ]);
    let src = r##"
use aws_sdk_dynamodb::Client;
fn f(c: &Client) {
    let _ = c
        .batch_write_item ( )
        .send();
    let mut pages = c.list_tables().into_paginator().send();
    // c.scan() in a comment
    /* c.get_records() in /* a nested */ block */
    let s = "c.scan() in a string";
    let r = r#"c.scan() in a raw "string""#;
    let ch = '.'; let lt: &'static str = "";
    self.scan_helper(x);
}
#[cfg(test)]
mod tests {
    fn t(c: &Client) { c.scan(); }
}
"##;
    let mut scan = Scan::default();
    scan_file("x.rs", src, &ops, &mut scan);
    let apis: Vec<(&str, usize)> = scan
        .calls
        .iter()
        .map(|c| (c.api.as_str(), c.line))
        .collect();
    assert_eq!(
        apis,
        vec![("dynamodb:BatchWriteItem", 5), ("dynamodb:ListTables", 7)]
    );
    assert!(scan.unresolved.is_empty(), "{:?}", scan.unresolved);

    // A raw call names its operation in its X-Amz-Target; a typo there is
    // reported, not skipped.
    let mut raw = Scan::default();
    scan_file(
        "t.rs",
        "fn h() { let t = (\"x-amz-target\", \"DynamoDB_20120810.BatchWriteItem\");\n\
         let u = \"DynamoDB_20120810.BatchWrite\"; }",
        &ops,
        &mut raw,
    );
    let apis: Vec<(&str, usize)> = raw.calls.iter().map(|c| (c.api.as_str(), c.line)).collect();
    assert_eq!(apis, vec![("dynamodb:BatchWriteItem", 1)]);
    assert_eq!(raw.unresolved.len(), 1, "{:?}", raw.unresolved);

    // A file naming both SDKs: `tag_resource` is ambiguous, and a Kinesis
    // call is not mistaken for DynamoDB.
    let both = "use aws_sdk_dynamodb as d; use aws_sdk_kinesis as k;\n\
                fn g() { k.get_records(); d.tag_resource(); }";
    let mut scan = Scan::default();
    scan_file("y.rs", both, &ops, &mut scan);
    assert_eq!(scan.calls.len(), 1);
    assert_eq!(scan.calls[0].api, "kinesis:GetRecords");
    assert_eq!(scan.unresolved.len(), 1, "{:?}", scan.unresolved);
    assert!(scan.unresolved[0].contains("tag_resource"));

    // An operation-like call in a file naming no SDK crate is flagged, not dropped.
    let mut scan = Scan::default();
    scan_file("z.rs", "fn h() { thing.scan(); }", &ops, &mut scan);
    assert!(scan.calls.is_empty());
    assert_eq!(scan.unresolved.len(), 1);
}

#[test]
fn template_scanner_reads_block_and_inline_actions_and_refuses_wildcards() {
    let template = r#"
Resources:
  TaskRole:
    Type: AWS::IAM::Role
    Properties:
      AssumeRolePolicyDocument:
        Statement:
          - Effect: Allow
            Action: sts:AssumeRole
      Policies:
        - PolicyName: p
          PolicyDocument:
            Statement:
              - Sid: A
                Effect: Allow
                Action:
                  # a comment between items
                  - dynamodb:PutItem
                  - "dynamodb:GetItem"
                Resource: !Sub "arn:table/${TablePrefix}_*"
              - !If
                - Cond
                - Sid: B
                  Effect: Allow
                  Action: [kinesis:GetRecords, 'kinesis:ListShards']
                  Resource: "*"
                - !Ref AWS::NoValue
  Other:
    Type: AWS::SQS::Queue
"#;
    let st = task_role_statements(template).expect("parses");
    assert_eq!(st.len(), 2);
    assert_eq!(st[0].actions, vec!["dynamodb:PutItem", "dynamodb:GetItem"]);
    assert_eq!(st[0].only_if, None);
    assert_eq!(st[1].only_if.as_deref(), Some("Cond"));
    assert_eq!(st[1].sid, "B");
    assert_eq!(
        st[1].actions,
        vec!["kinesis:GetRecords", "kinesis:ListShards"]
    );
    assert_eq!(st[1].resources, vec!["*"]);

    // A Condition block is read, and its list items are not taken for actions.
    let conditioned = template.replace(
        "                Resource: !Sub \"arn:table/${TablePrefix}_*\"\n",
        "                Resource: !Sub \"arn:table/${TablePrefix}_*\"\n                Condition:\n                  StringEquals:\n                    aws:ResourceTag/tidemark:prefix: !Ref TablePrefix\n                    kms:ViaService:\n                      - x\n",
    );
    let st = task_role_statements(&conditioned).expect("parses");
    assert_eq!(st[0].actions, vec!["dynamodb:PutItem", "dynamodb:GetItem"]);
    assert_eq!(
        st[0].condition,
        vec![
            "StringEquals:",
            "aws:ResourceTag/tidemark:prefix: !Ref TablePrefix",
            "kms:ViaService:",
            "- x"
        ]
    );
    assert!(st[0].requires_prefix_tag("aws:ResourceTag/tidemark:prefix"));
    assert!(!st[0].requires_prefix_tag("aws:RequestTag/tidemark:prefix"));
    assert!(!st[0].has_condition("StringEqualsIfExists", "aws:ResourceTag/tidemark:prefix"));
    let if_exists = conditioned.replace(
        "                  StringEquals:\n",
        "                  StringEqualsIfExists:\n",
    );
    let st2 = task_role_statements(&if_exists).expect("parses");
    assert!(!st2[0].requires_prefix_tag("aws:ResourceTag/tidemark:prefix"));
    assert!(st2[0].has_condition("StringEqualsIfExists", "aws:ResourceTag/tidemark:prefix"));
    assert!(!st[1].requires_prefix_tag("aws:ResourceTag/tidemark:prefix"));
    let inline = template.replace(
        "                  Action: [kinesis",
        "                  Condition: { Bool: { aws:SecureTransport: true } }\n                  Action: [kinesis",
    );
    assert!(task_role_statements(&inline).unwrap_err().contains("block"));
    let inline_if = template.replace(
        "              - Sid: A\n",
        "              - !If [Cond, {Sid: X, Effect: Allow, Action: [s3:GetObject], Resource: x}, !Ref AWS::NoValue]\n              - Sid: A\n",
    );
    assert!(
        task_role_statements(&inline_if)
            .unwrap_err()
            .contains("!If")
    );

    let wildcard = template.replace("dynamodb:GetItem", "dynamodb:Get*");
    assert!(
        task_role_statements(&wildcard)
            .unwrap_err()
            .contains("wildcards")
    );
    let no_sid = template.replace("- Sid: B\n                  Effect", "- Effect");
    assert!(task_role_statements(&no_sid).is_err());
    let managed = template.replace(
        "      Policies:",
        "      ManagedPolicyArns: [arn:aws:iam::aws:policy/AdministratorAccess]\n      Policies:",
    );
    assert!(
        task_role_statements(&managed)
            .unwrap_err()
            .contains("ManagedPolicyArns")
    );
}
