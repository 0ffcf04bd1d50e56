//! The deployed stack, end to end: `deploy/cloudformation/tidemark.yaml` is
//! deployed into the local stack's CloudFormation (moto), and the real
//! `tidemark run` binary runs against what it created, configured exactly as
//! the stack's task definition configures the container. It must hold the
//! maintenance lease in the stack's coordinator table, prebuild the next
//! period's table, and store every produced event. A template whose
//! coordinator table is keyed on anything but `leaseKey` fails here.
//!
//! How it is faithful to a deployment:
//!
//! - **The stack**: `DeployCompute=false` leaves out what an emulator cannot
//!   run (cluster, service, auto scaling, the alarms and dashboard on the
//!   tasks' metrics). Everything else is created by CloudFormation: lease and
//!   coordinator tables, dead-letter queue, roles, log group and the task
//!   definition. The source is an existing Kinesis stream (the `StreamName`
//!   parameter) created in kinesis-local, because moto's own Kinesis is not
//!   usable for consumers (closed shards never end, lost records; see
//!   docs/local-aws.md); the Kinesis source is the template's default and
//!   exercises the lease table too.
//! - **The configuration**: the container's command and environment are read
//!   back from the task definition CloudFormation registered (ECS
//!   DescribeTaskDefinition), so every `!Ref`, `!If` and `!Sub` is resolved by
//!   the CloudFormation engine, not by this test. The test checks that the
//!   list has every variable the template's task definition names (less
//!   those its conditions leave out for these parameters). The only changes:
//!   the telemetry port (`127.0.0.1:<free port>`, not `0.0.0.0:9102`), the
//!   task's writable volume mapped to a local directory, and the AWS
//!   endpoints and credentials of the local stack.
//! - **Keys the worker does not know yet**: [`PENDING`] lists variables the
//!   template sets for configuration keys the worker gains with issue 22
//!   (EMF metrics, PITR, deletion protection, export). A build whose
//!   `tidemark config check` refuses one of them runs without it, and the
//!   test prints which; any other refused variable fails the test. When the
//!   build accepts `TIDEMARK__TELEMETRY__EMF`, the test also checks that the
//!   worker's log carries the Embedded Metric Format metrics the template's
//!   alarms and dashboard use.
//! - **One account**: kinesis-local takes a 12-digit access key id as the
//!   account id, and moto puts requests with a key it does not know into its
//!   default account 123456789012. With that key the stream and the stack are
//!   in the same account, and the template's
//!   `arn:…:${AWS::AccountId}:stream/${StreamName}` names the stream.
//!
//! CloudFormation is driven by `tests/cfn/deploy.py` with boto3 from the
//! local stack's moto venv (or `TIDEMARK_PYTHON`), as
//! `tests/tests/stack_limits_dynamodb.rs` does: one Python helper instead of
//! two more AWS SDK crates (CloudFormation, ECS) to build. moto serves
//! CloudFormation and ECS on the DynamoDB endpoint.
//!
//! A stack test (docs/testing.md) in this crate because only its tests can
//! name the built binary. Ignored unless the crate's `stack` feature is on.

// A panic in a helper is a failed assertion too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{AttributeValue, TableStatus};
use serde_json::Value;
use tidemark_schema::period::Period;
use tidemark_tests::{LocalStack, free_port, repo_root, unique_name, wait_until_or};

const BIN: &str = env!("CARGO_BIN_EXE_tidemark");

/// The account of the stream (kinesis-local) and the stack (moto's default).
/// The dead-letter variables a stack without `DeadLetterBucket` leaves out.
const NO_DEAD_LETTER_BUCKET: [&str; 6] = [
    "TIDEMARK__DEAD_LETTERS__BUCKET",
    "TIDEMARK__DEAD_LETTERS__PREFIX",
    "TIDEMARK__DEAD_LETTERS__KMS_KEY_ID",
    "TIDEMARK__DEAD_LETTERS__S3_BUCKET",
    "TIDEMARK__DEAD_LETTERS__S3_PREFIX",
    "TIDEMARK__DEAD_LETTERS__S3_KMS_KEY_ID",
];

/// The oversized-event variables a stack without `OversizeBucket` leaves
/// out.
const NO_OVERSIZE_BUCKET: [&str; 4] = [
    "TIDEMARK__SCHEMA__OVERSIZE",
    "TIDEMARK__SCHEMA__OVERSIZE_S3__BUCKET",
    "TIDEMARK__SCHEMA__OVERSIZE_S3__PREFIX",
    "TIDEMARK__SCHEMA__OVERSIZE_S3__KMS_KEY_ID",
];

const ACCOUNT: &str = "123456789012";

