//! The stream's settings ([`StreamSettings`]): DescribeStreamSummary, and
//! for on-demand streams the account's On-demand mode
//! (DescribeAccountSettings), read at start and by `tidemark status`.
//!
//! - **Record size**: `MaxRecordSizeInKiB` (1 MiB by default, up to 10 MiB
//!   with `UpdateMaxRecordSize`).
//! - **Capacity mode** and, on on-demand streams, the **record
//!   distribution strategy**: with `AUTO` Kinesis places records on
//!   shards itself, ignoring the partition key (which may be absent), so
//!   records of one key can land on several shards and per-key order is
//!   not kept; per-shard order still is (docs/architecture.md).
//! - **Enhanced fan-out consumers**: `ConsumerCount`, and the limit per
//!   stream: 50 for an on-demand stream in an account in On-demand
//!   Advantage mode (the `MinimumThroughputBillingCommitment` of
//!   DescribeAccountSettings enabled), 20 otherwise (RegisterStreamConsumer).
//! - **Warm throughput** (On-demand Advantage), target and current MiB/s.
//!
//! kinesis-local returns `MaxRecordSizeInKiB` only for a stream whose
//! size was updated (`UpdateMaxRecordSize`), and none of
//! `RecordDistributionStrategy` and `WarmThroughput`, and no account
//! settings: absent fields are shown as unknown, never guessed, except the
//! record size, whose default Kinesis documents (1 MiB): it is shown as
//! that default, marked as such ([`MaxRecordSize`]).

use aws_sdk_kinesis::types::{
    MinimumThroughputBillingCommitmentOutputStatus as Commitment, RecordDistributionStrategy,
    StreamMode,
};
use serde::Serialize;

use crate::error::{AwsError, ConsumerError, ErrorClass};

/// Enhanced fan-out consumers per stream, On-demand Advantage.
pub const FAN_OUT_LIMIT_ADVANTAGE: u32 = 50;
/// Enhanced fan-out consumers per stream, provisioned and On-demand
/// Standard.
pub const FAN_OUT_LIMIT_STANDARD: u32 = 20;

/// A stream's settings as Kinesis describes them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamSettings {
    /// Stream name.
    pub stream: String,
    /// Stream ARN.
    pub arn: String,
    /// `ACTIVE`, `UPDATING`, ...
    pub status: String,
    /// `ON_DEMAND` or `PROVISIONED` (absent: not reported).
    pub capacity_mode: Option<String>,
    /// `AUTO` or `USER_PARTITION_KEY`; reported for on-demand streams only.
    pub record_distribution: Option<String>,
    /// Largest record the stream accepts, KiB (1024 by default, up to
    /// 10240), as reported (absent: not reported).
    pub max_record_size_kib: Option<i32>,
    /// The limit in force: the reported one, else the documented default.
    pub max_record_size: MaxRecordSize,
    /// Open shards.
    pub open_shards: i32,
    /// Retention, hours.
    pub retention_hours: i32,
    /// Registered enhanced fan-out consumers.
    pub consumer_count: Option<i32>,
    /// Warm throughput (On-demand Advantage), MiB/s.
    pub warm_throughput: Option<WarmThroughput>,
    /// The account's On-demand mode, when it matters (on-demand streams).
    pub account_mode: AccountMode,
    /// Enhanced fan-out consumers this stream may have.
    pub fan_out_limit: u32,
}

/// The largest record a stream takes, partition key and data together:
/// `MaxRecordSizeInKiB`, or the 1 MiB default when the stream does not
/// report it (kinesis-local before an update, older regions' answers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MaxRecordSize {
    /// KiB.
    pub kib: i32,
    /// False: the stream did not report the setting; this is the default.
    pub reported: bool,
}

impl MaxRecordSize {
    /// Kinesis's default, KiB (1 MiB).
    pub const DEFAULT_KIB: i32 = 1024;
    /// The most `UpdateMaxRecordSize` allows, KiB (10 MiB).
    pub const MOST_KIB: i32 = 10_240;

    /// From DescribeStreamSummary's `MaxRecordSizeInKiB`, if any.
    pub fn of(reported: Option<i32>) -> Self {
        match reported {
            Some(kib) if kib > 0 => Self {
                kib,
                reported: true,
            },
            _ => Self {
                kib: Self::DEFAULT_KIB,
                reported: false,
            },
        }
    }

    /// In bytes.
    pub fn bytes(self) -> usize {
        usize::try_from(self.kib).unwrap_or(0) * 1024
    }

    /// "1024 KiB", or "1024 KiB (default)" when the stream did not say.
    pub fn describe(self) -> String {
        if self.reported {
            format!("{} KiB", self.kib)
        } else {
            format!("{} KiB (default)", self.kib)
        }
    }
}

