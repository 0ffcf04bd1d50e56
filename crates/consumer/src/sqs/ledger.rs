//! Bookkeeping of the messages in flight: pure (time is a parameter), so the
//! delete, heartbeat and FIFO rules are tested without SQS.
//!
//! A message is `Waiting` (FIFO: an earlier message of its group is not yet
//! acknowledged, so its records are held back), `Started` (its records are
//! with the pipeline), `Done` (every record acknowledged, delete queued) or
//! `Deleting` (in a DeleteMessageBatch call). It leaves the ledger when
//! deleted, released (made visible again) or given up.

use std::collections::{HashMap, VecDeque};

use tokio::time::{Duration, Instant};

use crate::record::Record;

/// Where a message is in its life.
#[derive(Debug)]
pub(super) enum Phase {
    /// Held back behind an earlier message of its FIFO group.
    Waiting(Vec<Record>),
    /// Records handed to the pipeline, `Entry::unacked` still to come.
    Started,
    /// Fully acknowledged; waiting for its delete call.
    Done,
    /// In a DeleteMessageBatch call.
    Deleting,
}

/// One message in flight.
#[derive(Debug)]
pub(super) struct Entry {
    /// SQS message id.
    pub message_id: String,
    /// Receipt handle of this receive (needed to delete or change visibility).
    pub receipt: String,
    /// FIFO message group (only set for FIFO queues).
    pub group: Option<String>,
    /// Records not yet acknowledged.
    pub unacked: usize,
    /// Life stage.
    pub phase: Phase,
    /// A lower bound of when SQS makes the message visible again.
    pub visible_until: Instant,
    /// When it was received (for `max_processing_time`).
    pub received_at: Instant,
    /// ApproximateReceiveCount of this receive (1 on first delivery).
    pub receive_count: u32,
    /// Bytes its records hold (decoded, split) until it is done.
    pub bytes: u64,
}

impl Entry {
    fn unfinished(&self) -> bool {
        matches!(self.phase, Phase::Waiting(_) | Phase::Started)
    }
}

/// A message leaving the ledger without being deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Released {
    /// Ledger id.
    pub id: u64,
    /// Receipt handle, to change its visibility.
    pub receipt: String,
    /// ApproximateReceiveCount, for the back-off.
    pub receive_count: u32,
}

/// What admitting a message means for its records.
#[derive(Debug)]
pub(super) enum Admit {
    /// Hand these records to the pipeline now.
    Start(Vec<Record>),
    /// Held back behind its group; they start when the predecessor is done.
    Wait,
    /// No records at all (an empty array): delete it now.
    Done,
}

/// What an acknowledgement changed.
#[derive(Debug, Default)]
pub(super) struct AckEffect {
    /// The message is fully acknowledged: queue its delete.
    pub done: Option<u64>,
    /// The next message of the same FIFO group may start: its records.
    pub start: Option<Vec<Record>>,
}

/// All messages in flight.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    next_id: u64,
    entries: HashMap<u64, Entry>,
    /// FIFO groups: ids in receive order; the front one is started.
    groups: HashMap<String, VecDeque<u64>>,
    /// Shutdown began: held-back messages no longer start.
    draining: bool,
    /// Sum of the unfinished entries' bytes.
    bytes: u64,
}

impl Ledger {
    /// A fresh id for a message about to be admitted (its records' serial).
    pub(super) fn reserve_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Messages in the ledger.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Bytes the unfinished messages' records hold.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// True when no message is in flight.
    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry of `id`, if still in flight.
    pub(super) fn get(&self, id: u64) -> Option<&Entry> {
        self.entries.get(&id)
    }

    /// Admits message `id` (from [`Ledger::reserve_id`]) with its records.
    /// `entry.phase` and `entry.unacked` are set here.
    pub(super) fn admit(&mut self, id: u64, mut entry: Entry, records: Vec<Record>) -> Admit {
        entry.unacked = records.len();
        self.bytes += entry.bytes;
        let blocked = match &entry.group {
            Some(g) => {
                let queue = self.groups.entry(g.clone()).or_default();
                queue.push_back(id);
                queue.len() > 1
            }
            None => false,
        };
        if blocked {
            entry.phase = Phase::Waiting(records);
            self.entries.insert(id, entry);
            return Admit::Wait;
        }
        entry.phase = Phase::Started;
        let empty = records.is_empty();
        self.entries.insert(id, entry);
        if empty {
            // Nothing to store; its group successor (if any arrives) must not
            // wait for it.
            let _ = self.complete(id);
            Admit::Done
        } else {
            Admit::Start(records)
        }
    }

