//! Building an event's item: the attributes every item carries, then the
//! payload as the `[event]` mapping keeps, renames and coerces it, encoded
//! as DynamoDB JSON into one buffer ([`WireItem`]) and sized by DynamoDB's
//! rules (those of [`size::item_size`]) on the way: no attribute map is
//! built, and payload text is copied where it can be.

use std::borrow::Cow;

use super::config::{RouterConfig, fixed_names};
use super::error::RouteError;
use super::oversize::{Offload, Oversize, OversizeS3, POINTER_ATTRIBUTES};
use crate::event::mapping::{self, ClashPolicy, Coerced, FieldType};
use crate::event::{EventError, Extractor, RawEvent};
use crate::key::ItemKey;
use crate::origin::SharedStr;
use crate::period;
use crate::raw::{Name, Node};
use crate::size;
use crate::wire::payload::{self, Dups, put_name, separate};
use crate::wire::{WireItem, write_str, write_tagged_str};

/// A record past its checks, before its item is built.
pub(super) struct Prepared<'a> {
    pub(super) ev: RawEvent<'a>,
    pub(super) table: SharedStr,
    pub(super) key: ItemKey,
    pub(super) iso: Cow<'a, str>,
    /// The table's recorded layouts, when not the config's.
    pub(super) layouts: Option<std::sync::Arc<[crate::strategy::KeyStrategy]>>,
}

/// The attributes every item carries, ready to write: their names (pk, sk,
/// entity, event id, timestamp, timestamp_ms, then the TTL), each already
/// encoded as `"name":`.
#[derive(Debug, Clone)]
pub(super) struct ItemLayout {
    names: [String; 6],
    /// `"name":` of each of `names`, written once here rather than escaped
    /// again for every item.
    heads: [Vec<u8>; 6],
    /// The TTL attribute's name and `"name":`, if configured.
    ttl: Option<(String, Vec<u8>)>,
    /// Data is kept this long after its event time (the TTL's value).
    retention_ms: i64,
    /// Output bytes of the attributes every item carries, less their values
    /// taken from the record or key: sizes each item's buffer.
    fixed_bytes: usize,
    /// Largest item stored as it is (`oversize_bytes`).
    limit: usize,
    /// With `oversize = "s3"`: where payloads go and what pointers keep.
    offload: Option<OffloadLayout>,
}

/// Output bytes a payload member adds beyond its text in the record (the
/// type tag and quotes), for sizing the buffer up front.
const PER_MEMBER_BYTES: usize = 12;

impl ItemLayout {
    /// The layout of a checked configuration.
    pub(super) fn new(config: &RouterConfig) -> ItemLayout {
        let names = fixed_names(config).map(str::to_owned);
        let ttl_name = config.ttl_attribute.as_deref();
        let fixed_bytes = 64
            + names
                .iter()
                .map(String::as_str)
                .chain(ttl_name)
                .map(|n| n.len() + 16)
                .sum::<usize>();
        let head = |name: &str| {
            let mut head = Vec::with_capacity(name.len() + 3);
            write_str(&mut head, name);
            head.push(b':');
            head
        };
        let offload = match (config.oversize, &config.oversize_s3) {
            (Oversize::S3, Some(s3)) => Some(OffloadLayout {
                s3: s3.clone(),
                heads: POINTER_ATTRIBUTES.map(head),
            }),
            _ => None,
        };
        ItemLayout {
            heads: names.each_ref().map(|n| head(n)),
            limit: config.oversize_bytes,
            offload,
            ttl: ttl_name.map(|n| (n.to_owned(), head(n))),
            names,
            retention_ms: period::duration_ms(config.retention),
            fixed_bytes,
        }
    }