/// Variables for configuration keys the worker gains with issue 22: dropped,
/// with a note, while the build refuses them.
const PENDING: &[&str] = &[
    "TIDEMARK__TELEMETRY__EMF",
    "TIDEMARK__TELEMETRY__EMF_NAMESPACE",
    "TIDEMARK__MAINTENANCE__PITR",
    "TIDEMARK__MAINTENANCE__DELETION_PROTECTION",
    "TIDEMARK__MAINTENANCE__EXPORT__BUCKET",
    "TIDEMARK__MAINTENANCE__EXPORT__PREFIX",
];

fn template_path() -> PathBuf {
    repo_root().join("deploy/cloudformation/tidemark.yaml")
}

fn python() -> PathBuf {
    let python = std::env::var_os("TIDEMARK_PYTHON").map_or_else(
        || repo_root().join("localstack/.cache/venv/bin/python"),
        PathBuf::from,
    );
    assert!(
        python.exists(),
        "this test needs boto3: moto's venv at {} (localstack/up installs it) or TIDEMARK_PYTHON",
        python.display()
    );
    python
}

/// `tests/cfn/deploy.py ARGS` against the stack's moto, in the stack's account.
fn deploy_py_command(stack: &LocalStack, args: &[&str]) -> Command {
    let mut c = Command::new(python());
    c.arg(repo_root().join("tests/cfn/deploy.py"))
        .args(args)
        // moto's own port (CloudFormation, IAM, ECS): the deployment is
        // not under test, and the limits proxy only knows DynamoDB's API.
        .args(["--endpoint", &stack.dynamodb_direct_url])
        .env("AWS_ACCESS_KEY_ID", ACCOUNT)
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1");
    c
}

