//! Shard discovery: ListShards, then a lease for every shard that has
//! none, parents first, never re-creating a finished one the cleanup
//! deleted.

use std::collections::HashSet;

use aws_sdk_kinesis::types::Shard;
use tracing::{info, warn};

use crate::error::{ConsumerError, ErrorClass};
use crate::kinesis::api::list_shards;
use crate::kinesis::cleanup;
use crate::kinesis::config::InitialPosition;
use crate::kinesis::lease::item::{Checkpoint, Lease};
use crate::kinesis::run::StreamRun;

/// ListShards, then a lease for every shard that has none, parents first.
/// `existing` is a listing taken just before; without one the table is
/// scanned (consistently). Returns how many leases were created.
pub(crate) async fn sync_shards(
    stream: &StreamRun,
    existing: Option<&[Lease]>,
) -> Result<usize, ConsumerError> {
    let shards = list_shards(&stream.kinesis, &stream.config).await?;
    let scanned;
    let existing = match existing {
        Some(e) => e,
        None => {
            scanned = stream.table.list().await?;
            &scanned
        }
    };
    let mut new = new_leases(&shards, existing, &stream.config.initial_position);
    // Finished shards whose leases the cleanup deleted stay deleted.
    let done = cleanup::done_ancestors(&shards, existing);
    new.retain(|l| !done.contains(&l.key));
    let mut created = 0;
    for l in new {
        if stream.table.create_lease(&l).await? {
            created += 1;
            info!(shard = %l.key, checkpoint = ?l.checkpoint, "lease created");
        }
    }
    Ok(created)
}

/// A failed shard sync: the stream may be momentarily unreachable (retry
/// next pass), but a stream missing at start is fatal (`Some`).
pub(crate) fn sync_failed(
    e: ConsumerError,
    holds_none: bool,
    failures: &mut u32,
) -> Option<ConsumerError> {
    *failures += 1;
    warn!(error = %e, "shard sync failed");
    let fatal = matches!(&e, ConsumerError::Aws(a) if a.class == ErrorClass::NotFound || a.class == ErrorClass::Fatal);
    (fatal && holds_none && *failures >= 3).then_some(e)
}

/// The leases to create for shards that have none (pure; parents first).
///
/// On a fresh table every shard gets the configured initial position, except
/// that with `LATEST` closed shards are marked `SHARD_END` (nothing new will
/// ever arrive in them). Later, a shard whose parent is known starts at
/// `TRIM_HORIZON`: a child of a shard we read must be read in full.
pub(crate) fn new_leases(
    shards: &[Shard],
    existing: &[Lease],
    initial: &InitialPosition,
) -> Vec<Lease> {
    let have: HashSet<&str> = existing.iter().map(|l| l.key.as_str()).collect();
    let listed: HashSet<&str> = shards.iter().map(|s| s.shard_id()).collect();
    let fresh = existing.is_empty();
    let mut out: Vec<Lease> = shards
        .iter()
        .filter(|s| !have.contains(s.shard_id()))
        .map(|s| {
            let parents: Vec<String> = [s.parent_shard_id(), s.adjacent_parent_shard_id()]
                .into_iter()
                .flatten()
                .map(str::to_string)
                .collect();
            let closed = s
                .sequence_number_range()
                .is_some_and(|r| r.ending_sequence_number().is_some());
            let parent_known = parents
                .iter()
                .any(|p| have.contains(p.as_str()) || listed.contains(p.as_str()));
            let checkpoint = if !fresh && parent_known {
                Checkpoint::TrimHorizon
            } else {
                match initial {
                    InitialPosition::TrimHorizon => Checkpoint::TrimHorizon,
                    InitialPosition::Latest if closed => Checkpoint::ShardEnd,
                    InitialPosition::Latest => Checkpoint::Latest,
                    InitialPosition::AtTimestamp { .. } => Checkpoint::AtTimestamp,
                }
            };
            let mut l = Lease::new(s.shard_id(), checkpoint, parents);
            l.hash_range = s.hash_key_range().map(|h| {
                (
                    h.starting_hash_key().to_string(),
                    h.ending_hash_key().to_string(),
                )
            });
            l
        })
        .collect();
    // Shard ids grow with creation, so parents sort before their children and
    // no other worker can ever see a child lease without its parent's.
    out.sort_by(|a, b| a.key.len().cmp(&b.key.len()).then(a.key.cmp(&b.key)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_kinesis::types::{HashKeyRange, SequenceNumberRange};

    fn shard(id: &str, parents: &[&str], closed: bool) -> Shard {
        let mut range = SequenceNumberRange::builder().starting_sequence_number("1");
        if closed {
            range = range.ending_sequence_number("99");
        }
        Shard::builder()
            .shard_id(id)
            .set_parent_shard_id(parents.first().map(|p| p.to_string()))
            .set_adjacent_parent_shard_id(parents.get(1).map(|p| p.to_string()))
            .hash_key_range(
                HashKeyRange::builder()
                    .starting_hash_key("0")
                    .ending_hash_key("10")
                    .build()
                    .unwrap(),
            )
            .sequence_number_range(range.build().unwrap())
            .build()
            .unwrap()
    }

    #[test]
    fn new_leases_start_positions_and_order() {
        let shards = vec![
            shard(
                "shardId-000000000002",
                &["shardId-000000000000", "shardId-000000000001"],
                false,
            ),
            shard("shardId-000000000000", &[], true),
            shard("shardId-000000000001", &[], true),
        ];
        // Fresh table, TRIM_HORIZON: everything from the start, parents first.
        let l = new_leases(&shards, &[], &InitialPosition::TrimHorizon);
        let keys: Vec<_> = l.iter().map(|l| l.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "shardId-000000000000",
                "shardId-000000000001",
                "shardId-000000000002"
            ]
        );
        assert!(l.iter().all(|l| l.checkpoint == Checkpoint::TrimHorizon));
        assert_eq!(l[2].parents.len(), 2);
        assert_eq!(l[2].hash_range, Some(("0".into(), "10".into())));
        // Fresh table, LATEST: closed shards are done, open ones start at
        // the tip (only new data, as asked).
        let l = new_leases(&shards, &[], &InitialPosition::Latest);
        assert_eq!(l[0].checkpoint, Checkpoint::ShardEnd);
        assert_eq!(l[2].checkpoint, Checkpoint::Latest);
        // Existing table: a new child of a known parent is read in full
        // whatever the initial position.
        let existing = vec![Lease::new(
            "shardId-000000000000",
            Checkpoint::Latest,
            vec![],
        )];
        let l = new_leases(&shards[..2], &existing, &InitialPosition::Latest);
        assert_eq!(l.len(), 1, "only the missing lease");
        assert_eq!(l[0].key, "shardId-000000000002");
        assert_eq!(l[0].checkpoint, Checkpoint::TrimHorizon);
    }
}