    /// One record of message `id` is acknowledged. Unknown ids (messages
    /// already released or given up) are ignored.
    pub(super) fn ack(&mut self, id: u64) -> AckEffect {
        let Some(e) = self.entries.get_mut(&id) else {
            return AckEffect::default();
        };
        if !matches!(e.phase, Phase::Started) {
            return AckEffect::default();
        }
        e.unacked = e.unacked.saturating_sub(1);
        if e.unacked > 0 {
            return AckEffect::default();
        }
        AckEffect {
            done: Some(id),
            start: self.complete(id),
        }
    }

    /// Marks `id` done and starts its group successor, if any.
    fn complete(&mut self, id: u64) -> Option<Vec<Record>> {
        let e = self.entries.get_mut(&id)?;
        e.phase = Phase::Done;
        // Its records are all acknowledged: their bytes are free.
        self.bytes -= std::mem::take(&mut e.bytes);
        let group = e.group.clone()?;
        let queue = self.groups.get_mut(&group)?;
        queue.retain(|&x| x != id);
        let Some(&next) = queue.front() else {
            self.groups.remove(&group);
            return None;
        };
        if self.draining {
            return None;
        }
        let n = self.entries.get_mut(&next)?;
        match std::mem::replace(&mut n.phase, Phase::Started) {
            Phase::Waiting(records) if records.is_empty() => {
                // An empty successor completes at once and passes the turn on.
                self.complete(next)
            }
            Phase::Waiting(records) => Some(records),
            other => {
                n.phase = other;
                None
            }
        }
    }

    /// Ids of messages that are `Done` but not yet `Deleting`, marked
    /// `Deleting`, with their receipts.
    pub(super) fn take_for_delete(&mut self, id: u64) -> Option<String> {
        let e = self.entries.get_mut(&id)?;
        if !matches!(e.phase, Phase::Done) {
            return None;
        }
        e.phase = Phase::Deleting;
        Some(e.receipt.clone())
    }

    /// A failed delete goes back to `Done` (to be retried).
    pub(super) fn delete_failed(&mut self, id: u64) {
        if let Some(e) = self.entries.get_mut(&id)
            && matches!(e.phase, Phase::Deleting)
        {
            e.phase = Phase::Done;
        }
    }

    /// Removes a deleted (or undeletable) message. True if it was there.
    pub(super) fn remove(&mut self, id: u64) -> bool {
        let Some(e) = self.entries.remove(&id) else {
            return false;
        };
        self.bytes -= e.bytes;
        if let Some(g) = e.group
            && let Some(q) = self.groups.get_mut(&g)
        {
            q.retain(|&x| x != id);
            if q.is_empty() {
                self.groups.remove(&g);
            }
        }
        true
    }

    /// Messages whose visibility ends within `margin` of `now`, with receipts.
    pub(super) fn due_for_heartbeat(&self, now: Instant, margin: Duration) -> Vec<(u64, String)> {
        let mut due: Vec<(u64, String)> = self
            .entries
            .iter()
            .filter(|(_, e)| e.visible_until <= now + margin)
            .map(|(&id, e)| (id, e.receipt.clone()))
            .collect();
        due.sort_unstable_by_key(|(id, _)| *id);
        due
    }

    /// Records a visibility extension.
    pub(super) fn extended(&mut self, id: u64, visible_until: Instant) {
        if let Some(e) = self.entries.get_mut(&id) {
            e.visible_until = e.visible_until.max(visible_until);
        }
    }

    /// Removes the unfinished messages `ids`, and every message held back
    /// behind them in their FIFO groups (starting those would break the
    /// group's order once the removed ones come back).
    pub(super) fn abandon(&mut self, ids: &[u64]) -> Vec<Released> {
        let mut out = Vec::new();
        for &id in ids {
            let Some(e) = self.entries.get(&id) else {
                continue;
            };
            if !e.unfinished() {
                continue;
            }
            let mut victims = vec![id];
            if let Some(q) = e.group.as_ref().and_then(|g| self.groups.get(g)) {
                let pos = q.iter().position(|&x| x == id).unwrap_or(q.len());
                victims.extend(q.iter().skip(pos + 1).copied());
            }
            for v in victims {
                let still = self.entries.get(&v).is_some_and(Entry::unfinished);
                if !still {
                    continue;
                }
                if let Some(e) = self.entries.get(&v) {
                    out.push(Released {
                        id: v,
                        receipt: e.receipt.clone(),
                        receive_count: e.receive_count,
                    });
                }
                self.remove(v);
            }
        }
        out
    }

