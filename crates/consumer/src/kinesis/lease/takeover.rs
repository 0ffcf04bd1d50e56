//! Which state a KCL application left its lease table in, and whether
//! Tidemark may take it over: read at start (one consistent Scan of the
//! lease table, plus the KCL 3.0-3.4 side tables when they exist), judged
//! by [`judge`] (pure), logged once, shown by `tidemark status`.
//!
//! | state | take over |
//! |---|---|
//! | KCL 2.x format (KCL 2.x, or Tidemark's own table) | yes |
//! | KCL 3.0-3.4 (`Migration3.0` = `CLIENT_VERSION_3X` in `<app>-CoordinatorState`) | yes; the side tables are only read |
//! | KCL 3.5 single table (`Migration3.0` = `CLIENT_VERSION_3X` in the lease table) | yes; every KCL item left as it is |
//! | rolled back to 2.x-compatible mode (`CLIENT_VERSION_2X`) | yes, with a warning when KCL items are left |
//! | migrating from KCL 2.x (`CLIENT_VERSION_UPGRADE_FROM_2X`, `CLIENT_VERSION_3X_WITH_ROLLBACK`) | no: the KCL's step to finish first |
//! | single-table migration in Phase 2 (`TableMigration3.5` = `TABLE_MIGRATION_STATUS_PENDING`) | no: the KCL's step |
//! | a KCL worker reported metrics within 2 × 30 s + `max_clock_skew` | no: stop every KCL worker |
//! | an unknown item or migration value, an unreadable lease | no |
//! | KCL 3.x signs but no migration state found | no: name the coordinator-state table |
//!
//! Sources (awslabs/amazon-kinesis-client 3.5.1): `MigrationState`,
//! `ClientVersion`, `TableMigrationState`, `CoordinatorStateDAO`,
//! `WorkerMetricStats`; the AWS guides "Migrate from KCL 2.x to KCL 3.x"
//! and "Single table format for KCL"; `tests/fixtures/kcl/DESIGN.md`.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;

use super::kcl::{
    Census, KclEntity, MIGRATION_KEY, OtherKind, Side, SideTableNames, SideTables,
    TABLE_MIGRATION_KEY,
};
use super::key::KeyFormat;
use super::table::{LeaseTable, other_format};
use crate::error::ConsumerError;
use crate::kinesis::config::KinesisConfig;
use tracing::{info, warn};

/// The state a KCL application left its lease table in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableState {
    /// Leases only, no KCL 3.x migration state: KCL 2.x, a KCL 3.5 fleet in
    /// Phase 1 of its migration, or Tidemark's own table.
    Kcl2xFormat,
    /// KCL 3.0-3.4: the migration state in `<app>-CoordinatorState`.
    Kcl3xSideTables,
    /// KCL 3.5 single table: the KCL's items in the lease table.
    Kcl35SingleTable,
    /// A KCL 2.x to 3.x migration rolled back to 2.x-compatible mode.
    RolledBackTo2x,
    /// A KCL 2.x to 3.x migration in progress.
    MigratingFrom2x,
    /// A KCL 2.x to 3.x migration after the switch to KCL 3.x algorithms.
    MigratingAfterSwitch,
    /// A KCL 3.5 single-table migration in Phase 2.
    TableMigrationPending,
    /// A KCL worker still reports its metrics.
    KclRunning,
    /// An item or a migration value this version does not know.
    UnknownFormat,
    /// A lease that does not parse.
    UnreadableLease,
    /// KCL 3.x signs, but no migration state where Tidemark looked.
    MigrationStateNotFound,
    /// The KCL's side tables could not be read.
    SideTablesDenied,
}

