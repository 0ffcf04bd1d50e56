//! BatchWriteItem request bodies, built from the queue's batches next to
//! the transport that sends them (the queue in `batch` stays pure).

use tidemark_schema::wire::write_str;

use crate::batch::{Entry, PER_ITEM_OVERHEAD, REQUEST_OVERHEAD};

/// The BatchWriteItem request body of a batch for `table`, asking for the
/// consumed capacity. The items' encoded bytes are copied in; the batch keeps
/// its items (shared bytes) for a retry, since a failed call returns nothing.
pub fn request_body<T>(table: &str, batch: &[Entry<T>]) -> Vec<u8> {
    let items: usize = batch.iter().map(|e| e.wire_bytes + PER_ITEM_OVERHEAD).sum();
    let mut out = Vec::with_capacity(REQUEST_OVERHEAD + table.len() + items);
    out.extend_from_slice(b"{\"RequestItems\":{");
    write_str(&mut out, table);
    out.extend_from_slice(b":[");
    for (i, e) in batch.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"PutRequest\":{\"Item\":");
        out.extend_from_slice(e.item.json());
        out.extend_from_slice(b"}}");
    }
    out.extend_from_slice(b"]},\"ReturnConsumedCapacity\":\"TOTAL\"}");
    out
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::batch::TableQueue;
    use aws_sdk_dynamodb::types::AttributeValue;
    use tidemark_schema::{Item, ItemKey, WireItem};

    fn key(i: usize) -> ItemKey {
        ItemKey::new(&format!("p{i}"), "s")
    }

    fn item(i: usize, payload: &str) -> WireItem {
        let mut it = Item::new();
        it.insert("pk".into(), AttributeValue::S(format!("p{i}")));
        it.insert("sk".into(), AttributeValue::S("s".into()));
        it.insert("v".into(), AttributeValue::S(payload.into()));
        WireItem::encode(&it)
    }

    #[test]
    fn request_body_is_the_json_dynamodb_takes() {
        let now = Instant::now();
        let mut q = TableQueue::default();
        q.push(key(1), item(1, "a \"b\""), 1, 1, now);
        q.push(key(2), item(2, "c"), 1, 2, now);
        let b = q.take_batch();
        let body = request_body("t\"1", &b);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["ReturnConsumedCapacity"], "TOTAL");
        let reqs = v["RequestItems"]["t\"1"].as_array().unwrap();
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[0]["PutRequest"]["Item"]["v"]["S"], "a \"b\"");
        assert_eq!(reqs[1]["PutRequest"]["Item"]["pk"]["S"], "p2");
        let framing: usize = b.iter().map(|e| e.wire_bytes + PER_ITEM_OVERHEAD).sum();
        assert!(body.len() <= REQUEST_OVERHEAD + framing);
    }
}
