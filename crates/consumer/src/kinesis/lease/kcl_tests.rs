//! KCL 2.x to 3.5 lease tables, from the fixtures of `tests/fixtures/kcl`:
//! only leases are listed, whatever else the KCL keeps in the table, and a
//! lease in a KCL graceful hand-off is left to its hand-off.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::scan::ScanOutput;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_smithy_mocks::{RuleMode, mock, mock_client};
use tokio::time::Instant;

use super::balance::{BalanceInput, Observations, takes_and_steals};
use super::fixtures;
use super::item::Lease;
use super::key::KeyFormat;
use super::store::DynamoStore;
use super::table::{LeaseTable, refuse_other_format};
use super::timing::LeaseTiming;

type Item = HashMap<String, AttributeValue>;

/// A lease table whose Scan answers `items` (one page).
fn table_of(items: Vec<Item>) -> LeaseTable {
    let scan = mock!(Client::scan).then_output(move || {
        ScanOutput::builder()
            .set_items(Some(items.clone()))
            .count(1)
            .build()
    });
    let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&scan]);
    let store = DynamoStore::new(client, "kcl-app", Duration::from_secs(1));
    LeaseTable::with_store(Arc::new(store), LeaseTiming::default())
}

/// Every fixture's lease table lists exactly its leases: the KCL's leader
/// lock, worker metrics, migration states and stream items are never
/// shards (they would be taken, balanced, counted and garbage-collected).
#[tokio::test]
async fn every_kcl_table_lists_exactly_its_leases() {
    for f in fixtures::all() {
        let t = &f.tables["lease"];
        let listed = table_of(t.items.clone())
            .list()
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", f.name));
        let keys: BTreeSet<String> = listed.into_iter().map(|l| l.key).collect();
        let want: BTreeSet<String> = t.leases.iter().cloned().collect();
        assert_eq!(keys, want, "{}", f.name);
    }
}

/// A lease-shaped item with an attribute of the wrong type is left alone:
/// the other leases are still listed (one bad item never stops every
/// worker's balancing).
#[tokio::test]
async fn an_unreadable_lease_does_not_stop_the_listing() {
    let mut items = fixtures::get("kcl2x").tables["lease"].items.clone();
    items[0].insert("leaseCounter".into(), AttributeValue::S("many".into()));
    let bad = items[0]["leaseKey"].as_s().unwrap().clone();
    let listed = table_of(items).list().await.expect("the listing goes on");
    let keys: Vec<String> = listed.into_iter().map(|l| l.key).collect();
    assert_eq!(keys.len(), 3, "{keys:?}");
    assert!(!keys.contains(&bad));
}

/// A KCL 3.5 multi-stream table holds the leader lock, worker metrics and
/// migration items beside its `account:stream:epoch:shard` leases: it is a
/// multi-stream table, not one "with single-stream keys".
#[tokio::test]
async fn a_kcl_35_multi_stream_table_is_a_multi_stream_table() {
    let f = fixtures::get("kcl3x_single_table_multistream");
    let table = table_of(f.tables["lease"].items.clone());
    refuse_other_format(&table, KeyFormat::MultiStream)
        .await
        .expect("its leases are multi-stream leases");
    let single = fixtures::get("kcl3x_single_table");
    let table = table_of(single.tables["lease"].items.clone());
    refuse_other_format(&table, KeyFormat::SingleStream)
        .await
        .expect("its leases are single-stream leases");
    assert!(
        refuse_other_format(&table, KeyFormat::MultiStream)
            .await
            .is_err(),
        "a single-stream table in multi-stream mode is still refused"
    );
}

fn handoff_leases() -> (Vec<Lease>, String) {
    let f = fixtures::get("kcl3x_handoff");
    let t = &f.tables["lease"];
    let leases = t
        .items
        .iter()
        .filter(|i| t.leases.contains(i["leaseKey"].as_s().unwrap()))
        .map(|i| Lease::from_item(i).unwrap())
        .collect();
    (leases, t.in_handoff[0].clone())
}