impl TableState {
    /// What the state is called in logs, errors and `status`.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Kcl2xFormat => "KCL 2.x format",
            Self::Kcl3xSideTables => {
                "KCL 3.0-3.4 (separate coordinator-state and worker-metrics tables)"
            }
            Self::Kcl35SingleTable => "KCL 3.5 single table",
            Self::RolledBackTo2x => "KCL 2.x to 3.x migration rolled back to 2.x-compatible mode",
            Self::MigratingFrom2x => "in the middle of a KCL 2.x to 3.x migration",
            Self::MigratingAfterSwitch => {
                "in the middle of a KCL 2.x to 3.x migration, after the switch to KCL 3.x algorithms"
            }
            Self::TableMigrationPending => "in Phase 2 of the KCL 3.5 single-table migration",
            Self::KclRunning => "still used by a running KCL worker",
            Self::UnknownFormat => "written by a KCL or tool this version does not know",
            Self::UnreadableLease => "holding an unreadable lease",
            Self::MigrationStateNotFound => "written by KCL 3.x, migration state not found",
            Self::SideTablesDenied => "written by KCL 3.x, side tables unreadable",
        }
    }

    /// A short name for JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Self::Kcl2xFormat => "kcl2x",
            Self::Kcl3xSideTables => "kcl3x_separate_tables",
            Self::Kcl35SingleTable => "kcl35_single_table",
            Self::RolledBackTo2x => "kcl_rolled_back_to_2x",
            Self::MigratingFrom2x | Self::MigratingAfterSwitch => "kcl_migrating_from_2x",
            Self::TableMigrationPending => "kcl35_table_migration_pending",
            Self::KclRunning => "kcl_running",
            Self::UnknownFormat => "unknown_format",
            Self::UnreadableLease => "unreadable_lease",
            Self::MigrationStateNotFound => "kcl3x_migration_state_not_found",
            Self::SideTablesDenied => "kcl3x_side_tables_denied",
        }
    }
}

impl fmt::Display for TableState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// The verdict on a lease table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgement {
    /// Its state.
    pub state: TableState,
    /// Why Tidemark will not take it over, with the step to take first;
    /// `None` when it will.
    pub refusal: Option<String>,
    /// Which KCL can read the table again after Tidemark ran on it.
    pub way_back: String,
    /// Said at start when taking over.
    pub warning: Option<String>,
}

/// The KCL's worker-metrics reporting period (`workerMetricsReporterFreqInMillis`).
const METRICS_PERIOD: Duration = Duration::from_secs(30);

/// Steps the KCL names (AWS "Migrate from KCL 2.x to KCL 3.x", "Complete
/// the migration"; KCL CHANGELOG 3.5.0); the same words as the fixtures'
/// `kcl_step` (`tests/fixtures/kcl/states.json`).
const STEP_UPGRADE_FROM_2X: &str = "Finish the KCL 2.x to 3.x migration first: keep the KCL 3.x workers running with CoordinatorConfig.clientVersionConfig = CLIENT_VERSION_CONFIG_COMPATIBLE_WITH_2X until the leader switches Migration3.0 to CLIENT_VERSION_3X_WITH_ROLLBACK, then redeploy them with CLIENT_VERSION_CONFIG_3X (AWS guide \"Migrate from KCL 2.x to KCL 3.x\", step \"Complete the migration\") so that Migration3.0 reads CLIENT_VERSION_3X; or roll the migration back with KclMigrationTool.py --mode rollback. Then stop every KCL worker and start Tidemark.";
const STEP_AFTER_SWITCH: &str = "Finish the KCL 2.x to 3.x migration first: redeploy the KCL workers with CoordinatorConfig.clientVersionConfig = CLIENT_VERSION_CONFIG_3X (AWS guide \"Migrate from KCL 2.x to KCL 3.x\", step \"Complete the migration\") and wait until Migration3.0 reads CLIENT_VERSION_3X; or roll back with KclMigrationTool.py --mode rollback. Then stop every KCL worker and start Tidemark.";
const STEP_TABLE_MIGRATION: &str = "Finish the KCL 3.5 single-table migration first: keep the KCL 3.5 workers running with CoordinatorConfig.migrateAllEntitiesToLeaseTable = true until TableMigration3.5 reaches TABLE_MIGRATION_STATUS_COMPLETE (bake time tableMigrationCompleteBakeTimeSeconds, 1 hour by default), or roll back to Phase 1 by redeploying with migrateAllEntitiesToLeaseTable = false and waiting for TABLE_MIGRATION_STATUS_DEPLOYED (KCL CHANGELOG 3.5.0, AWS guide \"Single table format for KCL\"). Then stop every KCL worker and start Tidemark.";
const STEP_UNKNOWN: &str = "Upgrade Tidemark, or return the application to a KCL version up to 3.5.1, before taking it over.";

/// What judging needs besides the tables.
#[derive(Debug, Clone, Copy)]
pub(crate) struct JudgeInput<'a> {
    /// The lease table's name.
    pub table: &'a str,
    /// The side tables' names (messages).
    pub names: &'a SideTableNames,
    /// Wall clock, epoch seconds.
    pub now_s: i64,
    /// The most two hosts' clocks may differ.
    pub max_clock_skew: Duration,
}