    /// Unfinished messages received `max_processing` or longer before `now`:
    /// given up (removed, with their held-back group successors).
    pub(super) fn stale(&mut self, now: Instant, max_processing: Duration) -> Vec<Released> {
        let mut ids: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, e)| e.unfinished() && e.received_at + max_processing <= now)
            .map(|(&id, _)| id)
            .collect();
        ids.sort_unstable();
        self.abandon(&ids)
    }

    /// Shutdown: no held-back message starts any more; those held back now
    /// are removed and returned (to be made visible at once).
    pub(super) fn drain_unstarted(&mut self) -> Vec<Released> {
        self.draining = true;
        let mut ids: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, e)| matches!(e.phase, Phase::Waiting(_)))
            .map(|(&id, _)| id)
            .collect();
        ids.sort_unstable();
        self.abandon(&ids)
    }

    /// Shutdown after the grace period: every unfinished message, removed.
    pub(super) fn drain_unfinished(&mut self) -> Vec<Released> {
        self.draining = true;
        let mut ids: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, e)| e.unfinished())
            .map(|(&id, _)| id)
            .collect();
        ids.sort_unstable();
        self.abandon(&ids)
    }

    /// Ids of messages that are done and not in a delete call.
    pub(super) fn done_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, e)| matches!(e.phase, Phase::Done))
            .map(|(&id, _)| id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Drops everything (breaks the record/ack reference cycle at the end).
    pub(super) fn clear(&mut self) {
        self.entries.clear();
        self.groups.clear();
        self.bytes = 0;
    }
}

