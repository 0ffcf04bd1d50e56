//! `tidemark config check --environment`: after the config, what `run`
//! needs from AWS, each reported ok or with its fix: the region and the
//! credentials, the stream or queue, the lease and coordinator tables, the
//! period tables, the dead-letter destination, and the read calls the
//! worker makes at start (a refused call names the IAM action). Nothing is
//! created or written.

use aws_sdk_dynamodb::error::SdkError;
use serde::Serialize;
use tidemark_schema::route::Oversize;

use crate::config::{Config, SourceConfig};
use crate::deadletter::DeadLetterConfig;

/// One check.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Check {
    /// What was checked.
    pub(crate) check: String,
    /// Whether it is ready for `run`.
    pub(crate) ok: bool,
    /// What was found.
    pub(crate) detail: String,
    /// What to do when not ok.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) fix: String,
    /// Why it failed, for the exit status.
    #[serde(skip)]
    pub(crate) failure: Option<Failure>,
}

/// Why a check failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The resource is missing or not ready.
    Missing,
    /// AWS refused the identity the call.
    Denied,
    /// No answer.
    Unavailable,
}

fn ok(check: impl Into<String>, detail: impl Into<String>) -> Check {
    Check {
        check: check.into(),
        ok: true,
        detail: detail.into(),
        fix: String::new(),
        failure: None,
    }
}

fn failed(
    check: impl Into<String>,
    failure: Failure,
    detail: impl Into<String>,
    fix: impl Into<String>,
) -> Check {
    Check {
        check: check.into(),
        ok: false,
        detail: detail.into(),
        fix: fix.into(),
        failure: Some(failure),
    }
}

/// A failed call as a check: denied (with the IAM action), unreachable, or
/// anything else.
fn call_failed<E, R>(what: &str, action: &str, e: &SdkError<E, R>) -> Check
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + 'static,
{
    let text = tidemark_aws_errors::describe(e);
    if tidemark_aws_errors::is_access_denied(tidemark_aws_errors::error_code(e)) {
        return failed(
            what,
            Failure::Denied,
            text,
            format!("the identity needs {action} (the IAM policy is in docs/operations.md)"),
        );
    }
    if matches!(e, SdkError::DispatchFailure(_) | SdkError::TimeoutError(_)) {
        return failed(
            what,
            Failure::Unavailable,
            text,
            "check the endpoint and the network",
        );
    }
    failed(what, Failure::Missing, text, String::new())
}

/// A table's check: exists (ok), missing (ok when `run` creates it), or
/// the call failed.
async fn table(
    dynamodb: &aws_sdk_dynamodb::Client,
    what: &str,
    name: &str,
    created_by_run: bool,
    key: &str,
) -> Check {
    match dynamodb.describe_table().table_name(name).send().await {
        Ok(out) => {
            let status = out
                .table()
                .and_then(|t| t.table_status())
                .map_or("unknown".to_string(), |s| s.as_str().to_string());
            if status == "ACTIVE" {
                ok(what, format!("{name} exists (ACTIVE)"))
            } else {
                failed(
                    what,
                    Failure::Missing,
                    format!("{name} is {status}"),
                    "wait until it is ACTIVE",
                )
            }
        }
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_not_found_exception()) =>
        {
            if created_by_run {
                ok(
                    what,
                    format!("{name} does not exist yet: `run` creates it (dynamodb:CreateTable)"),
                )
            } else {
                failed(
                    what,
                    Failure::Missing,
                    format!("{name} does not exist"),
                    format!("create it (`tidemark tables ensure`), or fix {key}"),
                )
            }
        }
        Err(e) => call_failed(what, "dynamodb:DescribeTable", &e),
    }
}