/// A lease in a KCL graceful hand-off (`checkpointOwner` set) is still
/// renewed and checkpointed by its `checkpointOwner`: it is never stolen,
/// and it counts as that worker's load, not as the next owner's.
#[tokio::test(start_paused = true)]
async fn a_lease_in_hand_off_is_never_stolen_and_counts_for_its_checkpoint_owner() {
    let (leases, handoff) = handoff_leases();
    let mut obs = Observations::default();
    let now = Instant::now();
    obs.observe(&leases, now);
    let held = HashSet::new();
    // Whoever steals: the order of candidates differs per worker.
    for me in (0..40).map(|i| format!("tidemark-{i}")) {
        let plan = takes_and_steals(BalanceInput {
            me: &me,
            held: &held,
            leases: &leases,
            observations: &obs,
            now,
            failover: Duration::from_secs(10),
            max_leases: None,
            steal_at_target: true,
            patient: true,
        });
        assert!(plan.take.is_empty(), "{me}: every lease is live");
        assert!(
            !plan.steal.contains(&handoff),
            "{me} stole {handoff}, a lease in hand-off: {plan:?}"
        );
        // kcl3-worker-a: shard 0 and the hand-off; worker-b: shards 2, 3.
        assert_eq!(plan.target, 2, "{me}: 4 leases over 3 workers");
    }
}

/// Once nobody renews it (the old owner stopped), a lease in hand-off is
/// taken like any expired lease, after a failover time and not before.
#[tokio::test(start_paused = true)]
async fn a_lease_in_hand_off_is_taken_once_its_counter_stood_still() {
    let (leases, handoff) = handoff_leases();
    let fo = Duration::from_secs(10);
    let mut obs = Observations::default();
    let t0 = Instant::now();
    obs.observe(&leases, t0);
    let held = HashSet::new();
    let plan = |now| {
        takes_and_steals(BalanceInput {
            me: "tidemark-1",
            held: &held,
            leases: &leases,
            observations: &obs,
            now,
            failover: fo,
            max_leases: None,
            steal_at_target: true,
            patient: true,
        })
    };
    assert!(!plan(t0 + fo / 2).take.contains(&handoff));
    assert!(plan(t0 + fo).take.contains(&handoff));
}

// ---------- the table's state at start ----------

use super::kcl::{
    Census, Classified, CoordinatorItems, OtherKind, Side, SideTableNames, SideTables, classify,
};
use super::takeover::{JudgeInput, Judgement, TableState, judge};

/// The census of `items`, as the start-up Scan makes it.
fn census_of(items: &[Item]) -> Census {
    let mut c = Census::default();
    for i in items {
        match classify(i) {
            Classified::Lease(l, sign) => {
                if c.kcl3_sign.is_none() {
                    c.kcl3_sign = sign.map(|a| format!("lease `{}` carries {a}", l.key));
                }
                c.leases.push(l);
            }
            Classified::Other(o) => c.others.push(o),
        }
    }
    c
}

/// The side tables of a fixture, as found by the start-up reads.
fn side_of(f: &fixtures::Fixture) -> SideTables {
    let mut side = SideTables {
        coordinator: Side::Absent,
        metrics: Side::Absent,
    };
    if let Some(t) = f.tables.get("coordinator_state") {
        let find = |k: &str| {
            t.items
                .iter()
                .find(|i| i["key"].as_s().unwrap() == k)
                .cloned()
        };
        side.coordinator = Side::Found(CoordinatorItems {
            migration: find("Migration3.0"),
            table_migration: find("TableMigration3.5"),
        });
    }
    if let Some(t) = f.tables.get("worker_metric_stats") {
        side.metrics = Side::Found(t.items.clone());
    }
    side
}

fn names() -> SideTableNames {
    SideTableNames {
        coordinator: Some("kcl-app-CoordinatorState".into()),
        metrics: Some("kcl-app-WorkerMetricStats".into()),
    }
}

/// 2026-11-26: a day after the fixtures' worker metrics were written.
const NOW_S: i64 = 1_795_700_000;

fn judged(census: &Census, side: &SideTables, now_s: i64) -> Judgement {
    judge(
        census,
        side,
        JudgeInput {
            table: "kcl-app",
            names: &names(),
            now_s,
            max_clock_skew: Duration::from_secs(2),
        },
    )
}

fn state_of(name: &str) -> String {
    let states: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../tests/fixtures/kcl/states.json"),
        )
        .unwrap(),
    )
    .unwrap();
    states[name]["state"].as_str().unwrap().to_string()
}

/// Every fixture is judged as `states.json` says: its state, taken over or
/// refused, and a refusal names the evidence and the KCL's own step.
#[test]
fn every_fixture_table_state_is_named_and_judged() {
    for f in fixtures::all() {
        let census = census_of(&f.tables["lease"].items);
        let j = judged(&census, &side_of(&f), NOW_S);
        assert_eq!(j.state.name(), state_of(&f.name), "{}: {j:?}", f.name);
        match f.takeover.as_str() {
            "allow" => assert_eq!(j.refusal, None, "{}", f.name),
            _ => {
                let why = j
                    .refusal
                    .unwrap_or_else(|| panic!("{} not refused", f.name));
                let step = f.kcl_step.as_deref().unwrap();
                assert!(
                    why.contains(step),
                    "{}: the KCL's step missing: {why}",
                    f.name
                );
            }
        }
    }
}

