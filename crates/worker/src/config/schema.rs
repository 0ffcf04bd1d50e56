//! The JSON Schema of `tidemark.toml`, generated from the config types.
//!
//! One description of the file's shape serves three purposes: the committed
//! reference (`docs/configuration.md`, `docs/tidemark.schema.json`), the
//! unknown-key check of every load (which key is used where, including the
//! variants of tagged tables), and the defaults `tidemark config show`
//! reports.

use serde_json::{Value, json};
use tidemark_schema::period::{Billing, CapacityTiers};

use super::sections::Config;

/// The schema with the places where the file's shape differs from the Rust
/// types patched in (see [`Config::from_toml`]).
pub fn json_schema() -> Value {
    let mut generator = schemars::generate::SchemaSettings::draft07().into_generator();
    let tiers = generator.subschema_for::<CapacityTiers>();
    let billing = generator.subschema_for::<Billing>();
    let root = generator.into_root_schema_for::<Config>();
    let mut schema = serde_json::to_value(root).unwrap_or(Value::Null);
    schema["title"] = json!("tidemark.toml");
    schema["description"] = json!(
        "Configuration of the tidemark worker. Generated from the config types; see docs/configuration.md."
    );
    let defs = &mut schema["definitions"];
    // `tiers` and `billing` are written in [schema] but read beside it.
    let router = &mut defs["RouterConfig"]["properties"];
    router["tiers"] = json!({
        "description": "Table settings per lifecycle state: provisioned capacity `{ read, write }` (used when `billing.mode` is `provisioned`), table auto scaling `autoscale` (provisioned), the on-demand ceiling `max_read_units` / `max_write_units` (used when it is `on_demand`) and the `table_class`. See docs/keys-and-tables.md (cost per stage).",
        "allOf": [tiers],
        "default": serde_json::to_value(CapacityTiers::default()).unwrap_or(Value::Null),
    });
    router["billing"] = json!({
        "description": "How period tables are billed: `{ mode = \"provisioned\" }` (capacity per `tiers`) or `{ mode = \"on_demand\", warm_write_units = N }`.",
        "allOf": [billing],
        "default": serde_json::to_value(Billing::default()).unwrap_or(Value::Null),
    });
    // An optional key strategy: described as the strategy itself (its
    // variants, and their keys checked), not as "anything or null".
    if let Some(m) = router.get_mut("migrate_from") {
        let description = m["description"].clone();
        *m = json!({
            "description": description,
            "allOf": [{ "$ref": "#/definitions/KeyStrategy" }],
        });
    }
    // Set elsewhere in the file, so not a key here: the event fields are the
    // top-level [event].
    if let Some(p) = defs["RouterConfig"]["properties"].as_object_mut() {
        p.remove("event");
    }
    if let Some(d) = defs["RouterConfig"]
        .get_mut("default")
        .and_then(Value::as_object_mut)
    {
        d.remove("event");
    }
    // The worker fills `source.worker_id` in when it is absent.
    if let Some(variants) = defs["SourceConfig"]["oneOf"].as_array_mut() {
        for variant in variants {
            if let Some(required) = variant["required"].as_array_mut() {
                required.retain(|k| k != "worker_id");
            }
            if let Some(p) = variant["properties"].get_mut("worker_id") {
                let d = p["description"].as_str().unwrap_or_default().to_string();
                p["description"] = json!(format!(
                    "{d}\nDefault: `ecs-<task id>` on ECS (from `ECS_CONTAINER_METADATA_URI_V4`), else the host name."
                ));
            }
        }
    }
    schema
}

/// Follows `$ref` and a lone `allOf: [$ref]` to the definition.
pub(crate) fn resolve<'a>(schema: &'a Value, defs: &'a Value) -> &'a Value {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap_or_default();
        return resolve(&defs[name], defs);
    }
    if let Some([one]) = schema["allOf"].as_array().map(Vec::as_slice) {
        return resolve(one, defs);
    }
    schema
}

/// The tag of a tagged table's variants (`kind`, `strategy`, `mode`,
/// `type`) and the variants by tag value; `None` for a plain table.
pub(crate) fn tagged(schema: &Value) -> Option<(String, Vec<(String, &Value)>)> {
    let variants = schema["oneOf"].as_array()?;
    let mut tag = None;
    let mut out = Vec::new();
    for v in variants {
        let (name, value) = v["properties"]
            .as_object()?
            .iter()
            .find_map(|(k, p)| Some((k.clone(), p["const"].as_str()?.to_string())))?;
        tag = Some(name);
        out.push((value, v));
    }
    Some((tag?, out))
}

/// The schema of a table's body: the variant its tag selects, or itself.
/// `Err` carries the tag and the valid values when the tag is missing or
/// unknown.
pub(crate) fn body<'a>(
    schema: &'a Value,
    table: &toml::Table,
) -> Result<&'a Value, (String, Vec<String>)> {
    match tagged(schema) {
        None => Ok(schema),
        Some((tag, variants)) => {
            let chosen = table.get(&tag).and_then(toml::Value::as_str);
            variants
                .iter()
                .find(|(v, _)| Some(v.as_str()) == chosen)
                .map(|(_, s)| *s)
                .ok_or_else(|| (tag, variants.iter().map(|(v, _)| v.clone()).collect()))
        }
    }
}
