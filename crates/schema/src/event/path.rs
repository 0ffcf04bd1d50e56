//! Configured field paths (`meta.id`, `items[0].id`) and taking their
//! values out of a record's members.

use serde_json::value::RawValue;

use super::error::{EventConfigError, EventError};
use crate::raw::{Name, Node, Slot, json_kind, open_object};

/// One step of a field path with array indices.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Key(String),
    Index(usize),
}

/// A configured field: its full name and, if dotted, its path segments.
#[derive(Debug, Clone)]
pub(super) struct FieldPath {
    pub(super) name: String,
    parts: Vec<String>,
    /// The steps of a path with an array index (`items[0].id`). Such a path
    /// is read, not taken out: removing an element would renumber the rest.
    indexed: Option<Vec<Seg>>,
}

impl FieldPath {
    pub(super) fn new(key: &'static str, name: &str) -> Result<FieldPath, EventConfigError> {
        let invalid = || EventConfigError {
            field: key,
            problem: format!(
                "is {name:?}: give a field name, a dotted path like `meta.id`, or a path with array indices like `items[0].id`"
            ),
        };
        let parts: Vec<String> = name.split('.').map(str::to_owned).collect();
        if name.is_empty() || (parts.len() > 1 && parts.iter().any(String::is_empty)) {
            return Err(invalid());
        }
        if !name.contains('[') {
            return Ok(FieldPath {
                name: name.to_owned(),
                parts,
                indexed: None,
            });
        }
        let mut segs = Vec::new();
        for part in &parts {
            let (key_part, mut rest) = part.split_at(part.find('[').unwrap_or(part.len()));
            if key_part.is_empty() || key_part.contains(']') {
                return Err(invalid());
            }
            segs.push(Seg::Key(key_part.to_owned()));
            while !rest.is_empty() {
                let (index, after) = rest
                    .strip_prefix('[')
                    .and_then(|r| r.split_once(']'))
                    .ok_or_else(invalid)?;
                if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(invalid());
                }
                segs.push(Seg::Index(index.parse().map_err(|_| invalid())?));
                rest = after;
            }
        }
        Ok(FieldPath {
            name: name.to_owned(),
            parts,
            indexed: Some(segs),
        })
    }

    /// The top-level member a multi-step path goes through.
    fn first_step(&self) -> Option<&str> {
        match &self.indexed {
            Some(segs) => match segs.first() {
                Some(Seg::Key(k)) => Some(k),
                _ => None,
            },
            None if self.parts.len() > 1 => self.parts.first().map(String::as_str),
            None => None,
        }
    }
}

/// The names the record parse sets aside (see [`crate::raw::Split`]), in the
/// order entity, timestamp, event id. A name that begins another field's
/// dotted path (`meta` when another field is `meta.id`) stays a member: that
/// field's path may need to open it first, as it did before this parse.
pub(super) fn split_names(
    fields: [Option<&FieldPath>; 3],
    others: &[&FieldPath],
) -> [Option<String>; 3] {
    fields.map(|f| {
        let f = f?;
        let prefix_of_other = fields
            .iter()
            .flatten()
            .chain(others)
            .any(|g| g.first_step() == Some(f.name.as_str()));
        (!prefix_of_other).then(|| f.name.clone())
    })
}

/// Removes and returns the value at `path`; `Ok(None)` when absent.
/// `slot` is what the parse set aside for the field: `Some` if the record
/// had it (then it is not among `members`).
pub(super) fn take<'a>(
    members: &mut Vec<(Name<'a>, Node<'a>)>,
    slot: Slot<'a>,
    path: &FieldPath,
) -> Result<Option<Node<'a>>, EventError> {
    // A literal top-level key wins over the dotted interpretation.
    match slot {
        Slot::Found(raw) => return Ok(Some(Node::Raw(raw))),
        Slot::Absent => {}
        Slot::NotSplit => {
            if let Some(found) = remove_member(members, &path.name) {
                return Ok(Some(found));
            }
        }
    }
    if let Some(segs) = &path.indexed {
        return read_path(members, segs);
    }
    if path.parts.len() < 2 {
        return Ok(None);
    }
    take_path(members, &path.parts)
}

/// The value at a path with array indices, read without changing the
/// payload; `Ok(None)` when absent.
fn read_path<'a>(
    members: &[(Name<'a>, Node<'a>)],
    segs: &[Seg],
) -> Result<Option<Node<'a>>, EventError> {
    let find = |members: &[(Name<'a>, Node<'a>)], key: &str| {
        members
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    let Some((Seg::Key(first), rest)) = segs.split_first() else {
        return Ok(None);
    };
    let Some(mut node) = find(members, first) else {
        return Ok(None);
    };
    let invalid = |e: serde_json::Error| EventError::InvalidJson(e.to_string());
    for seg in rest {
        let next = match (seg, &node) {
            (Seg::Key(k), Node::Object(inner)) => find(inner, k),
            (Seg::Key(k), Node::Raw(raw)) if json_kind(raw) == "object" => {
                let raw: &'a RawValue = raw;
                find(&open_object(raw).map_err(invalid)?, k)
            }
            (Seg::Index(i), Node::Raw(raw)) if json_kind(raw) == "array" => {
                let raw: &'a RawValue = raw;
                let elems: Vec<&'a RawValue> = serde_json::from_str(raw.get()).map_err(invalid)?;
                elems.get(*i).map(|e| Node::Raw(e))
            }
            _ => None,
        };
        match next {
            Some(n) => node = n,
            None => return Ok(None),
        }
    }
    Ok(Some(node))
}

fn take_path<'a>(
    members: &mut Vec<(Name<'a>, Node<'a>)>,
    parts: &[String],
) -> Result<Option<Node<'a>>, EventError> {
    let Some((first, rest)) = parts.split_first() else {
        return Ok(None);
    };
    if rest.is_empty() {
        return Ok(remove_member(members, first));
    }
    let Some(idx) = members.iter().rposition(|(k, _)| k == first) else {
        return Ok(None);
    };
    let node = &mut members[idx].1;
    if let Node::Raw(raw) = node {
        if json_kind(raw) != "object" {
            return Ok(None);
        }
        let opened = open_object(raw).map_err(|e| EventError::InvalidJson(e.to_string()))?;
        *node = Node::Object(opened);
    }
    match node {
        Node::Object(inner) => take_path(inner, rest),
        Node::Raw(_) => Ok(None),
    }
}

/// Removes a member; with duplicate keys the last one counts (as in
/// serde_json's own maps) and the earlier ones are dropped with it.
pub(super) fn remove_member<'a>(
    members: &mut Vec<(Name<'a>, Node<'a>)>,
    name: &str,
) -> Option<Node<'a>> {
    let idx = members.iter().rposition(|(k, _)| k == name)?;
    let (_, node) = members.remove(idx);
    // Earlier copies are rare: look for them only before `idx`, so the
    // usual case is one pass over the members.
    if members[..idx].iter().any(|(k, _)| k == name) {
        members.retain(|(k, _)| k != name);
    }
    Some(node)
}