/// A stream's warm throughput.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WarmThroughput {
    /// Asked for, MiB/s.
    pub target_mibps: Option<i32>,
    /// Reached, MiB/s.
    pub current_mibps: Option<i32>,
}

/// The account's On-demand mode, and how it was learnt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "mode", content = "source", rename_all = "snake_case")]
pub enum AccountMode {
    /// Not asked: a provisioned stream has 20 consumers in any mode.
    NotApplicable,
    /// On-demand Advantage: DescribeAccountSettings says
    /// `MinimumThroughputBillingCommitment` is enabled (the text says so),
    /// or, unreadable, the stream has a warm throughput (only Advantage
    /// streams do).
    Advantage(String),
    /// On-demand Standard: the commitment is disabled.
    Standard(String),
    /// Unknown (the reason): the lower limit applies.
    Unknown(String),
}

impl AccountMode {
    /// "On-demand Advantage (DescribeAccountSettings: ...)".
    pub fn describe(&self) -> String {
        match self {
            Self::NotApplicable => "not applicable (provisioned)".into(),
            Self::Advantage(why) => format!("On-demand Advantage ({why})"),
            Self::Standard(why) => format!("On-demand Standard ({why})"),
            Self::Unknown(why) => format!("unknown ({why})"),
        }
    }
}

impl StreamSettings {
    /// True on a stream whose records Kinesis places itself (`AUTO`).
    pub fn auto_distribution(&self) -> bool {
        self.record_distribution.as_deref() == Some("AUTO")
    }

    /// Whether another enhanced fan-out consumer can be registered; the
    /// refusal names the count, the limit, why that limit and the ways out.
    pub fn check_room_for_a_consumer(&self) -> Result<(), String> {
        match self.consumer_count {
            Some(n) if n >= 0 && n as u32 >= self.fan_out_limit => Err(format!(
                "stream {} already has {n} enhanced fan-out consumers, the most it may have ({} for {} streams{}); deregister one (`tidemark consumer deregister`, or aws kinesis deregister-stream-consumer), reuse a registered one with source.consumer_name, or read with read_mode = \"polling\"",
                self.stream,
                self.fan_out_limit,
                if self.fan_out_limit == FAN_OUT_LIMIT_ADVANTAGE {
                    "On-demand Advantage"
                } else {
                    "provisioned and On-demand Standard"
                },
                match &self.account_mode {
                    AccountMode::NotApplicable => String::new(),
                    mode => format!("; account mode {}", mode.describe()),
                }
            )),
            _ => Ok(()),
        }
    }
}

fn limit_for(on_demand: bool, mode: &AccountMode) -> u32 {
    match mode {
        AccountMode::Advantage(_) if on_demand => FAN_OUT_LIMIT_ADVANTAGE,
        _ => FAN_OUT_LIMIT_STANDARD,
    }
}

/// The account's On-demand mode (DescribeAccountSettings), else the
/// warm-throughput hint.
async fn account_mode(kinesis: &aws_sdk_kinesis::Client, warm: bool) -> AccountMode {
    match kinesis.describe_account_settings().send().await {
        Ok(out) => match out
            .minimum_throughput_billing_commitment()
            .map(|c| c.status())
        {
            Some(Commitment::Enabled) => AccountMode::Advantage(
                "DescribeAccountSettings: MinimumThroughputBillingCommitment ENABLED".into(),
            ),
            Some(Commitment::EnabledUntilEarliestAllowedEnd) => AccountMode::Advantage(
                "DescribeAccountSettings: MinimumThroughputBillingCommitment ENABLED_UNTIL_EARLIEST_ALLOWED_END".into(),
            ),
            Some(Commitment::Disabled) => AccountMode::Standard(
                "DescribeAccountSettings: MinimumThroughputBillingCommitment DISABLED".into(),
            ),
            Some(other) => AccountMode::Unknown(format!(
                "DescribeAccountSettings: MinimumThroughputBillingCommitment {}",
                other.as_str()
            )),
            None if warm => AccountMode::Advantage(
                "the stream has a warm throughput; DescribeAccountSettings reported no commitment"
                    .into(),
            ),
            None => AccountMode::Standard(
                "DescribeAccountSettings reported no MinimumThroughputBillingCommitment".into(),
            ),
        },
        Err(e) => {
            let err = AwsError::new("DescribeAccountSettings", &e);
            if warm {
                AccountMode::Advantage(format!(
                    "the stream has a warm throughput; DescribeAccountSettings failed: {}",
                    err.message
                ))
            } else {
                AccountMode::Unknown(format!("DescribeAccountSettings failed: {}", err.message))
            }
        }
    }
}

