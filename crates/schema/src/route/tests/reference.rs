//! The attribute-map item building `route` did before it wrote DynamoDB JSON
//! directly, kept as the oracle of the equivalence tests.

use std::collections::HashMap;

use std::fmt;

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::value::RawValue;

use super::*;
use crate::event::ClashPolicy;
use crate::raw::{self, Name, Node};
use crate::size::{self, Item};
use crate::wire::payload::{self, Path};

fn bad(field: impl fmt::Display, problem: impl Into<String>) -> RouteError {
    RouteError::BadAttribute {
        field: field.to_string(),
        problem: problem.into(),
    }
}

/// The item `route` built for a record, or its error.
pub(super) fn route_item(
    router: &Router,
    data: &[u8],
    origin: &Origin,
    now: DateTime<Utc>,
) -> Result<Item, RouteError> {
    let Prepared { ev, key, iso, .. } =
        router.prepare(data, origin, 0, now, &mut RouteCache::default())?;
    let cfg = &router.config;
    let ts = ev.timestamp_ms;
    let ka = &cfg.key_attributes;
    let ia = &cfg.attributes;
    let mut item = Item::with_capacity(ev.payload.len() + 7);
    item.insert(ka.pk.clone(), AttributeValue::S(key.pk().to_owned()));
    item.insert(ka.sk.clone(), AttributeValue::S(key.sk().to_owned()));
    item.insert(
        ia.entity.clone(),
        AttributeValue::S(ev.entity_id.into_owned()),
    );
    item.insert(
        ia.event_id.clone(),
        AttributeValue::S(ev.event_id.into_owned()),
    );
    item.insert(ia.timestamp.clone(), AttributeValue::S(iso.into_owned()));
    item.insert(ia.timestamp_ms.clone(), AttributeValue::N(ts.to_string()));
    if let Some(ttl) = &cfg.ttl_attribute {
        let expires = router.layout.expires(ts);
        item.insert(ttl.clone(), AttributeValue::N(expires.to_string()));
    }
    let reserved = |name: String| {
        RouteError::BadAttribute {
        field: name,
        problem: "has the name of a reserved item attribute; rename it in the producer, change `attributes`, or set [event] on_clash = \"prefix\"".into(),
    }
    };
    let mut seen = std::collections::HashSet::new();
    for (name, node) in &ev.payload {
        let name = name.to_string();
        if !seen.insert(name.clone()) {
            return Err(reserved(name));
        }
        if name.is_empty() {
            return Err(RouteError::BadAttribute {
                field: name,
                problem: "has an empty name, which DynamoDB rejects".into(),
            });
        }
        let value = node_to_attribute(node, &name, 1)?;
        let stored = if item.contains_key(&name) {
            match cfg.event.on_clash {
                ClashPolicy::Refuse => return Err(reserved(name)),
                ClashPolicy::Prefix => {
                    router
                        .layout
                        .free_name(&cfg.event.clash_prefix, &name, &ev.payload)
                }
            }
        } else {
            name
        };
        item.insert(stored, value);
    }
    let item_size = size::item_size(&item);
    if item_size > size::MAX_ITEM_BYTES {
        return Err(RouteError::ItemTooLarge {
            size: item_size,
            limit: size::MAX_ITEM_BYTES,
        });
    }
    Ok(item)
}

fn nesting(path: &str, level: usize) -> Result<(), RouteError> {
    Ok(payload::check_nesting(&Path::Top(path), level)?)
}

fn node_to_attribute(
    node: &Node<'_>,
    path: &str,
    level: usize,
) -> Result<AttributeValue, RouteError> {
    match node {
        Node::Object(members) => object_to_attribute(members, path, level),
        Node::Raw(raw) => raw_to_attribute(raw, path, level),
    }
}

fn object_to_attribute(
    members: &[(Name<'_>, Node<'_>)],
    path: &str,
    level: usize,
) -> Result<AttributeValue, RouteError> {
    nesting(path, level)?;
    let mut map = HashMap::with_capacity(members.len());
    for (k, v) in members {
        let child = format!("{path}.{k}");
        if k.is_empty() {
            return Err(bad(&child, "has an empty name, which DynamoDB rejects"));
        }
        map.insert(k.to_string(), node_to_attribute(v, &child, level + 1)?);
    }
    Ok(AttributeValue::M(map))
}

fn raw_to_attribute(
    raw: &RawValue,
    path: &str,
    level: usize,
) -> Result<AttributeValue, RouteError> {
    let text = raw.get().trim_ascii();
    let parse_err = |e: serde_json::Error| bad(path, format!("cannot be read: {e}"));
    match raw::json_kind(raw) {
        "object" => {
            nesting(path, level)?;
            let members = raw::open_object(raw).map_err(parse_err)?;
            object_to_attribute(&members, path, level)
        }
        "array" => {
            nesting(path, level)?;
            let elems: Vec<&RawValue> = serde_json::from_str(text).map_err(parse_err)?;
            let mut list = Vec::with_capacity(elems.len());
            for (i, e) in elems.iter().enumerate() {
                list.push(raw_to_attribute(e, &format!("{path}[{i}]"), level + 1)?);
            }
            Ok(AttributeValue::L(list))
        }
        "string" => Ok(AttributeValue::S(
            serde_json::from_str(text).map_err(parse_err)?,
        )),
        "boolean" => Ok(AttributeValue::Bool(text == "true")),
        "null" => Ok(AttributeValue::Null(true)),
        _ => {
            check_number_by_string(text).map_err(|p| bad(path, p))?;
            Ok(AttributeValue::N(text.to_owned()))
        }
    }
}

/// `check_number` as it was, joining the digits into a String.
pub(super) fn check_number_by_string(text: &str) -> Result<usize, String> {
    payload::check_number_with(text, |int_part, frac_part| {
        let all: String = format!("{int_part}{frac_part}");
        let lead = all.len() - all.trim_start_matches('0').len();
        (
            lead,
            all.trim_start_matches('0').trim_end_matches('0').len(),
        )
    })
}