fn s_of<'a>(item: &'a HashMap<String, AttributeValue>, a: &str) -> Option<&'a str> {
    item.get(a).and_then(|v| v.as_s().ok()).map(String::as_str)
}

fn n_of(item: &HashMap<String, AttributeValue>, a: &str) -> Option<i64> {
    item.get(a)
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.split('.').next())
        .and_then(|n| n.parse().ok())
}

/// "written by W at T" of a migration item.
fn written_by(item: &HashMap<String, AttributeValue>) -> String {
    let by = s_of(item, "mb").unwrap_or("?");
    match n_of(item, "mts").and_then(chrono::DateTime::from_timestamp_millis) {
        Some(at) => format!("written by {by} at {}", at.format("%Y-%m-%dT%H:%M:%SZ")),
        None => format!("written by {by}"),
    }
}

/// Judges a lease table from its census and side tables (pure; the rules
/// of `tests/fixtures/kcl/DESIGN.md`, section 5, first match wins).
pub(crate) fn judge(census: &Census, side: &SideTables, input: JudgeInput<'_>) -> Judgement {
    let JudgeInput {
        table,
        names,
        now_s,
        max_clock_skew,
    } = input;
    let refuse = |state, why: String| Judgement {
        state,
        refusal: Some(why),
        way_back: "the KCL application as it is".into(),
        warning: None,
    };
    let coord_name = names.coordinator.as_deref().unwrap_or("-");
    let kcl_items = census.kcl_items();
    // 1, 2: items Tidemark does not know.
    for o in &census.others {
        match &o.kind {
            OtherKind::Unknown(why) => {
                return refuse(
                    TableState::UnknownFormat,
                    format!(
                        "item `{}` ({why}) is not a lease nor a KCL item this version of Tidemark knows: it was written by a newer KCL or another tool. {STEP_UNKNOWN}",
                        o.key
                    ),
                );
            }
            OtherKind::Unreadable(problem) => {
                return refuse(
                    TableState::UnreadableLease,
                    format!(
                        "lease `{}` cannot be read ({problem}); the KCL writes leaseCounter, checkpointSubSequenceNumber and ownerSwitchesSinceCheckpoint as numbers (N), checkpoint and leaseOwner as strings (S): fix or remove the item",
                        o.key
                    ),
                );
            }
            OtherKind::Kcl(_) => {}
        }
    }
    let any_kcl3 = census.kcl3_sign.is_some() || !kcl_items.is_empty();
    // Unreadable side tables: only a KCL 3.x table needs them.
    let denied = [
        (names.coordinator.as_deref(), side.coordinator.denied()),
        (names.metrics.as_deref(), side.metrics.denied()),
    ];
    for (name, permission) in denied {
        if let (Some(name), Some(permission)) = (name, permission)
            && any_kcl3
        {
            let sign = census
                .kcl3_sign
                .clone()
                .unwrap_or_else(|| "it holds KCL 3.x items".into());
            return refuse(
                TableState::SideTablesDenied,
                format!(
                    "the table was written by KCL 3.x ({sign}), but {name}, where KCL 3.0-3.4 keeps its migration state and worker metrics, cannot be read: grant {permission} (read only), or set source.kcl_coordinator_state_table / kcl_worker_metric_stats_table to \"none\" if the application has no such table"
                ),
            );
        }
    }
    // 3: a KCL worker still reporting.
    let recent = (2 * METRICS_PERIOD + max_clock_skew).as_secs() as i64;
    let side_metrics: &[HashMap<String, AttributeValue>] = match &side.metrics {
        Side::Found(items) => items,
        _ => &[],
    };
    let metrics = census
        .others
        .iter()
        .filter(|o| o.kind == OtherKind::Kcl(KclEntity::WorkerMetricStats))
        .map(|o| (o.key.clone(), &o.item))
        .chain(
            side_metrics
                .iter()
                .map(|i| (s_of(i, "wid").unwrap_or("?").to_string(), i)),
        );
    for (worker, item) in metrics {
        if let Some(lut) = n_of(item, "lut")
            && now_s - lut < recent
        {
            return refuse(
                TableState::KclRunning,
                format!(
                    "KCL worker {worker} reported its metrics {} s ago: stop every KCL worker before starting Tidemark (docs/operations.md, \"Move from a KCL application\"); the KCL would take its leases back",
                    (now_s - lut).max(0)
                ),
            );
        }
    }
    // 4-7: the migration states.
    let in_lease = census
        .others
        .iter()
        .find(|o| o.key == MIGRATION_KEY)
        .map(|o| &o.item);
    let coord = match &side.coordinator {
        Side::Found(c) => Some(c),
        _ => None,
    };
    let in_coord = coord.and_then(|c| c.migration.as_ref());
    let migration = in_lease.or(in_coord);
    let cv = migration.and_then(|m| s_of(m, "cv"));
    if let (Some(a), Some(b)) = (in_lease, in_coord)
        && s_of(a, "cv") != s_of(b, "cv")
    {
        return refuse(
            TableState::UnknownFormat,
            format!(
                "Migration3.0 reads {} in the lease table but {} in {coord_name}: the KCL left its migration state split. {STEP_UNKNOWN}",
                s_of(a, "cv").unwrap_or("?"),
                s_of(b, "cv").unwrap_or("?")
            ),
        );
    }
    let evidence = |v: &str| {
        let place = if in_lease.is_some() {
            "in the lease table".to_string()
        } else {
            format!("in {coord_name}")
        };
        format!(
            "Migration3.0 = {v} {place}, {}",
            migration.map(written_by).unwrap_or_default()
        )
    };
    match cv {
        Some("CLIENT_VERSION_UPGRADE_FROM_2X") => {
            return refuse(
                TableState::MigratingFrom2x,
                format!(
                    "{}: KCL 2.x and 3.x workers may both still be deployed. {STEP_UPGRADE_FROM_2X}",
                    evidence("CLIENT_VERSION_UPGRADE_FROM_2X")
                ),
            );
        }
        Some("CLIENT_VERSION_3X_WITH_ROLLBACK") => {
            return refuse(
                TableState::MigratingAfterSwitch,
                format!(
                    "{}: the migration can still be rolled back. {STEP_AFTER_SWITCH}",
                    evidence("CLIENT_VERSION_3X_WITH_ROLLBACK")
                ),
            );
        }
        Some("CLIENT_VERSION_2X" | "CLIENT_VERSION_3X") | None => {}
        Some(other) => {
            return refuse(
                TableState::UnknownFormat,
                format!(
                    "{}, a client version this version of Tidemark does not know. {STEP_UNKNOWN}",
                    evidence(other)
                ),
            );
        }
    }
    let tm_coord = coord
        .and_then(|c| c.table_migration.as_ref())
        .map(|i| (i, format!("in {coord_name}")));
    let tm_lease = census
        .others
        .iter()
        .find(|o| o.key == TABLE_MIGRATION_KEY)
        .map(|o| (&o.item, "in the lease table".to_string()));
    if let Some((item, place)) = tm_coord.or(tm_lease) {
        match s_of(item, "tm") {
            Some("TABLE_MIGRATION_STATUS_PENDING") => {
                return refuse(
                    TableState::TableMigrationPending,
                    format!(
                        "TableMigration3.5 = TABLE_MIGRATION_STATUS_PENDING {place}, {}: the KCL's metadata is being moved between two tables by its leader. {STEP_TABLE_MIGRATION}",
                        written_by(item)
                    ),
                );
            }
            Some(
                "TABLE_MIGRATION_STATUS_INIT"
                | "TABLE_MIGRATION_STATUS_DEPLOYED"
                | "TABLE_MIGRATION_STATUS_COMPLETE",
            ) => {}
            other => {
                return refuse(
                    TableState::UnknownFormat,
                    format!(
                        "TableMigration3.5 = {} {place}, a table-migration state this version of Tidemark does not know. {STEP_UNKNOWN}",
                        other.unwrap_or("(none)")
                    ),
                );
            }
        }
    }
    let multi = census
        .leases
        .iter()
        .any(|l| KeyFormat::of(&l.key) == KeyFormat::MultiStream);
    let accept = |state, way_back: String, warning| Judgement {
        state,
        refusal: None,
        way_back,
        warning,
    };
    match cv {
        Some("CLIENT_VERSION_2X") => {
            if kcl_items.is_empty() {
                accept(TableState::RolledBackTo2x, "KCL 2.x or 3.x".into(), None)
            } else {
                accept(
                    TableState::RolledBackTo2x,
                    "KCL 3.5.0 or later in 2.x-compatible mode".into(),
                    Some(format!(
                        "lease table {table} was rolled back to KCL 2.x-compatible mode but still holds KCL 3.x items ({}): KCL 2.x binaries cannot list such a table any more; the way back is KCL 3.5.0 or later in 2.x-compatible mode",
                        items_text(&kcl_items)
                    )),
                )
            }
        }
        Some(_) if in_lease.is_some() || coord.is_none() => accept(
            TableState::Kcl35SingleTable,
            if multi {
                "KCL 3.5.1 or later (3.5.0's multi-stream mode cannot read a table holding KCL items)".into()
            } else {
                "KCL 3.5.0 or later".into()
            },
            None,
        ),
        Some(_) => accept(
            TableState::Kcl3xSideTables,
            format!("KCL 3.x, with {coord_name} and its worker-metrics table as they are"),
            None,
        ),
        None if any_kcl3 && names.coordinator.is_some() => {
            let sign = census
                .kcl3_sign
                .clone()
                .unwrap_or_else(|| format!("it holds {}", items_text(&kcl_items)));
            let looked = match &side.coordinator {
                Side::Found(_) => format!("nor in {coord_name}"),
                Side::NotKcl(why) => format!("and {coord_name} is not a KCL table ({why})"),
                _ => format!("and there is no table {coord_name}"),
            };
            refuse(
                TableState::MigrationStateNotFound,
                format!(
                    "the table was written by KCL 3.x ({sign}) but no KCL migration state was found (no Migration3.0 in it, {looked}). Set source.kcl_coordinator_state_table to the KCL application's coordinator-state table (CoordinatorConfig.coordinatorStateTableConfig), or to \"none\" if it has none"
                ),
            )
        }
        None => accept(TableState::Kcl2xFormat, "KCL 2.x or 3.x".into(), None),
    }
}

