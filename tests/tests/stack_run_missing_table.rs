//! An event for a period table that does not exist yet (a backfill into an
//! older period) makes the writer create that table, then store the event:
//! nothing is lost. Tables that are not ours are refused, not created.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tidemark_schema::period::{Billing, CapacityTiers};
use tidemark_schema::route::{RouteCache, Router, RouterConfig};
use tidemark_schema::{ItemKey, Origin, Reason};
use tidemark_tests::unique_name;
use tidemark_worker::config::ExpiryAction;
use tidemark_worker::maintenance::{CreateMissingTables, TableManager, TablePolicy};
use tidemark_writer::{Completion, Submission, WriteOutcome, Writer, WriterConfig};
use tokio::sync::oneshot;

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(feature = "stack"),
    ignore = "needs the local AWS stack (scripts/test runs it)"
)]
async fn a_write_to_a_missing_period_table_creates_it() {
    let stack = tidemark_tests::stack().await;
    let ddb = stack.dynamodb();
    let prefix = unique_name("backfill");
    let mut config = RouterConfig::with_prefix(&prefix);
    config.retention = Duration::from_secs(30 * 86_400);
    let router = Router::new(config.clone()).unwrap();
    let policy = TablePolicy::new(
        &config,
        CapacityTiers::default(),
        Billing::Provisioned,
        ExpiryAction::Delete,
    );
    let manager = TableManager::new(ddb.clone(), policy);
    let (writer, task) = Writer::builder(
        ddb.clone(),
        stack.dynamodb_transport_at(&stack.dynamodb_url),
        config.key_attributes.clone(),
    )
    .config(WriterConfig::default())
    .missing_tables(Arc::new(CreateMissingTables::new(manager)))
    .start();

    // Three days ago: its table was never created.
    let when = Utc::now() - chrono::Duration::days(3);
    let event = format!(
        r#"{{"deviceId":"late-1","timestamp":"{}","eventId":"b1","v":7}}"#,
        when.to_rfc3339()
    );
    let origin = Origin::Sqs {
        queue: "q".into(),
        message_id: "m".into(),
        index: 0,
    };
    let routed = router
        .route(
            event.as_bytes(),
            &origin,
            0,
            Utc::now(),
            &mut RouteCache::default(),
        )
        .unwrap()
        .new;
    let item = routed.item.to_item().unwrap();
    assert!(
        ddb.describe_table()
            .table_name(&routed.table)
            .send()
            .await
            .is_err(),
        "table absent before"
    );

    let (tx, rx) = oneshot::channel();
    writer
        .submit(Submission {
            table: routed.table.clone(),
            key: routed.key.clone(),
            item: routed.item.clone(),
            done: Completion::from_fn(move |o| {
                let _ = tx.send(o);
            }),
        })
        .await
        .unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(60), rx)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcome, WriteOutcome::Stored);
    let got = ddb
        .get_item()
        .table_name(&routed.table)
        .key(
            "pk",
            aws_sdk_dynamodb::types::AttributeValue::S(routed.key.pk().to_owned()),
        )
        .key(
            "sk",
            aws_sdk_dynamodb::types::AttributeValue::S(routed.key.sk().to_owned()),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(got.item(), Some(&item));

    // A table that is not one of ours is refused with a reason.
    let (tx, rx) = oneshot::channel();
    writer
        .submit(Submission {
            table: format!("{prefix}_not-a-period").into(),
            key: ItemKey::new("p", "s"),
            item: routed.item.clone(),
            done: Completion::from_fn(move |o| {
                let _ = tx.send(o);
            }),
        })
        .await
        .unwrap();
    match tokio::time::timeout(Duration::from_secs(60), rx)
        .await
        .unwrap()
        .unwrap()
    {
        WriteOutcome::Rejected { reason, message } => {
            assert_eq!(reason, Reason::TableMissing);
            assert!(message.contains("not a Tidemark period table"), "{message}");
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    writer.close();
    task.await.unwrap().unwrap();
    ddb.delete_table()
        .table_name(&routed.table)
        .send()
        .await
        .ok();
}
