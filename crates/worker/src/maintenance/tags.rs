//! The tags Tidemark puts on its period tables, and the value format of
//! the layout tags (a key strategy as `name=value` pairs).

/// The tag put on expired tables kept for archiving.
pub(super) const EXPIRED_TAG: &str = "tidemark:expired";
/// The tag every period table carries: its table prefix. IAM conditions on
/// it (`aws:ResourceTag/tidemark:prefix`) keep another team's `prefix_*`
/// tables out of the task role's reach.
pub const PREFIX_TAG: &str = "tidemark:prefix";
/// The tag recording the key layout a table is written with (strategy,
/// shard count, bucket): `strategy=time_bucket/bucket=hour/shards=10`.
/// Keys of one table must never change silently: `query` would miss every
/// item written before.
pub const LAYOUT_TAG: &str = "tidemark:layout";
/// During a shard migration: the layout a table was written with before,
/// still read (and written) beside [`LAYOUT_TAG`]'s until the cutover.
pub const LAYOUT_FROM_TAG: &str = "tidemark:layout-from";
/// During a shard migration: the table's state, `dual` (both layouts
/// written and read), `backfilled` (every old item copied to the new
/// layout) or `new-only` (cut over: only [`LAYOUT_TAG`]'s layout is read,
/// old-layout items may be removed). See [`migrate`](super::migrate).
pub const MIGRATION_TAG: &str = "tidemark:migration";
/// The tag recording when DynamoDB last refused a change of the table's
/// class (Unix ms): not asked again for a day.
pub(super) const CLASS_REFUSED_TAG: &str = "tidemark:class-refused";
/// The tag holding the ARN of a table's export to S3 (`on_expiry = "export"`).
pub(super) const EXPORT_TAG: &str = "tidemark:export-arn";

/// The layout tag value of a key strategy: its serialized fields as
/// `name=value` pairs, in name order, joined by `/` (only characters tag
/// values allow).
pub fn layout_of(key: &tidemark_schema::strategy::KeyStrategy) -> String {
    let mut pairs: Vec<String> = match serde_json::to_value(key) {
        Ok(serde_json::Value::Object(m)) => m
            .into_iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => format!("{k}={s}"),
                v => format!("{k}={v}"),
            })
            .collect(),
        _ => Vec::new(),
    };
    pairs.sort();
    pairs.join("/")
}

/// A layout tag value as the body of a TOML inline table
/// (`bucket = "hour", shards = 4, strategy = "time_bucket"`).
pub(super) fn layout_toml(value: &str) -> String {
    value
        .split('/')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| match v.parse::<u64>() {
            Ok(_) => format!("{k} = {v}"),
            Err(_) => format!("{k} = \"{v}\""),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The key strategy of a layout tag value ([`layout_of`]'s inverse);
/// `None` for a value no strategy gives.
pub(super) fn parse_layout(value: &str) -> Option<tidemark_schema::strategy::KeyStrategy> {
    let mut fields = serde_json::Map::new();
    for pair in value.split('/') {
        let (k, v) = pair.split_once('=')?;
        let v = match v.parse::<u64>() {
            Ok(n) => serde_json::Value::from(n),
            Err(_) => serde_json::Value::from(v),
        };
        fields.insert(k.to_string(), v);
    }
    let key = serde_json::from_value(serde_json::Value::Object(fields)).ok()?;
    (layout_of(&key) == value).then_some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_are_tag_values_that_change_with_the_shard_count() {
        use tidemark_schema::strategy::{Bucket, KeyStrategy};
        let four = layout_of(&KeyStrategy::TimeBucket {
            shards: 4,
            bucket: Bucket::Hour,
        });
        assert_eq!(four, "bucket=hour/shards=4/strategy=time_bucket");
        let eight = layout_of(&KeyStrategy::TimeBucket {
            shards: 8,
            bucket: Bucket::Hour,
        });
        assert_ne!(four, eight);
        assert_eq!(layout_of(&KeyStrategy::Entity), "strategy=entity");
        // Read back from the tag: per-table layouts for queries and backfill.
        for k in [
            KeyStrategy::Entity,
            KeyStrategy::RandomSuffix { shards: 3 },
            KeyStrategy::CalculatedSuffix { shards: 12 },
            KeyStrategy::TimeBucket {
                shards: 4,
                bucket: Bucket::Hour,
            },
        ] {
            assert_eq!(parse_layout(&layout_of(&k)), Some(k));
        }
        assert_eq!(parse_layout("strategy=entity/shards=2"), None);
        assert_eq!(parse_layout("nonsense"), None);
        // The refusal's suggested `schema.migrate_from` parses as the layout.
        let toml_body = layout_toml(&four);
        assert_eq!(
            toml_body,
            r#"bucket = "hour", shards = 4, strategy = "time_bucket""#
        );
        let back: KeyStrategy = toml::from_str(&toml_body.replace(", ", "\n")).unwrap();
        assert_eq!(layout_of(&back), four);
        // Only characters DynamoDB tag values allow.
        assert!(
            four.chars()
                .all(|c| c.is_alphanumeric() || " _.:/=+-@".contains(c)),
            "{four}"
        );
    }
}