    /// Whether `name` is one of the attributes every item carries.
    fn is_fixed_name(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name)
            || self.ttl.as_ref().is_some_and(|(t, _)| t == name)
            || (self.offload.is_some() && POINTER_ATTRIBUTES.contains(&name))
    }

    /// `prefix` + `name`, prefixed again while that is taken by an item
    /// attribute or another payload field. Each round makes the name longer
    /// than every name it could meet again, so it ends.
    pub(super) fn free_name(
        &self,
        prefix: &str,
        name: &str,
        payload: &[(Name<'_>, Node<'_>)],
    ) -> String {
        let mut candidate = format!("{prefix}{name}");
        while self.is_fixed_name(&candidate) || payload.iter().any(|(k, _)| *k == candidate) {
            candidate.insert_str(0, prefix);
        }
        candidate
    }

    /// The TTL attribute's value for an event at `ts` (epoch seconds).
    pub(super) fn expires(&self, ts: i64) -> i64 {
        ts.div_euclid(1000).saturating_add(self.retention_ms / 1000)
    }

    /// Encodes the item of `p` under `key`, with the payload as `extractor`
    /// maps it; `data` is the event's bytes (the payload's text is at most
    /// that). An item over `oversize_bytes` is refused, or with
    /// `oversize = "s3"` becomes a pointer item naming the object `data`
    /// goes to.
    pub(super) fn encode(
        &self,
        p: &Prepared<'_>,
        key: &ItemKey,
        data: &[u8],
        extractor: &Extractor,
    ) -> Result<(WireItem, Option<Offload>), RouteError> {
        let ev = &p.ev;
        // Payload text is at most the record's; this is usually the final size.
        let mut out = Vec::with_capacity(
            self.fixed_bytes
                + data.len()
                + key.pk().len()
                + key.sk().len()
                + ev.event_id.len()
                + PER_MEMBER_BYTES * ev.payload.len(),
        );
        let mut size = self.put_fixed(&mut out, p, key);
        let names = Dups::new(&ev.payload);
        for i in 0..ev.payload.len() {
            size += self.put_field(&mut out, i, &ev.payload, &names, extractor)?;
        }
        out.push(b'}');

        if size <= self.limit {
            return Ok((WireItem::from_parts(out, size), None));
        }
        let Some(offload) = &self.offload else {
            return Err(RouteError::ItemTooLarge {
                size,
                limit: self.limit,
            });
        };
        // Every field was encoded once above, so none can fail below.
        let object = Offload::of(data, &offload.s3);
        out.clear();
        let mut size = self.put_fixed(&mut out, p, key);
        let [url, bytes, sha] = &offload.heads;
        let [url_name, bytes_name, sha_name] = POINTER_ATTRIBUTES;
        let location = object.url();
        put_head(&mut out, url);
        write_tagged_str(&mut out, "S", &location);
        put_head(&mut out, bytes);
        let n = put_int(&mut out, i64::try_from(object.bytes).unwrap_or(i64::MAX));
        put_head(&mut out, sha);
        write_tagged_str(&mut out, "S", &object.sha256);
        size += url_name.len()
            + location.len()
            + bytes_name.len()
            + n
            + sha_name.len()
            + object.sha256.len();
        let mut budget = offload.s3.projection_bytes;
        for i in offload.projection(&ev.payload) {
            let mark = out.len();
            let field = self.put_field(&mut out, i, &ev.payload, &names, extractor)?;
            if field > budget {
                out.truncate(mark);
            } else {
                budget -= field;
                size += field;
            }
        }
        out.push(b'}');
        if size > self.limit {
            return Err(RouteError::ItemTooLarge {
                size,
                limit: self.limit,
            });
        }
        Ok((WireItem::from_parts(out, size), Some(object)))
    }

    /// Opens the item and appends the attributes every item carries;
    /// returns their size.
    fn put_fixed(&self, out: &mut Vec<u8>, p: &Prepared<'_>, key: &ItemKey) -> usize {
        let ev = &p.ev;
        let ts = ev.timestamp_ms;
        out.push(b'{');
        let mut size = 0;
        let [pk, sk, entity, event_id, timestamp, timestamp_ms] = &self.heads;
        let [
            pk_name,
            sk_name,
            entity_name,
            event_id_name,
            timestamp_name,
            timestamp_ms_name,
        ] = &self.names;
        for (head, name, value) in [
            (pk, pk_name, key.pk()),
            (sk, sk_name, key.sk()),
            (entity, entity_name, &ev.entity_id),
            (event_id, event_id_name, &ev.event_id),
            (timestamp, timestamp_name, &p.iso),
        ] {
            put_head(out, head);
            write_tagged_str(out, "S", value);
            size += name.len() + value.len();
        }
        put_head(out, timestamp_ms);
        size += timestamp_ms_name.len() + put_int(out, ts);
        if let Some((ttl, head)) = &self.ttl {
            let expires = self.expires(ts);
            put_head(out, head);
            size += ttl.len() + put_int(out, expires);
        }
        size
    }

    /// Appends payload field `i` as the mapping keeps, renames and coerces
    /// it; returns its size (0 for a field not kept), or why it cannot be
    /// stored.
    fn put_field(
        &self,
        out: &mut Vec<u8>,
        i: usize,
        payload: &[(Name<'_>, Node<'_>)],
        names: &Dups,
        extractor: &Extractor,
    ) -> Result<usize, RouteError> {
        let Some((name, node)) = payload.get(i) else {
            return Ok(0);
        };
        let rule = extractor.rules().map(|r| r.get(name));
        if rule.is_some_and(|r| !r.keep) {
            return Ok(0);
        }
        let reserved = || {
            RouteError::BadAttribute {
                field: name.to_string(),
                problem: "has the name of a reserved item attribute; rename it in the producer, change `attributes`, or set [event] on_clash = \"prefix\"".into(),
            }
        };
        // A top-level duplicate meets its earlier copy like a reserved name.
        if names.earlier(i) {
            return Err(reserved());
        }
        if name.is_empty() {
            return Err(RouteError::BadAttribute {
                field: name.to_string(),
                problem: "has an empty name, which DynamoDB rejects".into(),
            });
        }
        let stored: Cow<'_, str> = if self.is_fixed_name(name) {
            match extractor.clash() {
                (ClashPolicy::Refuse, _) => return Err(reserved()),
                (ClashPolicy::Prefix, prefix) => Cow::Owned(self.free_name(prefix, name, payload)),
            }
        } else {
            Cow::Borrowed(name.as_ref())
        };
        match &stored {
            Cow::Borrowed(_) => put_name(out, name),
            Cow::Owned(n) => {
                separate(out);
                write_str(out, n);
                out.push(b':');
            }
        }
        let value_size = match rule.and_then(|r| r.ty) {
            None => payload::write_field(out, node, name)?,
            Some(ty) => write_coerced(out, node, ty, name)?,
        };
        Ok(stored.len() + value_size)
    }
}

