//! Reading a successful BatchWriteItem answer: the capacity it consumed and
//! the keys of the items DynamoDB returned unprocessed. Only those keys are
//! read; an answer with nothing unprocessed costs one small parse.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;
use tidemark_schema::ItemKey;

/// What a successful call says.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BatchAnswer {
    /// Capacity units reported for the table (None if not reported).
    pub consumed: Option<f64>,
    /// Keys of the unprocessed puts for the table; `None` for one whose key
    /// cannot be read, or that is listed under another key than the table
    /// name (the caller then resends the whole batch).
    pub unprocessed: Vec<Option<ItemKey>>,
}

#[derive(Deserialize)]
struct Output {
    #[serde(rename = "UnprocessedItems", default)]
    unprocessed: HashMap<String, Vec<Request>>,
    #[serde(rename = "ConsumedCapacity", default)]
    consumed: Vec<Consumed>,
}

#[derive(Deserialize)]
struct Request {
    #[serde(rename = "PutRequest")]
    put: Option<Put>,
}

#[derive(Deserialize)]
struct Put {
    #[serde(rename = "Item")]
    item: HashMap<String, Value>,
}

#[derive(Deserialize)]
struct Consumed {
    #[serde(rename = "TableName")]
    table: Option<String>,
    #[serde(rename = "CapacityUnits")]
    units: Option<f64>,
}

/// The string inside a key attribute value (`{"S":"x"}`, `{"N":"1"}`, ...).
fn key_value(v: Option<&Value>) -> Option<&str> {
    let obj = v?.as_object()?;
    if obj.len() != 1 {
        return None;
    }
    obj.values().next()?.as_str()
}

/// Parses a 200 answer. `Err` if the body is not a BatchWriteItem output:
/// then nothing it says can be trusted.
pub(crate) fn parse(body: &[u8], table: &str, pk: &str, sk: &str) -> Result<BatchAnswer, String> {
    let out: Output = serde_json::from_slice(body)
        .map_err(|e| format!("unreadable BatchWriteItem answer: {e}"))?;
    let units: Vec<f64> = out
        .consumed
        .iter()
        .filter(|c| c.table.as_deref().is_none_or(|t| t == table))
        .filter_map(|c| c.units)
        .collect();
    let mut unprocessed: Vec<Option<ItemKey>> = Vec::new();
    for (name, reqs) in &out.unprocessed {
        if name == table {
            unprocessed.extend(reqs.iter().map(|r| {
                let item = &r.put.as_ref()?.item;
                Some(ItemKey::new(
                    key_value(item.get(pk))?,
                    key_value(item.get(sk))?,
                ))
            }));
        } else {
            // Listed under another key (an ARN, another spelling): these
            // cannot be matched to this call's items, so none of the call
            // counts as confirmed (the whole batch is sent again).
            unprocessed.extend(reqs.iter().map(|_| None));
        }
    }
    Ok(BatchAnswer {
        consumed: (!units.is_empty()).then(|| units.iter().sum()),
        unprocessed,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn key(pk: &str) -> Option<ItemKey> {
        Some(ItemKey::new(pk, "s"))
    }

    #[test]
    fn everything_processed() {
        let a = parse(
            br#"{"UnprocessedItems":{},"ConsumedCapacity":[{"TableName":"t","CapacityUnits":25.0}]}"#,
            "t",
            "pk",
            "sk",
        )
        .unwrap();
        assert_eq!(a.consumed, Some(25.0));
        assert!(a.unprocessed.is_empty());
        // Nothing reported at all (some emulators).
        let a = parse(b"{}", "t", "pk", "sk").unwrap();
        assert_eq!(a.consumed, None);
    }

    #[test]
    fn unprocessed_keys_of_the_table_are_read() {
        let body = br#"{"UnprocessedItems":{"t":[
            {"PutRequest":{"Item":{"pk":{"S":"a"},"sk":{"S":"s"},"v":{"N":"1"}}}},
            {"PutRequest":{"Item":{"pk":{"S":"b"},"v":{"N":"1"}}}},
            {"DeleteRequest":{"Key":{"pk":{"S":"c"},"sk":{"S":"s"}}}}
        ]},"ConsumedCapacity":[{"TableName":"other","CapacityUnits":9},{"TableName":"t","CapacityUnits":1}]}"#;
        let a = parse(body, "t", "pk", "sk").unwrap();
        assert_eq!(a.consumed, Some(1.0));
        assert_eq!(a.unprocessed, vec![key("a"), None, None]);
    }

    #[test]
    fn unprocessed_items_under_another_key_read_as_unknown_keys() {
        // An ARN, another table, a differently spelled name: none can be
        // matched to this call's submissions, so each counts as an
        // unprocessed item whose key is unknown (the whole batch goes again).
        let body = br#"{"UnprocessedItems":{
            "arn:aws:dynamodb:us-east-1:1:table/t":[
                {"PutRequest":{"Item":{"pk":{"S":"a"},"sk":{"S":"s"}}}},
                {"PutRequest":{"Item":{"pk":{"S":"b"},"sk":{"S":"s"}}}}
            ],
            "t":[{"PutRequest":{"Item":{"pk":{"S":"c"},"sk":{"S":"s"}}}}],
            "empty":[]
        }}"#;
        let a = parse(body, "t", "pk", "sk").unwrap();
        assert_eq!(a.unprocessed.len(), 3, "{:?}", a.unprocessed);
        assert!(a.unprocessed.contains(&key("c")));
        assert_eq!(a.unprocessed.iter().filter(|k| k.is_none()).count(), 2);
    }

    #[test]
    fn a_body_that_is_not_an_answer_is_an_error() {
        assert!(parse(b"<html>", "t", "pk", "sk").is_err());
        assert!(parse(br#"{"UnprocessedItems":[]}"#, "t", "pk", "sk").is_err());
    }
}