/// [`deploy_py_command`]'s JSON output.
fn deploy_py(stack: &LocalStack, args: &[&str]) -> Value {
    let out = deploy_py_command(stack, args).output().unwrap();
    assert!(
        out.status.success(),
        "deploy.py {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The deployed stack; deleted (with its retained tables and queue, and the
/// tables the worker created) on drop, also when the test fails.
struct Deployed {
    stack: LocalStack,
    name: String,
    report: Value,
}

impl Deployed {
    fn create(stack: &LocalStack, name: &str, params: &[(&str, &str)]) -> Deployed {
        let mut args = vec![
            "create".to_string(),
            "--template".into(),
            template_path().to_string_lossy().into_owned(),
            "--stack".into(),
            name.into(),
        ];
        for (k, v) in params {
            args.push("--param".into());
            args.push(format!("{k}={v}"));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        // Owns the cleanup before the stack exists: a half-created stack is
        // deleted too.
        let mut deployed = Deployed {
            stack: stack.clone(),
            name: name.to_string(),
            report: Value::Null,
        };
        deployed.report = deploy_py(stack, &args);
        deployed
    }

    fn output(&self, key: &str) -> &str {
        self.report["outputs"][key]
            .as_str()
            .unwrap_or_else(|| panic!("no output {key}: {}", self.report["outputs"]))
    }
}

impl Drop for Deployed {
    fn drop(&mut self) {
        // Best effort: a failing cleanup must not hide the test's own panic.
        let _ = deploy_py_command(
            &self.stack,
            &["delete", "--stack", &self.name, "--prefix", &self.name],
        )
        .stdout(Stdio::null())
        .status();
    }
}

/// The last 30 lines of `logs`, for failure messages.
fn tail(logs: &[PathBuf]) -> String {
    let text: String = logs
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap_or_default())
        .collect();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// A worker process, killed on drop (a failed test leaves nothing running).
struct Worker {
    child: Child,
    /// Its stdout (the JSON log) and stderr.
    logs: [PathBuf; 2],
}

impl Drop for Worker {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Worker {
    /// The last 30 lines of its output, for failure messages.
    fn tail(&self) -> String {
        tail(&self.logs)
    }

    /// Polls `check` until `Some`; fails with the worker's output when the
    /// worker exits first or `deadline` passes.
    async fn wait<T, F, Fut>(&mut self, what: &str, deadline: Duration, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let logs = self.logs.clone();
        let child = &mut self.child;
        let checked = move || {
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "the worker exited ({status}) before {what}:\n{}",
                    tail(&logs)
                );
            }
            check()
        };
        wait_until_or(what, deadline, checked, || {
            format!("the worker's output:\n{}", tail(&self.logs))
        })
        .await
    }

    /// SIGTERM, then the exit status within `limit`.
    fn terminate(&mut self, limit: Duration) -> std::process::ExitStatus {
        Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                start.elapsed() < limit,
                "worker did not exit within {limit:?} of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Every `TIDEMARK__*` name the template's task definition sets, read from
/// the template text (the container's `Environment:` list).
fn template_env_names(template: &str) -> BTreeSet<String> {
    let start = template
        .find("\n  TaskDefinition:\n")
        .expect("TaskDefinition in the template");
    template[start + 1..]
        .lines()
        .skip(1)
        // The resource ends at the next line indented 2 or less.
        .take_while(|l| l.trim().is_empty() || l.starts_with("   "))
        .filter_map(|l| {
            let at = l.find("Name: TIDEMARK__")? + "Name: ".len();
            let name: String = l[at..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            Some(name)
        })
        .collect()
}

/// The task definition's environment: (name, value), with the `null`s moto
/// leaves where `!If` chose `AWS::NoValue` (CloudFormation drops them).
fn task_env(task: &Value) -> BTreeMap<String, String> {
    task["container"]["environment"]
        .as_array()
        .expect("environment")
        .iter()
        .filter(|e| !e.is_null())
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["value"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The task definition's variables are the template's, less `left_out`
/// (those its conditions leave out for the parameters deployed).
fn assert_env_is_the_templates(env: &BTreeMap<String, String>, left_out: &[&str]) {
    let template = std::fs::read_to_string(template_path()).unwrap();
    let expected: BTreeSet<String> = template_env_names(&template)
        .into_iter()
        .filter(|n| !left_out.contains(&n.as_str()))
        .collect();
    assert!(
        expected.contains("TIDEMARK__MAINTENANCE__COORDINATOR_TABLE")
            && expected.contains("TIDEMARK__SCHEMA__TABLE_PREFIX"),
        "the template scan found too little: {expected:?}"
    );
    let got: BTreeSet<String> = env.keys().cloned().collect();
    assert_eq!(
        got, expected,
        "the task definition's environment and the template's disagree"
    );
}

/// One statement of the task role, as IAM holds it after CloudFormation.
#[derive(Debug)]
struct Grant {
    sid: String,
    actions: Vec<String>,
    resources: Vec<String>,
    condition: Value,
}

/// A string or a list of strings, without the nulls moto leaves.
fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items
            .iter()
            .filter_map(|i| i.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

/// The statements of the task role's inline policies.
fn task_role_grants(report: &Value) -> Vec<Grant> {
    let policies = report["task_role_policies"]
        .as_object()
        .expect("task_role_policies");
    assert!(!policies.is_empty(), "the task role has no inline policy");
    policies
        .values()
        .flat_map(|doc| doc["Statement"].as_array().cloned().unwrap_or_default())
        .filter(|st| !st.is_null())
        .map(|st| Grant {
            sid: st["Sid"].as_str().unwrap_or_default().to_string(),
            actions: strings(&st["Action"]),
            resources: strings(&st["Resource"]),
            condition: st["Condition"].clone(),
        })
        .collect()
}

fn all_actions(grants: &[Grant]) -> BTreeSet<String> {
    grants.iter().flat_map(|g| g.actions.clone()).collect()
}

/// The one statement granting `action` (panics unless exactly one does).
fn grant_of<'a>(grants: &'a [Grant], action: &str) -> &'a Grant {
    let found: Vec<&Grant> = grants
        .iter()
        .filter(|g| g.actions.iter().any(|a| a == action))
        .collect();
    assert_eq!(found.len(), 1, "statements granting {action}: {found:#?}");
    found[0]
}

/// The variable of a dotted config key: `telemetry.emf` ->
/// `TIDEMARK__TELEMETRY__EMF`.
fn var_of(key: &str) -> String {
    format!("TIDEMARK__{}", key.to_uppercase().replace('.', "__"))
}

/// The local run of the task: the binary with exactly `env` (plus nothing
/// inherited from this process).
fn command(env: &BTreeMap<String, String>, home: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.env_clear().envs(env).env("HOME", home);
    c
}

/// Drops [`PENDING`] variables the build's `config check` refuses; panics on
/// any other problem. Returns the dropped ones.
fn drop_refused_pending(env: &mut BTreeMap<String, String>, home: &Path) -> Vec<String> {
    let mut dropped = Vec::new();
    for _ in 0..=PENDING.len() {
        let out = command(env, home)
            .args(["config", "check", "-o", "json"])
            .output()
            .unwrap();
        let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "config check printed no JSON ({e}): {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        if report["ok"] == true {
            return dropped;
        }
        let problems = report["problems"].as_array().cloned().unwrap_or_default();
        let mut progress = false;
        for p in &problems {
            let var = p["origin"]["var"]
                .as_str()
                .map(str::to_string)
                .or_else(|| p["key"].as_str().map(var_of))
                .unwrap_or_default();
            // A refused enum value names its key too (on_expiry = export).
            if PENDING.contains(&var.as_str()) && env.remove(&var).is_some() {
                dropped.push(var);
                progress = true;
            }
        }
        assert!(
            progress,
            "the task definition's configuration is refused by `tidemark config check`:\n{report:#}"
        );
    }
    panic!("config check still fails after dropping {dropped:?}");
}

/// The EMF metrics with the dimension set [TablePrefix] = `prefix` in the
/// log so far (one JSON object per line; only EMF lines count).
fn emf_metrics(log: &Path, namespace: &str, prefix: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut found = BTreeSet::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let Some(directives) = v["_aws"]["CloudWatchMetrics"].as_array() else {
            continue;
        };
        // The EMF specification's required fields: _aws.Timestamp (epoch
        // ms), and per directive a Namespace, Dimensions (arrays of names,
        // each a member of the line) and Metrics (each with a Name that is
        // a member of the line).
        assert!(
            v["_aws"]["Timestamp"].is_u64(),
            "EMF without Timestamp: {line}"
        );
        if v["TablePrefix"] != prefix {
            continue;
        }
        for d in directives {
            if d["Namespace"] != namespace {
                continue;
            }
            let sets = d["Dimensions"].as_array().expect("Dimensions");
            let prefix_only = sets.iter().any(|s| {
                s.as_array()
                    .is_some_and(|s| s.len() == 1 && s[0] == "TablePrefix")
            });
            for m in d["Metrics"].as_array().expect("Metrics") {
                let name = m["Name"].as_str().expect("metric Name");
                assert!(
                    !v[name].is_null(),
                    "EMF metric {name} has no value member: {line}"
                );
                if prefix_only {
                    found.insert(name.to_string());
                }
            }
        }
    }
    found
}

#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test(flavor = "multi_thread")]
async fn deployed_stack_maintains_its_tables_and_stores_every_event() {
    let stack = tidemark_tests::stack().await;
    let name = unique_name("deploy");
    let dir = std::env::temp_dir().join(&name);
    std::fs::create_dir_all(&dir).unwrap();

    // The stream the stack is pointed at, in the stack's account.
    let kinesis = aws_sdk_kinesis::Client::from_conf(
        aws_sdk_kinesis::config::Builder::from(&stack.sdk)
            .credentials_provider(aws_sdk_kinesis::config::Credentials::new(
                ACCOUNT,
                "test",
                None,
                None,
                "stack_deploy",
            ))
            .endpoint_url(&stack.kinesis_url)
            .build(),
    );
    let stream = format!("{name}-events");
    tidemark_tests::create_stream(&kinesis, &stream, 2).await;
    tidemark_tests::wait_stream_active(&kinesis, &stream).await;

    // Hourly tables built 2 h ahead: the next hour's table is due at once.
    let deployed = Deployed::create(
        &stack,
        &name,
        &[
            ("DeployCompute", "false"),
            ("ImageUri", "tidemark:local"),
            ("Subnets", "subnet-00000000"),
            ("SecurityGroups", "sg-00000000"),
            ("StreamName", &stream),
            ("TablePrefix", &name),
            ("Period", "hour"),
            ("PrebuildAhead", "2h"),
        ],
    );
    let resources = &deployed.report["resources"];
    for (logical, kind) in [
        ("LeaseTable", "AWS::DynamoDB::Table"),
        ("CoordinatorTable", "AWS::DynamoDB::Table"),
        ("DeadLetterQueue", "AWS::SQS::Queue"),
        ("TaskRole", "AWS::IAM::Role"),
        ("TaskDefinition", "AWS::ECS::TaskDefinition"),
    ] {
        assert_eq!(
            resources[logical]["type"], kind,
            "{logical} not created: {resources:#}"
        );
    }
    for left_out in ["Cluster", "Service"] {
        assert!(
            resources[left_out].is_null(),
            "DeployCompute=false created {left_out}"
        );
    }

    // The container as the task definition configures it.
    let task = &deployed.report["task_definition"];
    let container = &task["container"];
    let command_args: Vec<String> = container["command"]
        .as_array()
        .expect("command")
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    assert_eq!(command_args, ["run"], "the container's command");
    let mut env = task_env(task);
    // Left out by the template's conditions for a Kinesis source and
    // OnExpiry tag.
    assert_env_is_the_templates(
        &env,
        &[
            &[
                "TIDEMARK__SOURCE__QUEUE_URL",
                "TIDEMARK__MAINTENANCE__EXPORT__BUCKET",
                "TIDEMARK__MAINTENANCE__EXPORT__PREFIX",
                // Provisioned billing: no on-demand ceiling.
                "TIDEMARK__SCHEMA__TIERS__PREBUILD__MAX_WRITE_UNITS",
                "TIDEMARK__SCHEMA__TIERS__ACTIVE__MAX_WRITE_UNITS",
                "TIDEMARK__SCHEMA__TIERS__COOLING__MAX_WRITE_UNITS",
            ][..],
            &NO_DEAD_LETTER_BUCKET,
            &NO_OVERSIZE_BUCKET,
        ]
        .concat(),
    );
    // The role as IAM holds it: OnExpiry tag deletes nothing, exports
    // nothing; no KMS key, no KMS rights; the tag condition names the prefix.
    let grants = task_role_grants(&deployed.report);
    let actions = all_actions(&grants);
    for absent in [
        "dynamodb:DeleteTable",
        "dynamodb:ExportTableToPointInTime",
        "dynamodb:DescribeExport",
        "sqs:ReceiveMessage",
    ] {
        assert!(!actions.contains(absent), "{absent} granted: {grants:#?}");
    }
    assert!(
        !actions
            .iter()
            .any(|a| a.starts_with("s3:") || a.starts_with("kms:")),
        "S3 or KMS granted: {actions:?}"
    );
    let create = grant_of(&grants, "dynamodb:CreateTable");
    assert_eq!(
        create.condition["StringEquals"]["aws:RequestTag/tidemark:prefix"], name,
        "{create:#?}"
    );
    assert_eq!(
        grant_of(&grants, "kinesis:GetRecords").resources,
        [env["TIDEMARK__SOURCE__STREAM"].clone()]
    );
    assert_eq!(
        env["TIDEMARK__MAINTENANCE__COORDINATOR_TABLE"],
        deployed.output("CoordinatorTableName")
    );
    assert_eq!(
        env["TIDEMARK__SOURCE__LEASE_TABLE"],
        deployed.output("LeaseTableName")
    );

    // The root file system is read-only, and a task has no durable disk:
    // no dead-letter fallback file (an entry the queue refuses for good
    // stops the worker, its record unacknowledged, rather than being
    // acknowledged onto storage the next deploy erases).
    assert_eq!(container["readonlyRootFilesystem"], true);
    assert!(
        !env.contains_key("TIDEMARK__DEAD_LETTERS__FALLBACK_PATH"),
        "the task sets a dead-letter fallback file on ephemeral storage"
    );

    // Local endpoints, credentials and port: the only other differences.
    let port = free_port();
    env.insert(
        "TIDEMARK__TELEMETRY__LISTEN".into(),
        format!("127.0.0.1:{port}"),
    );
    for (k, v) in [
        ("AWS_ENDPOINT_URL_KINESIS", stack.kinesis_url.as_str()),
        ("AWS_ENDPOINT_URL_DYNAMODB", stack.dynamodb_url.as_str()),
        ("AWS_ENDPOINT_URL_SQS", stack.sqs_url.as_str()),
        // Table auto scaling (on by default in the template): moto.
        (
            "AWS_ENDPOINT_URL_APPLICATION_AUTO_SCALING",
            stack.sqs_url.as_str(),
        ),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", ACCOUNT),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ] {
        env.insert(k.into(), v.into());
    }
    let dropped = drop_refused_pending(&mut env, &dir);
    if !dropped.is_empty() {
        eprintln!(
            "stack_deploy: this build refuses {dropped:?} (issue 22's new keys); running without them"
        );
    }

    let log = dir.join("run.log");
    let mut worker = Worker {
        child: command(&env, &dir)
            .args(&command_args)
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(dir.join("run.stderr")).unwrap())
            .spawn()
            .unwrap(),
        logs: [log.clone(), dir.join("run.stderr")],
    };

    // Events into the stream, as an operator's `produce` sends them.
    let count = 2_000u64;
    let manifest = dir.join("produced.jsonl");
    let out = command(&env, &dir)
        .args(["produce", "--count", &count.to_string(), "--devices", "20"])
        .args(["--rate", "2000", "--quiet", "--manifest"])
        .arg(&manifest)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "produce: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // 1. The maintenance lease is held, in the stack's coordinator table.
    let dynamodb = stack.dynamodb();
    let coordinator = deployed.output("CoordinatorTableName").to_string();
    let owner = worker
        .wait("maintenance lease held", Duration::from_secs(60), || {
            let dynamodb = dynamodb.clone();
            let coordinator = coordinator.clone();
            async move {
                let item = dynamodb
                    .get_item()
                    .table_name(&coordinator)
                    .key("leaseKey", AttributeValue::S("tidemark-maintenance".into()))
                    .consistent_read(true)
                    .send()
                    .await
                    .ok()?
                    .item?;
                match item.get("leaseOwner") {
                    Some(AttributeValue::S(owner)) if !owner.is_empty() => Some(owner.clone()),
                    _ => None,
                }
            }
        })
        .await;
    assert!(!owner.is_empty());

    // 2. The next period's table is prebuilt (re-computed on each poll: the
    // hour may turn while the test runs).
    let next = worker
        .wait(
            "next period's table ACTIVE",
            Duration::from_secs(150),
            || {
                let dynamodb = dynamodb.clone();
                let prefix = name.clone();
                async move {
                    let now_ms = chrono::Utc::now().timestamp_millis();
                    let table = format!(
                        "{prefix}_{}",
                        Period::Hour.containing(now_ms).next().label()
                    );
                    let status = dynamodb
                        .describe_table()
                        .table_name(&table)
                        .send()
                        .await
                        .ok()?
                        .table?
                        .table_status?;
                    (status == TableStatus::Active).then_some(table)
                }
            },
        )
        .await;

    // 3. Every produced event is stored (`verify` reads each one back).
    let stored = worker
        .wait(
            "every produced event stored",
            Duration::from_secs(120),
            || {
                let out = command(&env, &dir)
                    .args(["verify", "--manifest"])
                    .arg(&manifest)
                    .arg("--json")
                    .output();
                async move {
                    let out = out.ok()?;
                    let report: Value = serde_json::from_slice(&out.stdout).ok()?;
                    (report["found"] == count).then_some(report)
                }
            },
        )
        .await;
    assert_eq!(stored["found"], count, "{stored}");

    // 3b. The template's default table auto scaling reached the worker:
    // the current table's writes are registered with Application Auto
    // Scaling (moto), at the template's 1,000 to 10,000 WCU. Checked after
    // the events: the registration (a maintenance round) overlaps them.
    let autoscaling = aws_sdk_applicationautoscaling::Client::from_conf(
        aws_sdk_applicationautoscaling::config::Builder::from(&stack.sdk)
            .endpoint_url(&stack.sqs_url)
            .build(),
    );
    worker
        .wait(
            "the current table's write scaling registered",
            Duration::from_secs(120),
            || {
                let autoscaling = autoscaling.clone();
                let prefix = name.clone();
                async move {
                    let now_ms = chrono::Utc::now().timestamp_millis();
                    let table = format!("{prefix}_{}", Period::Hour.containing(now_ms).label());
                    let out = autoscaling
                        .describe_scalable_targets()
                        .service_namespace(
                            aws_sdk_applicationautoscaling::types::ServiceNamespace::Dynamodb,
                        )
                        .resource_ids(format!("table/{table}"))
                        .send()
                        .await
                        .ok()?;
                    out.scalable_targets()
                        .iter()
                        .any(|t| t.min_capacity() == 1000 && t.max_capacity() == 10000)
                        .then_some(())
                }
            },
        )
        .await;

    // 4. With EMF on (a build that knows the key), the log carries every
    // metric the alarms and the dashboard read.
    if env.contains_key("TIDEMARK__TELEMETRY__EMF") {
        let namespace = env["TIDEMARK__TELEMETRY__EMF_NAMESPACE"].clone();
        let missing = worker
            .wait("EMF metrics in the log", Duration::from_secs(150), || {
                let found = emf_metrics(&log, &namespace, &name);
                let missing: Vec<&str> = tidemark_tests::EMF_METRICS
                    .iter()
                    .copied()
                    .filter(|m| !found.contains(*m))
                    .collect();
                async move { missing.is_empty().then_some(missing) }
            })
            .await;
        assert!(missing.is_empty());
    }

    assert!(
        matches!(worker.child.try_wait(), Ok(None)),
        "the worker stopped early:\n{}",
        worker.tail()
    );
    // ECS's StopTimeout is 45 s.
    let status = worker.terminate(Duration::from_secs(45));
    assert!(
        status.success(),
        "worker exit {status} after SIGTERM:\n{}",
        worker.tail()
    );
    eprintln!(
        "stack_deploy: lease held by {owner}, {next} ACTIVE, {count} events stored; dropped {dropped:?}"
    );

    let _ = kinesis.delete_stream().stream_name(&stream).send().await;
    drop(deployed);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The other branches of the template's conditions, resolved by
/// CloudFormation: an SQS source with entity keys, OnExpiry export and a
/// KMS key; and OnExpiry delete. Deployed only (the worker run above covers
/// the Kinesis source).
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
#[tokio::test(flavor = "multi_thread")]
async fn deployed_stack_variants_get_the_environment_and_rights_they_need() {
    let stack = tidemark_tests::stack().await;
    let key = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab";
    let common = [
        ("DeployCompute", "false"),
        ("ImageUri", "tidemark:local"),
        ("Subnets", "subnet-00000000"),
        ("SecurityGroups", "sg-00000000"),
    ];

    let name = unique_name("deploy-sqs");
    let queue = format!("{name}-source");
    let mut params = common.to_vec();
    params.extend([
        ("SourceKind", "sqs"),
        ("SourceQueueName", queue.as_str()),
        ("TablePrefix", name.as_str()),
        ("KeyStrategy", "entity"),
        ("OnExpiry", "export"),
        ("ExportBucket", "tidemark-exports"),
        ("ExportPrefix", "events/expired/"),
        ("KmsKeyArn", key),
    ]);
    let deployed = Deployed::create(&stack, &name, &params);
    let env = task_env(&deployed.report["task_definition"]);
    assert_env_is_the_templates(
        &env,
        &[
            &[
                "TIDEMARK__SOURCE__STREAM",
                "TIDEMARK__SOURCE__LEASE_TABLE",
                "TIDEMARK__SOURCE__READ_MODE",
                "TIDEMARK__SOURCE__LEASE_ASSIGNMENT",
                "TIDEMARK__SCHEMA__KEY__SHARDS",
                "TIDEMARK__SCHEMA__KEY__BUCKET",
                "TIDEMARK__SCHEMA__TIERS__PREBUILD__MAX_WRITE_UNITS",
                "TIDEMARK__SCHEMA__TIERS__ACTIVE__MAX_WRITE_UNITS",
                "TIDEMARK__SCHEMA__TIERS__COOLING__MAX_WRITE_UNITS",
            ][..],
            &NO_DEAD_LETTER_BUCKET,
            &NO_OVERSIZE_BUCKET,
        ]
        .concat(),
    );
    assert_eq!(env["TIDEMARK__MAINTENANCE__ON_EXPIRY"], "export");
    assert_eq!(
        env["TIDEMARK__MAINTENANCE__EXPORT__BUCKET"],
        "tidemark-exports"
    );
    assert_eq!(
        env["TIDEMARK__MAINTENANCE__EXPORT__PREFIX"],
        "events/expired/"
    );
    assert!(
        env["TIDEMARK__SOURCE__QUEUE_URL"].ends_with(&format!("/{ACCOUNT}/{queue}")),
        "{}",
        env["TIDEMARK__SOURCE__QUEUE_URL"]
    );
    let resources = &deployed.report["resources"];
    assert!(resources["LeaseTable"].is_null() && resources["Stream"].is_null());

    let grants = task_role_grants(&deployed.report);
    let delete = grant_of(&grants, "dynamodb:DeleteTable");
    assert_eq!(
        delete.condition["StringEquals"]["aws:ResourceTag/tidemark:prefix"], name,
        "{delete:#?}"
    );
    grant_of(&grants, "dynamodb:ExportTableToPointInTime");
    grant_of(&grants, "dynamodb:DescribeExport");
    for s3 in ["s3:PutObject", "s3:AbortMultipartUpload", "s3:PutObjectAcl"] {
        assert_eq!(
            grant_of(&grants, s3).resources,
            ["arn:aws:s3:::tidemark-exports/events/expired/*"]
        );
    }
    let decrypt = grant_of(&grants, "kms:Decrypt");
    assert_eq!(decrypt.resources, [key]);
    assert_eq!(
        strings(&decrypt.condition["StringEquals"]["kms:ViaService"]),
        [
            "kinesis.us-east-1.amazonaws.com",
            "sqs.us-east-1.amazonaws.com"
        ]
    );
    let data_key = grant_of(&grants, "kms:GenerateDataKey");
    assert_eq!(
        strings(&data_key.condition["StringEquals"]["kms:ViaService"]),
        ["sqs.us-east-1.amazonaws.com"]
    );
    assert_eq!(
        grant_of(&grants, "sqs:ReceiveMessage").resources,
        [format!("arn:aws:sqs:us-east-1:{ACCOUNT}:{queue}")]
    );
    let actions = all_actions(&grants);
    assert!(
        !actions.iter().any(|a| a.starts_with("kinesis:")),
        "Kinesis rights with an SQS source: {actions:?}"
    );
    let tables = grants
        .iter()
        .find(|g| g.sid == "LeaseAndCoordinatorTables")
        .expect("LeaseAndCoordinatorTables");
    assert_eq!(
        tables.resources.len(),
        1,
        "no lease table with SQS: {tables:#?}"
    );
    assert!(
        !grants.iter().any(|g| g.sid == "DeleteFinishedLeases"),
        "lease deletion with SQS"
    );
    drop(deployed);

    // OnExpiry delete: DeleteTable, and no export rights. ReadMode fan_out:
    // the stream consumer's rights, on the stream and its consumers only.
    let name = unique_name("deploy-del");
    let mut params = common.to_vec();
    params.extend([
        ("StreamName", "any-stream"),
        ("TablePrefix", name.as_str()),
        ("OnExpiry", "delete"),
        ("ReadMode", "fan_out"),
        // Dead letters in S3: the bucket and prefix passed on, the task
        // allowed to write under the prefix only.
        ("DeadLetterKind", "s3"),
        ("DeadLetterBucket", "tidemark-dl"),
        ("DeadLetterPrefix", "events/dl"),
        // Oversized events to S3: schema.oversize set, the task allowed
        // to write under their prefix only.
        ("OversizeBucket", "tidemark-big"),
        ("OversizePrefix", "events/big"),
    ]);
    let deployed = Deployed::create(&stack, &name, &params);
    let env = task_env(&deployed.report["task_definition"]);
    assert_eq!(env["TIDEMARK__SOURCE__READ_MODE"], "fan_out");
    assert_eq!(
        (
            env["TIDEMARK__DEAD_LETTERS__KIND"].as_str(),
            env["TIDEMARK__DEAD_LETTERS__BUCKET"].as_str(),
            env["TIDEMARK__DEAD_LETTERS__PREFIX"].as_str(),
        ),
        ("s3", "tidemark-dl", "events/dl")
    );
    assert!(!env.contains_key("TIDEMARK__DEAD_LETTERS__QUEUE_URL"));
    assert_eq!(
        (
            env["TIDEMARK__SCHEMA__OVERSIZE"].as_str(),
            env["TIDEMARK__SCHEMA__OVERSIZE_S3__BUCKET"].as_str(),
            env["TIDEMARK__SCHEMA__OVERSIZE_S3__PREFIX"].as_str(),
        ),
        ("s3", "tidemark-big", "events/big")
    );
    assert!(!env.contains_key("TIDEMARK__SCHEMA__OVERSIZE_S3__KMS_KEY_ID"));
    let grants = task_role_grants(&deployed.report);
    let puts: BTreeMap<&str, &[String]> = grants
        .iter()
        .filter(|g| g.actions.iter().any(|a| a == "s3:PutObject"))
        .map(|g| (g.sid.as_str(), g.resources.as_slice()))
        .collect();
    assert_eq!(
        puts,
        BTreeMap::from([
            (
                "WriteDeadLettersUnderThePrefix",
                &["arn:aws:s3:::tidemark-dl/events/dl/*".to_string()][..]
            ),
            (
                "WriteOversizedPayloadsUnderThePrefix",
                &["arn:aws:s3:::tidemark-big/events/big/*".to_string()][..]
            ),
        ])
    );
    let stream_arn = format!("arn:aws:kinesis:us-east-1:{ACCOUNT}:stream/any-stream");
    for on_stream in [
        "kinesis:RegisterStreamConsumer",
        "kinesis:DescribeStreamSummary",
    ] {
        assert_eq!(
            grant_of(&grants, on_stream).resources,
            [stream_arn.as_str()]
        );
    }
    for on_consumer in ["kinesis:SubscribeToShard", "kinesis:DescribeStreamConsumer"] {
        assert_eq!(
            grant_of(&grants, on_consumer).resources,
            [format!("{stream_arn}/consumer/*")]
        );
    }
    assert!(
        !all_actions(&grants).contains("kinesis:DeregisterStreamConsumer"),
        "only an operator deregisters"
    );
    grant_of(&grants, "dynamodb:DeleteTable");
    // Finished shard leases are deleted: on the lease table only.
    let deletes = grants
        .iter()
        .find(|g| g.sid == "DeleteFinishedLeases")
        .expect("DeleteFinishedLeases");
    assert_eq!(deletes.actions, ["dynamodb:DeleteItem"]);
    assert_eq!(
        deletes.resources,
        [format!(
            "arn:aws:dynamodb:us-east-1:{ACCOUNT}:table/{name}-leases"
        )]
    );
    let actions = all_actions(&grants);
    // The only S3 right is PutObject of the dead letters and the oversized
    // payloads (checked above).
    assert!(
        !actions.contains("dynamodb:ExportTableToPointInTime")
            && !actions
                .iter()
                .any(|a| a.starts_with("s3:") && a != "s3:PutObject"),
        "export rights without OnExpiry export: {actions:?}"
    );
    assert_eq!(puts.len(), 2, "PutObject for those two prefixes only");
}

#[test]
fn template_env_scan_reads_the_task_definitions_names() {
    let template = "\
Resources:
  TaskDefinition:
    Type: AWS::ECS::TaskDefinition
    Properties:
      ContainerDefinitions:
        - Environment:
            - Name: TIDEMARK__SOURCE__KIND
              Value: !Ref SourceKind
            - !If
              - IsKinesis
              - { Name: TIDEMARK__SOURCE__STREAM, Value: x }
              - !Ref AWS::NoValue
  Service:
    Properties:
      Environment:
        - { Name: TIDEMARK__NOT_THE_TASK, Value: y }
";
    let names: Vec<String> = template_env_names(template).into_iter().collect();
    assert_eq!(
        names,
        ["TIDEMARK__SOURCE__KIND", "TIDEMARK__SOURCE__STREAM"]
    );
    assert_eq!(
        var_of("telemetry.emf_namespace"),
        "TIDEMARK__TELEMETRY__EMF_NAMESPACE"
    );
}