#[cfg(test)]
pub(in crate::sqs) mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use tidemark_schema::Origin;

    use super::*;
    use crate::record::{Ack, AckTarget};

    struct Nobody;
    impl AckTarget for Nobody {
        fn ack(&self, _serial: u64) {}
    }

    pub(in crate::sqs) fn records(id: u64, message: &str, n: usize) -> Vec<Record> {
        (0..n)
            .map(|i| Record {
                origin: Origin::Sqs {
                    queue: "q".into(),
                    message_id: message.into(),
                    index: i as u32,
                },
                partition_key: message.into(),
                data: Bytes::from(format!("{{\"i\":{i}}}")),
                arrival_ms: 0,
                ack: Ack::new(Arc::new(Nobody), id),
                defect: None,
                inner: None,
            })
            .collect()
    }

    pub(in crate::sqs) fn entry(message: &str, group: Option<&str>, now: Instant) -> Entry {
        Entry {
            message_id: message.into(),
            receipt: format!("r-{message}"),
            group: group.map(str::to_string),
            unacked: 0,
            phase: Phase::Started,
            visible_until: now + Duration::from_secs(30),
            received_at: now,
            receive_count: 1,
            bytes: 0,
        }
    }

    /// Admits `message` with `n` records; returns its id and the admission.
    fn admit(l: &mut Ledger, message: &str, group: Option<&str>, n: usize) -> (u64, Admit) {
        let now = Instant::now();
        let id = l.reserve_id();
        let a = l.admit(id, entry(message, group, now), records(id, message, n));
        (id, a)
    }

    fn messages_of(records: &[Record]) -> Vec<String> {
        records
            .iter()
            .map(|r| match &r.origin {
                Origin::Sqs { message_id, .. } => message_id.clone(),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn done_only_after_every_record_is_acknowledged() {
        let mut l = Ledger::default();
        let (id, a) = admit(&mut l, "m", None, 3);
        assert!(matches!(a, Admit::Start(ref r) if r.len() == 3));
        assert!(l.ack(id).done.is_none());
        assert!(l.ack(id).done.is_none());
        assert!(
            l.take_for_delete(id).is_none(),
            "not deletable before the last ack"
        );
        assert_eq!(l.ack(id).done, Some(id));
        assert_eq!(l.take_for_delete(id).as_deref(), Some("r-m"));
        assert!(l.take_for_delete(id).is_none(), "one delete call at a time");
        l.delete_failed(id);
        assert_eq!(l.done_ids(), vec![id], "a failed delete is retried");
        assert!(l.remove(id));
        assert!(l.is_empty());
    }

    #[test]
    fn fifo_group_starts_one_message_at_a_time_in_order() {
        let mut l = Ledger::default();
        let (a, first) = admit(&mut l, "a", Some("g"), 2);
        let (b, second) = admit(&mut l, "b", Some("g"), 1);
        let (c, third) = admit(&mut l, "c", Some("g"), 1);
        let (x, other) = admit(&mut l, "x", Some("h"), 1);
        assert!(matches!(first, Admit::Start(_)));
        assert!(matches!(second, Admit::Wait));
        assert!(matches!(third, Admit::Wait));
        assert!(
            matches!(other, Admit::Start(_)),
            "other groups are independent"
        );
        assert!(l.ack(b).done.is_none(), "a waiting message cannot be acked");
        assert!(l.ack(a).start.is_none());
        let e = l.ack(a);
        assert_eq!(e.done, Some(a));
        assert_eq!(messages_of(&e.start.unwrap()), vec!["b"]);
        let e = l.ack(b);
        assert_eq!(messages_of(&e.start.unwrap()), vec!["c"]);
        assert_eq!(l.ack(x).done, Some(x));
        assert_eq!(l.ack(c).done, Some(c));
        assert!(l.groups.is_empty());
    }

    #[test]
    fn empty_messages_complete_at_once_and_pass_the_turn() {
        let mut l = Ledger::default();
        let (e0, a) = admit(&mut l, "empty", None, 0);
        assert!(matches!(a, Admit::Done));
        assert_eq!(l.done_ids(), vec![e0]);
        let (head, _) = admit(&mut l, "a", Some("g"), 1);
        let (_, w) = admit(&mut l, "empty-g", Some("g"), 0);
        assert!(matches!(w, Admit::Wait));
        let (_, w) = admit(&mut l, "c", Some("g"), 1);
        assert!(matches!(w, Admit::Wait));
        let e = l.ack(head);
        assert_eq!(
            messages_of(&e.start.unwrap()),
            vec!["c"],
            "the empty one is skipped"
        );
        assert_eq!(l.done_ids().len(), 3);
    }

    #[test]
    fn heartbeat_picks_messages_near_their_visibility_end() {
        let mut l = Ledger::default();
        let (a, _) = admit(&mut l, "a", None, 1);
        let now = Instant::now();
        let margin = Duration::from_secs(10);
        assert!(l.due_for_heartbeat(now, margin).is_empty());
        let later = now + Duration::from_secs(21);
        assert_eq!(
            l.due_for_heartbeat(later, margin),
            vec![(a, "r-a".to_string())]
        );
        l.extended(a, later + Duration::from_secs(30));
        assert!(l.due_for_heartbeat(later, margin).is_empty());
        // A done message awaiting deletion is kept invisible too.
        l.ack(a);
        let much_later = later + Duration::from_secs(25);
        assert_eq!(l.due_for_heartbeat(much_later, margin).len(), 1);
    }

    #[test]
    fn stale_messages_are_given_up_with_their_waiting_successors() {
        let mut l = Ledger::default();
        let (a, _) = admit(&mut l, "a", Some("g"), 1);
        let (b, _) = admit(&mut l, "b", Some("g"), 1);
        let (d, _) = admit(&mut l, "d", None, 1);
        l.ack(d);
        let now = Instant::now();
        assert!(l.stale(now, Duration::from_secs(60)).is_empty());
        let gone = l.stale(now + Duration::from_secs(61), Duration::from_secs(60));
        let ids: Vec<u64> = gone.iter().map(|r| r.id).collect();
        assert_eq!(ids, vec![a, b]);
        assert_eq!(l.len(), 1, "the done message stays for its delete");
        let e = l.ack(a);
        assert!(
            e.done.is_none() && e.start.is_none(),
            "late acks are ignored"
        );
    }

    #[test]
    fn shutdown_releases_unstarted_then_unfinished() {
        let mut l = Ledger::default();
        let (a, _) = admit(&mut l, "a", Some("g"), 1);
        let (b, _) = admit(&mut l, "b", Some("g"), 1);
        let (c, _) = admit(&mut l, "c", None, 2);
        let (d, _) = admit(&mut l, "d", None, 1);
        l.ack(d);
        let unstarted: Vec<u64> = l.drain_unstarted().iter().map(|r| r.id).collect();
        assert_eq!(unstarted, vec![b]);
        let e = l.ack(a);
        assert_eq!(e.done, Some(a));
        assert!(e.start.is_none(), "nothing starts while draining");
        let left: Vec<u64> = l.drain_unfinished().iter().map(|r| r.id).collect();
        assert_eq!(left, vec![c]);
        let mut done = l.done_ids();
        done.sort_unstable();
        assert_eq!(done, vec![a, d]);
    }
}
