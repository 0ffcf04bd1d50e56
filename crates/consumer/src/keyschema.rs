//! The key schema a table must have before Tidemark adopts it.
//!
//! Every table the worker uses but did not necessarily create (the lease
//! table, the coordinator table, period tables, a dead-letter table) is
//! checked once against the [`KeySpec`] its code needs. A mismatch is a
//! start-up error naming the table, the schema found and the schema
//! expected: writing with the wrong key names fails every call with a
//! ValidationException, which at run time looks like a transient fault and
//! is retried (or warned about) for ever.

use aws_sdk_dynamodb::types::{
    AttributeDefinition, KeySchemaElement, KeyType, ScalarAttributeType, TableDescription,
};

/// One key attribute: name and scalar type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyAttr {
    /// Attribute name.
    pub name: String,
    /// `S`, `N` or `B`.
    pub kind: ScalarAttributeType,
}

impl KeyAttr {
    /// A string key attribute.
    pub fn string(name: impl Into<String>) -> Self {
        KeyAttr {
            name: name.into(),
            kind: ScalarAttributeType::S,
        }
    }
}

impl std::fmt::Display for KeyAttr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name, self.kind.as_str())
    }
}

/// The key schema a table needs: a hash key and an optional sort key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySpec {
    /// Partition (hash) key.
    pub hash: KeyAttr,
    /// Sort (range) key, if any.
    pub range: Option<KeyAttr>,
}

impl std::fmt::Display for KeySpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "hash key {}", self.hash)?;
        match &self.range {
            Some(r) => write!(f, ", sort key {r}"),
            None => write!(f, ", no sort key"),
        }
    }
}

/// A table whose key schema is not the one Tidemark needs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "table {table} has {found}, but Tidemark needs {expected} ({role}); \
     point the config at a table with that key schema, or delete this one so it is created"
)]
pub struct KeySchemaMismatch {
    /// The table.
    pub table: String,
    /// What Tidemark uses it for (`lease table`, `period table`, ...).
    pub role: &'static str,
    /// The schema found, as text.
    pub found: String,
    /// The schema expected, as text.
    pub expected: String,
}

impl KeySpec {
    /// A hash key only (lease and coordinator tables: `leaseKey`).
    pub(crate) fn hash_only(hash: KeyAttr) -> Self {
        KeySpec { hash, range: None }
    }

    /// A hash and a sort key.
    pub fn hash_range(hash: KeyAttr, range: KeyAttr) -> Self {
        KeySpec {
            hash,
            range: Some(range),
        }
    }

    /// The spec of an existing table, as DynamoDB describes it; `None` when
    /// the description has no hash key.
    pub(crate) fn of(table: &TableDescription) -> Option<KeySpec> {
        let attr = |k: &KeySchemaElement| {
            let kind = table
                .attribute_definitions()
                .iter()
                .find(|d| d.attribute_name() == k.attribute_name())
                .map(|d| d.attribute_type().clone())
                // DynamoDB always defines key attributes; an emulator that
                // does not is read as a string key.
                .unwrap_or(ScalarAttributeType::S);
            KeyAttr {
                name: k.attribute_name().to_string(),
                kind,
            }
        };
        let keys = table.key_schema();
        let hash = keys.iter().find(|k| k.key_type() == &KeyType::Hash)?;
        let range = keys.iter().find(|k| k.key_type() == &KeyType::Range);
        Some(KeySpec {
            hash: attr(hash),
            range: range.map(attr),
        })
    }

    /// `Ok` when `table` (named `name`) has exactly this key schema.
    pub fn check(
        &self,
        name: &str,
        role: &'static str,
        table: &TableDescription,
    ) -> Result<(), KeySchemaMismatch> {
        let found = KeySpec::of(table);
        if found.as_ref() == Some(self) {
            return Ok(());
        }
        Err(KeySchemaMismatch {
            table: name.to_string(),
            role,
            found: found.map_or_else(|| "no hash key".to_string(), |f| f.to_string()),
            expected: self.to_string(),
        })
    }

    /// The CreateTable key schema elements of this spec.
    pub fn elements(&self) -> Result<Vec<KeySchemaElement>, aws_sdk_dynamodb::error::BuildError> {
        let mut out = vec![
            KeySchemaElement::builder()
                .attribute_name(&self.hash.name)
                .key_type(KeyType::Hash)
                .build()?,
        ];
        if let Some(r) = &self.range {
            out.push(
                KeySchemaElement::builder()
                    .attribute_name(&r.name)
                    .key_type(KeyType::Range)
                    .build()?,
            );
        }
        Ok(out)
    }

    /// The CreateTable attribute definitions of this spec.
    pub fn definitions(
        &self,
    ) -> Result<Vec<AttributeDefinition>, aws_sdk_dynamodb::error::BuildError> {
        let mut out = Vec::new();
        for a in std::iter::once(&self.hash).chain(self.range.as_ref()) {
            out.push(
                AttributeDefinition::builder()
                    .attribute_name(&a.name)
                    .attribute_type(a.kind.clone())
                    .build()?,
            );
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn described(spec: &KeySpec) -> TableDescription {
        TableDescription::builder()
            .set_key_schema(Some(spec.elements().unwrap()))
            .set_attribute_definitions(Some(spec.definitions().unwrap()))
            .build()
    }

    #[test]
    fn the_same_schema_passes() {
        let spec = KeySpec::hash_range(KeyAttr::string("pk"), KeyAttr::string("sk"));
        assert_eq!(spec.check("t", "period table", &described(&spec)), Ok(()));
    }

    #[test]
    fn a_coordinator_keyed_pk_is_refused_with_both_schemas_named() {
        let wanted = KeySpec::hash_only(KeyAttr::string("leaseKey"));
        let found = KeySpec::hash_only(KeyAttr::string("pk"));
        let err = wanted
            .check("app-coordinator", "coordinator table", &described(&found))
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("app-coordinator"), "{text}");
        assert!(text.contains("hash key pk (S), no sort key"), "{text}");
        assert!(
            text.contains("hash key leaseKey (S), no sort key"),
            "{text}"
        );
    }

    #[test]
    fn an_extra_sort_key_a_missing_one_or_a_number_type_is_refused() {
        let wanted = KeySpec::hash_range(KeyAttr::string("pk"), KeyAttr::string("sk"));
        let hash_only = KeySpec::hash_only(KeyAttr::string("pk"));
        assert!(
            wanted
                .check("t", "period table", &described(&hash_only))
                .is_err()
        );
        assert!(
            hash_only
                .check("t", "lease table", &described(&wanted))
                .is_err()
        );
        let numeric = KeySpec::hash_range(
            KeyAttr::string("pk"),
            KeyAttr {
                name: "sk".into(),
                kind: ScalarAttributeType::N,
            },
        );
        let err = wanted
            .check("t", "period table", &described(&numeric))
            .unwrap_err();
        assert!(err.found.contains("sk (N)"), "{err}");
    }
}