/// Reads `stream`'s settings (a name or an ARN): one DescribeStreamSummary,
/// and for an on-demand stream one DescribeAccountSettings.
pub async fn stream_settings(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
) -> Result<StreamSettings, ConsumerError> {
    let mut req = kinesis.describe_stream_summary();
    req = if stream.starts_with("arn:") {
        req.stream_arn(stream)
    } else {
        req.stream_name(stream)
    };
    let out = req
        .send()
        .await
        .map_err(|e| AwsError::new("DescribeStreamSummary", &e))?;
    let Some(s) = out.stream_description_summary() else {
        return Err(AwsError {
            op: "DescribeStreamSummary",
            class: ErrorClass::Fatal,
            message: format!("no summary returned for {stream}"),
        }
        .into());
    };
    let mode = s.stream_mode_details().map(|m| m.stream_mode());
    let on_demand = mode == Some(&StreamMode::OnDemand);
    let warm = s.warm_throughput().map(|w| WarmThroughput {
        target_mibps: w.target_mibps(),
        current_mibps: w.current_mibps(),
    });
    let account_mode = if on_demand {
        account_mode(kinesis, warm.is_some()).await
    } else {
        AccountMode::NotApplicable
    };
    Ok(StreamSettings {
        stream: s.stream_name().to_string(),
        arn: s.stream_arn().to_string(),
        status: s.stream_status().as_str().to_string(),
        capacity_mode: mode.map(|m| m.as_str().to_string()),
        record_distribution: s.record_distribution_strategy().map(|d| match d {
            RecordDistributionStrategy::Auto => "AUTO".to_string(),
            other => other.as_str().to_string(),
        }),
        max_record_size_kib: s.max_record_size_in_kib(),
        max_record_size: MaxRecordSize::of(s.max_record_size_in_kib()),
        open_shards: s.open_shard_count(),
        retention_hours: s.retention_period_hours(),
        consumer_count: s.consumer_count(),
        warm_throughput: warm,
        fan_out_limit: limit_for(on_demand, &account_mode),
        account_mode,
    })
}

#[cfg(test)]
mod tests {
    //! kinesis-local returns none of the new fields (record size before an
    //! update, record distribution, warm throughput) and no account
    //! settings, so these tests read canned SDK answers.

    use super::*;
    use aws_sdk_kinesis::Client;
    use aws_sdk_kinesis::operation::describe_account_settings::DescribeAccountSettingsOutput;
    use aws_sdk_kinesis::operation::describe_stream_summary::DescribeStreamSummaryOutput;
    use aws_sdk_kinesis::types::{
        MinimumThroughputBillingCommitmentOutput, StreamDescriptionSummary, StreamModeDetails,
        StreamStatus, WarmThroughputObject,
    };
    use aws_smithy_mocks::{RuleMode, mock, mock_client};

    fn summary(
        mode: StreamMode,
        auto: bool,
        consumers: i32,
        warm: bool,
    ) -> DescribeStreamSummaryOutput {
        let mut s = StreamDescriptionSummary::builder()
            .stream_name("clicks")
            .stream_arn("arn:aws:kinesis:us-east-1:123456789012:stream/clicks")
            .stream_status(StreamStatus::Active)
            .stream_mode_details(
                StreamModeDetails::builder()
                    .stream_mode(mode)
                    .build()
                    .unwrap(),
            )
            .retention_period_hours(24)
            .stream_creation_timestamp(aws_smithy_types::DateTime::from_secs(1_764_000_000))
            .set_enhanced_monitoring(Some(vec![]))
            .open_shard_count(4)
            .consumer_count(consumers)
            .max_record_size_in_kib(10_240);
        if auto {
            s = s.record_distribution_strategy(RecordDistributionStrategy::Auto);
        }
        if warm {
            s = s.warm_throughput(
                WarmThroughputObject::builder()
                    .target_mibps(100)
                    .current_mibps(40)
                    .build(),
            );
        }
        DescribeStreamSummaryOutput::builder()
            .stream_description_summary(s.build().unwrap())
            .build()
    }

    fn account(status: Option<Commitment>) -> DescribeAccountSettingsOutput {
        let mut out = DescribeAccountSettingsOutput::builder();
        if let Some(status) = status {
            out = out.minimum_throughput_billing_commitment(
                MinimumThroughputBillingCommitmentOutput::builder()
                    .status(status)
                    .build()
                    .unwrap(),
            );
        }
        out.build()
    }