/// Every check after the SDK setup (region and credentials, checked by the
/// caller).
pub(crate) async fn checks(config: &Config, sdk: &aws_config::SdkConfig) -> Vec<Check> {
    let mut out = Vec::new();
    let dynamodb = aws_sdk_dynamodb::Client::new(sdk);
    match &config.source {
        SourceConfig::Kinesis(k) => {
            let kinesis = aws_sdk_kinesis::Client::new(sdk);
            let streams: Vec<String> = if k.is_multi_stream() {
                k.streams.iter().map(|s| s.stream.clone()).collect()
            } else {
                vec![k.stream.clone()]
            };
            for (i, stream) in streams.iter().enumerate() {
                let key = if k.is_multi_stream() {
                    format!("source.streams.{i}.stream")
                } else {
                    "source.stream".to_string()
                };
                let what = format!("stream {stream}");
                let mut call = kinesis.describe_stream_summary();
                call = if stream.starts_with("arn:") {
                    call.stream_arn(stream)
                } else {
                    call.stream_name(stream)
                };
                out.push(match call.send().await {
                    Ok(s) => match s.stream_description_summary() {
                        Some(d) => ok(
                            what,
                            format!(
                                "{}, {} open shards",
                                d.stream_status().as_str(),
                                d.open_shard_count()
                            ),
                        ),
                        None => ok(what, "exists"),
                    },
                    Err(e)
                        if e.as_service_error()
                            .is_some_and(|s| s.is_resource_not_found_exception()) =>
                    {
                        failed(
                            what,
                            Failure::Missing,
                            format!("no stream {stream} in this region"),
                            format!("create it, or fix {key} (and the region)"),
                        )
                    }
                    Err(e) => call_failed(&what, "kinesis:DescribeStreamSummary", &e),
                });
            }
            out.push(
                table(
                    &dynamodb,
                    &format!("lease table {}", k.lease_table),
                    &k.lease_table,
                    true,
                    "source.lease_table",
                )
                .await,
            );
        }
        SourceConfig::Sqs(q) => {
            let sqs = aws_sdk_sqs::Client::new(sdk);
            let what = "queue".to_string();
            out.push(
                match sqs
                    .get_queue_attributes()
                    .queue_url(&q.queue_url)
                    .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
                    .send()
                    .await
                {
                    Ok(a) => ok(
                        what,
                        format!(
                            "{} exists, about {} messages",
                            q.queue_url,
                            a.attributes()
                                .and_then(|m| m.get(&aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages))
                                .map_or("?", String::as_str)
                        ),
                    ),
                    Err(e) if tidemark_aws_errors::classify(&e) == tidemark_aws_errors::ErrorClass::NotFound => failed(
                        what,
                        Failure::Missing,
                        format!("no queue at {}", q.queue_url),
                        "create it, or fix source.queue_url",
                    ),
                    Err(e) => call_failed(&what, "sqs:GetQueueAttributes", &e),
                },
            );
        }
    }
    if config.maintenance.enabled {
        out.push(
            table(
                &dynamodb,
                &format!("coordinator table {}", config.maintenance.coordinator_table),
                &config.maintenance.coordinator_table,
                true,
                "maintenance.coordinator_table",
            )
            .await,
        );
    }
    // The period tables: which exist (`run` creates the current one).
    let prefix = format!("{}_", config.schema.table_prefix);
    let naming = tidemark_schema::period::TableNaming {
        prefix: config.schema.table_prefix.clone(),
        period: config.schema.period,
    };
    let mut names = Vec::new();
    let mut pages = dynamodb.list_tables().into_paginator().send();
    let mut listed = Ok(());
    while let Some(page) = pages.next().await {
        match page {
            Ok(p) => names.extend(
                p.table_names()
                    .iter()
                    .filter(|n| n.starts_with(&prefix) && naming.parse(n).is_some())
                    .cloned(),
            ),
            Err(e) => {
                listed = Err(e);
                break;
            }
        }
    }
    let current = naming.table_for(chrono::Utc::now().timestamp_millis());
    out.push(match listed {
        Ok(()) => ok(
            "period tables",
            format!(
                "{} of {prefix}*; the current one, {current}, {}",
                names.len(),
                if names.contains(&current) {
                    "exists"
                } else {
                    "does not exist yet: `run` creates it (dynamodb:CreateTable)"
                }
            ),
        ),
        Err(e) => call_failed("period tables", "dynamodb:ListTables", &e),
    });
    // Like an S3 dead-letter bucket: only a write would prove it.
    if let (Oversize::S3, Some(s3)) = (config.schema.oversize, &config.schema.oversize_s3) {
        out.push(ok(
            "oversized events",
            format!(
                "bucket s3://{}/{}/ (not checked: only a write would prove s3:PutObject)",
                s3.bucket, s3.prefix
            ),
        ));
    }
    out.push(match &config.dead_letters {
        DeadLetterConfig::Sqs { queue_url, .. } => {
            let sqs = aws_sdk_sqs::Client::new(sdk);
            match sqs
                .get_queue_attributes()
                .queue_url(queue_url)
                .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
                .send()
                .await
            {
                Ok(_) => ok("dead letters", format!("queue {queue_url} exists")),
                Err(e)
                    if tidemark_aws_errors::classify(&e)
                        == tidemark_aws_errors::ErrorClass::NotFound =>
                {
                    failed(
                        "dead letters",
                        Failure::Missing,
                        format!("no queue at {queue_url}"),
                        "create it, or fix dead_letters.queue_url",
                    )
                }
                Err(e) => call_failed("dead letters", "sqs:GetQueueAttributes", &e),
            }
        }
        DeadLetterConfig::Dynamodb { table: t, .. } => {
            table(&dynamodb, "dead letters", t, false, "dead_letters.table").await
        }
        // Only a write proves s3:PutObject under the prefix, and a check
        // writes nothing: said, not checked.
        DeadLetterConfig::S3 { bucket, prefix, .. } => ok(
            "dead letters",
            format!("bucket s3://{bucket}/{prefix}/ (not checked: only a write would prove s3:PutObject)"),
        ),
        DeadLetterConfig::File { path } => {
            let dir = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(std::path::Path::new("."));
            match std::fs::metadata(dir) {
                Ok(m) if m.is_dir() && !m.permissions().readonly() => ok(
                    "dead letters",
                    format!("file {} (its directory exists)", path.display()),
                ),
                _ => failed(
                    "dead letters",
                    Failure::Missing,
                    format!(
                        "the directory of {} is missing or read-only",
                        path.display()
                    ),
                    "create it, or fix dead_letters.path",
                ),
            }
        }
    });
    out
}

/// The exit status of a set of checks: 0 all ok, else the most telling.
pub(crate) fn exit_code(checks: &[Check]) -> u8 {
    let has = |f| checks.iter().any(|c| c.failure == Some(f));
    if has(Failure::Denied) {
        crate::cli::aws::EXIT_DENIED
    } else if has(Failure::Unavailable) {
        crate::cli::cmd::EXIT_UNAVAILABLE
    } else if has(Failure::Missing) {
        1
    } else {
        0
    }
}