/// What `oversize = "s3"` adds to the layout.
#[derive(Debug, Clone)]
struct OffloadLayout {
    s3: OversizeS3,
    /// `"name":` of each of [`POINTER_ATTRIBUTES`].
    heads: [Vec<u8>; 3],
}

impl OffloadLayout {
    /// The payload fields a pointer item may keep, by index, in order: the
    /// configured ones that the event has, else every one.
    fn projection(&self, payload: &[(Name<'_>, Node<'_>)]) -> Vec<usize> {
        match &self.s3.fields {
            None => (0..payload.len()).collect(),
            Some(fields) => fields
                .iter()
                .filter_map(|f| payload.iter().position(|(n, _)| n == f.as_str()))
                .collect(),
        }
    }
}

/// Appends a payload value coerced to `ty` and returns its size.
fn write_coerced(
    out: &mut Vec<u8>,
    node: &Node<'_>,
    ty: FieldType,
    name: &str,
) -> Result<usize, RouteError> {
    match mapping::coerce(node, ty) {
        Ok(Coerced::Same) => Ok(payload::write_field(out, node, name)?),
        Ok(Coerced::Number(text)) => Ok(payload::write_number(out, &text, name)?),
        Ok(Coerced::Str(text)) => {
            out.extend_from_slice(b"{\"S\":");
            write_str(out, &text);
            out.push(b'}');
            Ok(text.len())
        }
        Ok(Coerced::Bool(b)) => {
            out.extend_from_slice(if b {
                b"{\"BOOL\":true}"
            } else {
                b"{\"BOOL\":false}"
            });
            Ok(1)
        }
        Err(problem) => Err(RouteError::Event(EventError::Coercion {
            field: name.to_owned(),
            problem,
        })),
    }
}

/// Appends an encoded `"name":`, after a comma unless it opens its object.
fn put_head(out: &mut Vec<u8>, head: &[u8]) {
    separate(out);
    out.extend_from_slice(head);
}

/// Appends `{"N":"<n>"}` and returns the number's size.
fn put_int(out: &mut Vec<u8>, n: i64) -> usize {
    // itoa rather than write!: no formatting machinery per number.
    let mut digits = itoa::Buffer::new();
    let text = digits.format(n);
    out.extend_from_slice(b"{\"N\":\"");
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(b"\"}");
    size::int_text_size(text)
}