    async fn read(
        mode: StreamMode,
        auto: bool,
        consumers: i32,
        warm: bool,
        status: Option<Commitment>,
    ) -> (StreamSettings, usize) {
        let describe = mock!(Client::describe_stream_summary)
            .then_output(move || summary(mode.clone(), auto, consumers, warm));
        let settings =
            mock!(Client::describe_account_settings).then_output(move || account(status.clone()));
        let client = mock_client!(aws_sdk_kinesis, RuleMode::MatchAny, [&describe, &settings]);
        let s = stream_settings(&client, "clicks").await.unwrap();
        (s, settings.num_calls())
    }

    #[tokio::test]
    async fn every_setting_is_read() {
        let (s, _) = read(
            StreamMode::OnDemand,
            true,
            3,
            true,
            Some(Commitment::Enabled),
        )
        .await;
        assert_eq!(s.capacity_mode.as_deref(), Some("ON_DEMAND"));
        assert_eq!(s.record_distribution.as_deref(), Some("AUTO"));
        assert!(s.auto_distribution());
        assert_eq!(s.max_record_size_kib, Some(10_240));
        assert_eq!(
            s.max_record_size,
            MaxRecordSize {
                kib: 10_240,
                reported: true
            }
        );
        assert_eq!(s.consumer_count, Some(3));
        assert_eq!(
            s.warm_throughput,
            Some(WarmThroughput {
                target_mibps: Some(100),
                current_mibps: Some(40)
            })
        );
        assert_eq!((s.open_shards, s.retention_hours), (4, 24));
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["account_mode"]["mode"], "advantage");
        assert_eq!(json["fan_out_limit"], 50);
    }

    /// 50 consumers only for an on-demand stream in an On-demand Advantage
    /// account; 20 for provisioned streams (the account is not asked) and
    /// On-demand Standard.
    #[tokio::test]
    async fn the_fan_out_limit_follows_the_account_mode() {
        for (mode, warm, status, limit, asked) in [
            (
                StreamMode::OnDemand,
                false,
                Some(Commitment::Enabled),
                50,
                1,
            ),
            (
                StreamMode::OnDemand,
                false,
                Some(Commitment::EnabledUntilEarliestAllowedEnd),
                50,
                1,
            ),
            (
                StreamMode::OnDemand,
                false,
                Some(Commitment::Disabled),
                20,
                1,
            ),
            (StreamMode::OnDemand, false, None, 20, 1),
            // No commitment reported but a warm throughput: Advantage.
            (StreamMode::OnDemand, true, None, 50, 1),
            (
                StreamMode::Provisioned,
                true,
                Some(Commitment::Enabled),
                20,
                0,
            ),
        ] {
            let (s, calls) = read(mode.clone(), false, 0, warm, status.clone()).await;
            assert_eq!(s.fan_out_limit, limit, "{mode:?} {status:?} warm {warm}");
            assert_eq!(calls, asked, "{mode:?}");
        }
    }

    #[tokio::test]
    async fn an_unreadable_account_mode_falls_back_on_the_warm_throughput_then_20() {
        let denied = r#"{"__type":"AccessDeniedException","message":"not authorized to perform: kinesis:DescribeAccountSettings"}"#;
        for (warm, limit, needle) in [(true, 50, "warm throughput"), (false, 20, "AccessDenied")] {
            let describe = mock!(Client::describe_stream_summary)
                .then_output(move || summary(StreamMode::OnDemand, false, 0, warm));
            let settings = mock!(Client::describe_account_settings)
                .sequence()
                .http_status(400, Some(denied.to_string()))
                .build();
            let client = mock_client!(aws_sdk_kinesis, RuleMode::MatchAny, [&describe, &settings]);
            let s = stream_settings(&client, "clicks").await.unwrap();
            assert_eq!(s.fan_out_limit, limit);
            assert!(
                s.account_mode.describe().contains(needle),
                "{:?}",
                s.account_mode
            );
        }
    }

    #[tokio::test]
    async fn a_full_stream_refuses_another_consumer_naming_the_limit() {
        let (s, _) = read(StreamMode::Provisioned, false, 20, false, None).await;
        let e = s.check_room_for_a_consumer().unwrap_err();
        for needle in [
            "20 enhanced fan-out consumers",
            "provisioned",
            "deregister",
            "polling",
        ] {
            assert!(e.contains(needle), "{needle}: {e}");
        }
        let (s, _) = read(
            StreamMode::OnDemand,
            false,
            20,
            false,
            Some(Commitment::Enabled),
        )
        .await;
        assert_eq!(s.check_room_for_a_consumer(), Ok(()));
        let (s, _) = read(
            StreamMode::OnDemand,
            false,
            50,
            false,
            Some(Commitment::Enabled),
        )
        .await;
        assert!(
            s.check_room_for_a_consumer()
                .unwrap_err()
                .contains("On-demand Advantage")
        );
    }
}
