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
