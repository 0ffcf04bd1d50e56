//! Running the real worker in-process for stack tests: an SDK config with
//! the local stack's endpoints, a config from TOML, and a [`Running`] worker
//! stopped through its shutdown future.

// Test helpers: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;

use aws_config::SdkConfig;
use aws_types::service_config::{LoadServiceConfig, ServiceConfigKey};
use tidemark_worker::config::Config;
use tidemark_worker::{Progress, Report, Worker, WorkerError};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::LocalStack;

/// The endpoint of each service, as `AWS_ENDPOINT_URL_<SERVICE>` would give.
#[derive(Debug)]
struct Endpoints {
    kinesis: String,
    dynamodb: String,
    sqs: String,
    s3: String,
}

impl LoadServiceConfig for Endpoints {
    fn load_config(&self, key: ServiceConfigKey<'_>) -> Option<String> {
        if key.env() != "AWS_ENDPOINT_URL" {
            return None;
        }
        match key.service_id() {
            "Kinesis" => Some(self.kinesis.clone()),
            "DynamoDB" => Some(self.dynamodb.clone()),
            "SQS" => Some(self.sqs.clone()),
            "S3" => Some(self.s3.clone()),
            _ => None,
        }
    }
}

/// The SDK config a worker gets: the stack's region and credentials, each
/// service's endpoint on the stack (without touching the process's
/// environment, which parallel tests share).
pub fn sdk(stack: &LocalStack) -> SdkConfig {
    stack
        .sdk
        .to_builder()
        .service_config(Endpoints {
            kinesis: stack.kinesis_url.clone(),
            dynamodb: stack.dynamodb_url.clone(),
            sqs: stack.sqs_url.clone(),
            s3: stack.s3_url(),
        })
        .build()
}

/// Writes `toml` to `dir/tidemark.toml` and loads it as `run` would, with
/// no `TIDEMARK__*` overrides.
pub fn config(dir: &Path, toml: &str) -> Config {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("tidemark.toml");
    std::fs::write(&path, toml).unwrap();
    Config::load(Some(&path), &BTreeMap::new()).unwrap()
}

/// A worker running in a task until [`Running::stop`].
#[derive(Debug)]
pub struct Running {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<Report, WorkerError>>,
    progress: Progress,
}

impl Running {
    /// Builds the worker for `config` and starts [`Worker::run`] with a
    /// shutdown future that completes at [`Running::stop`].
    pub async fn start(config: &Config, sdk: &SdkConfig) -> Running {
        let worker = Worker::build(config, sdk).await.unwrap();
        let progress = worker.progress();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(worker.run(async move {
            let _ = stopped.await;
        }));
        Running {
            stop,
            task,
            progress,
        }
    }

    /// Items the writer stored so far in this run.
    pub fn stored(&self) -> u64 {
        self.progress.writer().stored
    }

    /// Kills the worker: its task is aborted with no drain, as a crash
    /// would end it (nothing in flight is acknowledged).
    pub async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
    }

    /// Completes the shutdown future and returns the run's report once the
    /// worker has drained.
    pub async fn stop(self) -> Report {
        let _ = self.stop.send(());
        tokio::time::timeout(std::time::Duration::from_secs(60), self.task)
            .await
            .expect("the worker drains within 60 s of shutdown")
            .unwrap()
            .unwrap()
    }
}

/// Sends `count` events of `spec` to `target`, paced at about `per_sec`,
/// stamped now; returns them as the JSON the source carries (a manifest).
pub async fn produce(
    target: &tidemark_worker::tools::produce::Target,
    spec: &tidemark_worker::tools::produce::ProduceSpec,
    count: u64,
    per_sec: u64,
) -> Vec<Vec<u8>> {
    let start = std::time::Instant::now();
    let batch = target.batch_size() as u64;
    let mut sent = Vec::with_capacity(count as usize);
    let mut n = 0;
    while n < count {
        let end = (n + batch).min(count);
        let now = chrono::Utc::now();
        let events: Vec<_> = (n..end).map(|i| spec.event(i, now)).collect();
        target.send(&events).await.unwrap();
        sent.extend(events.iter().map(|e| serde_json::to_vec(e).unwrap()));
        n = end;
        // Pacing, not synchronisation: the run must be stopped mid-stream.
        let due = std::time::Duration::from_secs_f64(n as f64 / per_sec.max(1) as f64);
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            tokio::time::sleep(wait).await;
        }
    }
    sent
}

/// Items in `table` (a full count scan).
pub async fn item_count(ddb: &aws_sdk_dynamodb::Client, table: &str) -> u64 {
    let mut total = 0;
    let mut start = None;
    loop {
        let page = ddb
            .scan()
            .table_name(table)
            .select(aws_sdk_dynamodb::types::Select::Count)
            .set_exclusive_start_key(start)
            .send()
            .await
            .unwrap();
        total += page.count() as u64;
        start = page.last_evaluated_key().cloned();
        if start.is_none() {
            return total;
        }
    }
}

/// Messages in `queue`, visible plus in flight (approximate, as SQS counts).
pub async fn queue_depth(sqs: &aws_sdk_sqs::Client, queue: &str) -> u64 {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let attrs = sqs
        .get_queue_attributes()
        .queue_url(queue)
        .attribute_names(A::ApproximateNumberOfMessages)
        .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap_or_default();
    attrs.values().map(|v| v.parse::<u64>().unwrap()).sum()
}

/// A worker config for stack tests: `source` (a whole `[source]` section),
/// tables named after `name` (time_bucket keys, 4 shards, daily tables at
/// 1,000 WCU), file dead letters at `dead`, telemetry on `listen`.
pub fn test_toml(source: &str, name: &str, dead: &Path, listen: &str) -> String {
    format!(
        r#"
{source}
[schema]
table_prefix = "{name}"
period = "day"
ttl_attribute = "expires_at"
key = {{ strategy = "time_bucket", shards = 4, bucket = "hour" }}
tiers = {{ active = {{ read = 300, write = 1000 }}, prebuild = {{ read = 300, write = 1000 }} }}

[dead_letters]
kind = "file"
path = "{dead}"

[maintenance]
coordinator_table = "{name}-coordinator"

[telemetry]
listen = "{listen}"
log_format = "json"
"#,
        dead = dead.display()
    )
}

/// The `[source]` section of a Kinesis test worker reading stream `name`
/// (a 3 s failover and 1 s checkpoints keep hand-overs quick).
pub fn kinesis_source(name: &str) -> String {
    format!(
        r#"[source]
kind = "kinesis"
stream = "{name}"
lease_table = "{name}-leases"
worker_id = "e2e-worker"
failover_time = "3s"
checkpoint_interval = "1s"
"#
    )
}