#[test]
fn the_way_back_follows_what_the_table_holds() {
    let single = fixtures::get("kcl3x_single_table");
    let j = judged(
        &census_of(&single.tables["lease"].items),
        &side_of(&single),
        NOW_S,
    );
    assert_eq!(j.way_back, "KCL 3.5.0 or later");
    let multi = fixtures::get("kcl3x_single_table_multistream");
    let j = judged(
        &census_of(&multi.tables["lease"].items),
        &side_of(&multi),
        NOW_S,
    );
    assert!(j.way_back.starts_with("KCL 3.5.1 or later"), "{j:?}");
    let rolled = fixtures::get("kcl_rolled_back_2x");
    let j = judged(
        &census_of(&rolled.tables["lease"].items),
        &side_of(&rolled),
        NOW_S,
    );
    assert!(j.warning.unwrap().contains("KCL 2.x binaries cannot"));
    let two = fixtures::get("kcl2x");
    let j = judged(
        &census_of(&two.tables["lease"].items),
        &side_of(&two),
        NOW_S,
    );
    assert_eq!(
        (j.state, j.way_back.as_str()),
        (TableState::Kcl2xFormat, "KCL 2.x or 3.x")
    );
}

/// A KCL worker that reported its metrics within two reporting periods
/// (and the clock skew) is alive: refused, in either table.
#[test]
fn a_kcl_worker_reporting_metrics_is_refused() {
    let f = fixtures::get("kcl3x_single_table");
    let census = census_of(&f.tables["lease"].items);
    // The fixtures' metrics: worker a at 1795600000, worker b 20 s before.
    let j = judged(&census, &side_of(&f), 1_795_600_000 + 61);
    assert_eq!(j.state, TableState::KclRunning, "{j:?}");
    assert!(
        j.refusal
            .unwrap()
            .contains("kcl3-worker-a reported its metrics 61 s ago")
    );
    assert_eq!(
        judged(&census, &side_of(&f), 1_795_600_000 + 62).refusal,
        None
    );
    let sep = fixtures::get("kcl3x_separate_tables");
    let j = judged(
        &census_of(&sep.tables["lease"].items),
        &side_of(&sep),
        1_795_600_010,
    );
    assert_eq!(
        j.state,
        TableState::KclRunning,
        "the 3.0-3.4 metrics table too"
    );
}

fn with(items: &[Item], key: &str, attr: &str, v: AttributeValue) -> Vec<Item> {
    let mut items = items.to_vec();
    for i in &mut items {
        if i["leaseKey"].as_s().unwrap() == key {
            i.insert(attr.into(), v.clone());
        }
    }
    items
}

#[test]
fn unknown_items_and_values_are_refused_naming_them() {
    let f = fixtures::get("kcl3x_single_table");
    let items = &f.tables["lease"].items;
    let side = side_of(&f);
    let s = |v: &str| AttributeValue::S(v.into());
    for (items, state, needle) in [
        (
            with(items, "Leader", "entityType", s("LEADER_V2")),
            TableState::UnknownFormat,
            "LEADER_V2",
        ),
        (
            with(items, "Migration3.0", "cv", s("CLIENT_VERSION_4X")),
            TableState::UnknownFormat,
            "CLIENT_VERSION_4X",
        ),
        (
            with(
                items,
                "TableMigration3.5",
                "tm",
                s("TABLE_MIGRATION_STATUS_V2"),
            ),
            TableState::UnknownFormat,
            "TABLE_MIGRATION_STATUS_V2",
        ),
        (
            with(items, "shardId-000000000002", "leaseCounter", s("x")),
            TableState::UnreadableLease,
            "shardId-000000000002",
        ),
    ] {
        let j = judged(&census_of(&items), &side, NOW_S);
        assert_eq!(j.state, state, "{j:?}");
        assert!(j.refusal.unwrap().contains(needle), "{needle}");
    }
    // Migration3.0 in both tables, with different values.
    let mut split = side.clone();
    split.coordinator = Side::Found(CoordinatorItems {
        migration: Some(
            [
                ("key".to_string(), s("Migration3.0")),
                ("cv".to_string(), s("CLIENT_VERSION_2X")),
            ]
            .into(),
        ),
        table_migration: None,
    });
    let j = judged(&census_of(items), &split, NOW_S);
    assert_eq!(j.state, TableState::UnknownFormat, "{j:?}");
}