/// "LEADER 1, WORKER_METRIC_STATS 2".
pub fn items_text(items: &BTreeMap<KclEntity, usize>) -> String {
    items
        .iter()
        .map(|(e, n)| format!("{e} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What start-up (and `tidemark status`) read of a lease table, and the
/// verdict.
#[derive(Debug, Clone)]
pub struct Inspection {
    /// Every item of the lease table, classified.
    pub census: Census,
    /// The side tables looked for.
    pub names: SideTableNames,
    /// What they hold.
    pub side: SideTables,
    /// The verdict.
    pub judgement: Judgement,
}

/// Reads the lease table (one consistent Scan) and the KCL side tables
/// named in `names` (never writing any), and judges them.
pub async fn inspect(
    table: &LeaseTable,
    names: &SideTableNames,
    max_clock_skew: Duration,
) -> Result<Inspection, ConsumerError> {
    let census = table.census(true).await?;
    let side = table.kcl_side_tables(names).await?;
    let judgement = judge(
        &census,
        &side,
        JudgeInput {
            table: table.name(),
            names,
            now_s: chrono::Utc::now().timestamp(),
            max_clock_skew,
        },
    );
    Ok(Inspection {
        census,
        names: names.clone(),
        side,
        judgement,
    })
}

/// Start-up: refuses a table Tidemark must not take over (a KCL migration
/// in progress, a live KCL fleet, unknown items), or one holding leases of
/// the other key format than `expected`; else logs the table's state once.
pub(crate) async fn check(
    table: &LeaseTable,
    expected: KeyFormat,
    config: &KinesisConfig,
) -> Result<(), ConsumerError> {
    let found = inspect(table, &config.kcl_side_table_names(), config.max_clock_skew).await?;
    let j = &found.judgement;
    if let Some(problem) = &j.refusal {
        return Err(ConsumerError::KclState {
            table: table.name().to_string(),
            state: j.state.describe().to_string(),
            problem: problem.clone(),
        });
    }
    other_format(table.name(), &found.census.leases, expected)?;
    for (what, side) in [
        (&found.names.coordinator, found.side.coordinator.not_kcl()),
        (&found.names.metrics, found.side.metrics.not_kcl()),
    ] {
        if let (Some(name), Some(why)) = (what, side) {
            warn!(table = %name, %why, "not a KCL side table; ignored");
        }
    }
    if let Some(w) = &j.warning {
        warn!("{w}");
    }
    let items = found.census.kcl_items();
    if found.census.leases.is_empty() && items.is_empty() {
        return Ok(());
    }
    info!(
        table = %table.name(),
        state = %j.state,
        leases = found.census.leases.len(),
        kcl_items = %items_text(&items),
        way_back = %j.way_back,
        "lease table: {}; {} leases, {} KCL items left as they are",
        j.state,
        found.census.leases.len(),
        items.values().sum::<usize>()
    );
    Ok(())
}
