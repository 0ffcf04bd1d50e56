//! The DynamoDB table destination: one item per entry, keyed by source
//! position (`pk`) and time (`sk`).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use futures::future::BoxFuture;
use tidemark_consumer::keyschema::{KeyAttr, KeySchemaMismatch, KeySpec};
use tracing::warn;

use super::entry::DeadLetter;
use super::sink::{DeadLetterError, DeadLetterSink};

/// Largest dead-letter item (attribute names and values, UTF-8): DynamoDB's
/// "400 KB" read as 400,000 bytes. DynamoDB itself takes a little more
/// (about 409 KB); the decimal reading keeps every entry under any reading
/// of the limit, emulators' included.
pub(crate) const DYNAMODB_MAX_ITEM: usize = 400_000;

/// DynamoDB table destination: `pk` = source position, `sk` = time.
#[derive(Debug)]
pub struct DynamoDbSink {
    client: aws_sdk_dynamodb::Client,
    table: String,
    gov: Option<tidemark_governor::Governor>,
}

impl DynamoDbSink {
    /// Writes entries to `table`.
    pub fn new(client: aws_sdk_dynamodb::Client, table: String) -> Self {
        DynamoDbSink {
            client,
            table,
            gov: None,
        }
    }

    /// Puts are admitted by the DynamoDB endpoint's shared governor.
    pub(crate) fn with_governor(mut self, gov: tidemark_governor::Governor) -> Self {
        self.gov = Some(gov);
        self
    }
}

impl DeadLetterSink for DynamoDbSink {
    fn write<'a>(
        &'a self,
        entries: &'a [DeadLetter],
    ) -> BoxFuture<'a, Result<(), DeadLetterError>> {
        Box::pin(async move {
            // PutItem one by one: dead letters are rare, and a put per entry
            // keeps a large entry from failing its neighbours.
            for e in entries {
                let put = self
                    .client
                    .put_item()
                    .table_name(&self.table)
                    .set_item(Some(dynamodb_item(e)))
                    .send();
                tidemark_governor::Governor::run_opt(self.gov.as_ref(), put)
                    .await
                    .map_err(|e| {
                        DeadLetterError::of_class(
                            format!("dynamodb table {}", self.table),
                            tidemark_aws_errors::describe(&e),
                            tidemark_aws_errors::classify(&e),
                        )
                    })?;
            }
            Ok(())
        })
    }
}

/// The DynamoDB item of an entry: `pk`, `sk`, `reason` and the entry's JSON,
/// which is sized so the whole item stays within [`DYNAMODB_MAX_ITEM`].
fn dynamodb_item(e: &DeadLetter) -> HashMap<String, AttributeValue> {
    let mut item: HashMap<String, AttributeValue> = [
        ("pk", e.position()),
        ("sk", e.time.clone()),
        ("reason", e.reason.as_str().to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), AttributeValue::S(v)))
    .collect();
    // DynamoDB counts each attribute's name and value (UTF-8 bytes).
    let others: usize = item
        .iter()
        .map(|(k, v)| k.len() + v.as_s().map_or(0, String::len))
        .sum::<usize>()
        + "entry".len();
    let entry = e.to_json_within(DYNAMODB_MAX_ITEM - others - 1024);
    item.insert("entry".into(), AttributeValue::S(entry));
    item
}

/// The key schema of a DynamoDB dead-letter table (see
/// [`DynamoDbSink`]): `pk` and `sk`, both strings.
fn dead_letter_key_spec() -> KeySpec {
    KeySpec::hash_range(KeyAttr::string("pk"), KeyAttr::string("sk"))
}

/// Refuses to start with a dead-letter table of another key schema (every
/// dead letter would then fail); an absent or unreadable table is only
/// warned about here (`tidemark tables ensure` creates it; writes to a
/// missing table are refusals for good).
pub(crate) async fn check_dead_letter_table(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<(), KeySchemaMismatch> {
    match dynamodb.describe_table().table_name(table).send().await {
        Ok(d) => {
            if let Some(t) = d.table() {
                dead_letter_key_spec().check(table, "dead-letter table", t)?;
            }
            Ok(())
        }
        Err(e) => {
            warn!(table, error = %tidemark_aws_errors::describe(&e), "cannot read the dead-letter table at start");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::entry::samples::entry;
    use super::*;

    #[test]
    fn dynamodb_items_fit_400_kb() {
        for size in [10, 200_000, 400_000, 2_000_000] {
            let item = dynamodb_item(&entry(1, &vec![b'z'; size]));
            let bytes: usize = item
                .iter()
                .map(|(k, v)| k.len() + v.as_s().unwrap().len())
                .sum();
            assert!(
                bytes <= DYNAMODB_MAX_ITEM,
                "{size}-byte payload: {bytes}-byte item"
            );
            let back: DeadLetter = serde_json::from_str(item["entry"].as_s().unwrap()).unwrap();
            assert_eq!(back.payload_bytes, size);
        }
    }
}