/// KCL 3.x signs on the leases but no migration state where Tidemark
/// looked: a custom coordinator-state table name, so refuse and ask for
/// it; `"none"` says there is none.
#[test]
fn kcl_3x_signs_without_a_migration_state_ask_for_the_table() {
    let f = fixtures::get("kcl3x_separate_tables");
    let census = census_of(&f.tables["lease"].items);
    let nothing = SideTables {
        coordinator: Side::Absent,
        metrics: Side::Absent,
    };
    let j = judged(&census, &nothing, NOW_S);
    assert_eq!(j.state, TableState::MigrationStateNotFound, "{j:?}");
    let why = j.refusal.unwrap();
    assert!(why.contains("kcl_coordinator_state_table"), "{why}");
    assert!(why.contains("throughputKBps"), "{why}");
    let none = judge(
        &census,
        &SideTables::default(),
        JudgeInput {
            table: "kcl-app",
            names: &SideTableNames::default(),
            now_s: NOW_S,
            max_clock_skew: Duration::from_secs(2),
        },
    );
    assert_eq!((none.state, none.refusal), (TableState::Kcl2xFormat, None));
    // Unreadable side tables: refused for a KCL 3.x table, naming the
    // permission; no matter for a KCL 2.x one.
    let denied = SideTables {
        coordinator: Side::Denied("dynamodb:DescribeTable on kcl-app-CoordinatorState".into()),
        metrics: Side::Absent,
    };
    let j = judged(&census, &denied, NOW_S);
    assert_eq!(j.state, TableState::SideTablesDenied);
    assert!(j.refusal.unwrap().contains("dynamodb:DescribeTable"));
    let two = fixtures::get("kcl2x");
    let j = judged(&census_of(&two.tables["lease"].items), &denied, NOW_S);
    assert_eq!((j.state, j.refusal), (TableState::Kcl2xFormat, None));
}

#[test]
fn unknown_kinds_are_listed_apart() {
    let items = with(
        &fixtures::get("kcl2x").tables["lease"].items,
        "shardId-000000000001",
        "entityType",
        AttributeValue::S("SHARD".into()),
    );
    let c = census_of(&items);
    assert_eq!(c.leases.len(), 3);
    assert!(matches!(c.others[0].kind, OtherKind::Unknown(_)));
}

/// The reference semantics of a conditional lease write (what the fleet
/// simulator's table and DynamoDB's conditions do): a KCL leader starting a
/// hand-off of a held lease does not bump its counter, yet the holder's
/// next renewal, checkpoint or release is refused; a take ends the
/// hand-off.
#[test]
fn a_hand_off_refuses_the_holders_writes_and_a_take_ends_it() {
    use super::item::Checkpoint;
    use super::store::LeaseWrite;
    let mut l = Lease::new("shardId-1", Checkpoint::TrimHorizon, vec![]);
    l.owner = Some("next".into());
    l.checkpoint_owner = Some("tidemark-1".into());
    l.counter = 7;
    let mut held_by_me = l.clone();
    held_by_me.owner = Some("tidemark-1".into());
    for w in [
        LeaseWrite::Renew {
            key: l.key.clone(),
            me: "tidemark-1".into(),
            counter: 7,
        },
        LeaseWrite::Release {
            key: l.key.clone(),
            me: "tidemark-1".into(),
            counter: 7,
        },
        LeaseWrite::Checkpoint {
            key: l.key.clone(),
            me: "tidemark-1".into(),
            counter: 7,
            checkpoint: Checkpoint::ShardEnd,
            children: vec![],
        },
    ] {
        assert!(w.apply(Some(&l)).is_err(), "{w:?}");
        // Even with leaseOwner = the holder: checkpointOwner alone refuses.
        assert!(w.apply(Some(&held_by_me)).is_err(), "{w:?}");
    }
    let take = LeaseWrite::Acquire {
        key: l.key.clone(),
        counter: 7,
        me: "tidemark-2".into(),
        switches: 1,
    };
    let taken = take.apply(Some(&l)).unwrap();
    assert_eq!(taken.owner.as_deref(), Some("tidemark-2"));
    assert_eq!(taken.checkpoint_owner, None);
    assert_eq!(taken.counter, 8);
}
