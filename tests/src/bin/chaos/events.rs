//! What the producer sends: realistic IoT events (reusing `tidemark
//! produce`'s generator: many devices, one hot) and poison records of six
//! kinds, each carrying a marker the verifier finds in its dead letter.

use chrono::{DateTime, Duration as ChronoDuration, SecondsFormat, Utc};
use tidemark_schema::Reason;
use tidemark_worker::tools::produce::ProduceSpec;

/// Marker prefix of poison records, followed by the record's index.
pub(crate) const POISON_MARKER: &str = "chaos-poison-";

/// The six kinds of poison the issue asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum PoisonKind {
    /// Bytes that are not JSON.
    InvalidJson,
    /// No entity (`deviceId`) field.
    MissingEntity,
    /// A timestamp that does not parse.
    BadTimestamp,
    /// An event whose item is over DynamoDB's 400 KB.
    OverItemLimit,
    /// A timestamp far ahead of now.
    FarFuture,
    /// A timestamp whose period ended before retention.
    ExpiredPeriod,
}

impl PoisonKind {
    /// Every kind, in the order poison records cycle through them.
    pub(crate) const ALL: [PoisonKind; 6] = [
        PoisonKind::InvalidJson,
        PoisonKind::MissingEntity,
        PoisonKind::BadTimestamp,
        PoisonKind::OverItemLimit,
        PoisonKind::FarFuture,
        PoisonKind::ExpiredPeriod,
    ];

    /// The dead-letter reason the router gives this kind.
    pub(crate) fn reason(self) -> Reason {
        match self {
            PoisonKind::InvalidJson => Reason::InvalidJson,
            PoisonKind::MissingEntity => Reason::MissingField,
            PoisonKind::BadTimestamp => Reason::BadTimestamp,
            PoisonKind::OverItemLimit => Reason::ItemTooLarge,
            PoisonKind::FarFuture => Reason::FutureEvent,
            PoisonKind::ExpiredPeriod => Reason::ExpiredPeriod,
        }
    }
}

/// One record to put: a valid event or a poison record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Planned {
    /// Event `n` of the generator.
    Valid(u64),
    /// Poison record `n` of this kind.
    Poison(u64, PoisonKind),
}

/// Which of `count` records are poison (about `rate` of them, kinds in
/// turn), drawn from `seed`.
pub(crate) fn plan(count: u64, rate: f64, seed: u64) -> Vec<Planned> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut poisons = 0usize;
    (0..count)
        .map(|n| {
            if rng.f64() < rate {
                let kind = PoisonKind::ALL[poisons % PoisonKind::ALL.len()];
                poisons += 1;
                Planned::Poison(n, kind)
            } else {
                Planned::Valid(n)
            }
        })
        .collect()
}

/// The marker of poison record `n`.
pub(crate) fn marker(n: u64) -> String {
    format!("{POISON_MARKER}{n:010}")
}

/// Finds a poison marker in a payload and returns its record index.
pub(crate) fn find_marker(payload: &[u8]) -> Option<u64> {
    let m = POISON_MARKER.as_bytes();
    let at = payload.windows(m.len()).position(|w| w == m)? + m.len();
    let digits = payload.get(at..at + 10)?;
    std::str::from_utf8(digits).ok()?.parse().ok()
}

fn iso(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A valid event's JSON, stamped `at`.
pub(crate) fn valid(spec: &ProduceSpec, n: u64, at: DateTime<Utc>) -> Vec<u8> {
    // Serializing plain strings and numbers cannot fail.
    serde_json::to_vec(&spec.event(n, at)).unwrap_or_default()
}

/// A poison record's bytes, produced at `now`, for a schema keeping tables
/// `retention` after their period. The marker comes first, so it survives
/// the truncation of large dead-letter payloads.
pub(crate) fn poison(
    n: u64,
    kind: PoisonKind,
    now: DateTime<Utc>,
    retention: ChronoDuration,
) -> Vec<u8> {
    let m = marker(n);
    let event = |ts: String, extra: &str| {
        format!(
            r#"{{"poison":"{m}","deviceId":"device-0001","timestamp":"{ts}","eventId":"{m}"{extra}}}"#
        )
    };
    let text = match kind {
        // Cut off mid-object: not JSON.
        PoisonKind::InvalidJson => {
            format!(r#"{{"poison":"{m}","deviceId":"device-0001","timestamp":"#)
        }
        PoisonKind::MissingEntity => format!(
            r#"{{"poison":"{m}","timestamp":"{}","eventId":"{m}","temperature":21.5}}"#,
            iso(now)
        ),
        PoisonKind::BadTimestamp => event("yesterday at noon".into(), ""),
        PoisonKind::OverItemLimit => {
            // 410,000 bytes of payload: over the 409,600-byte item limit.
            let blob = "x".repeat(410_000);
            event(iso(now), &format!(r#","blob":"{blob}""#))
        }
        PoisonKind::FarFuture => event(iso(now + ChronoDuration::days(2)), ""),
        PoisonKind::ExpiredPeriod => event(iso(now - retention - ChronoDuration::days(2)), ""),
    };
    text.into_bytes()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tidemark_schema::RouteCache;
    use tidemark_schema::{Origin, Router, RouterConfig};

    #[test]
    fn plan_has_about_the_rate_and_every_kind() {
        let p = plan(100_000, 0.01, 7);
        let poison: Vec<_> = p
            .iter()
            .filter_map(|x| match x {
                Planned::Poison(_, k) => Some(*k),
                Planned::Valid(_) => None,
            })
            .collect();
        assert!((900..1100).contains(&poison.len()), "{}", poison.len());
        for k in PoisonKind::ALL {
            assert!(poison.iter().filter(|x| **x == k).count() >= 150);
        }
        assert_eq!(plan(1000, 0.01, 3), plan(1000, 0.01, 3));
    }

    #[test]
    fn every_poison_kind_routes_to_its_reason_and_keeps_its_marker() {
        let mut cfg = RouterConfig::with_prefix("chaos");
        cfg.retention = std::time::Duration::from_secs(7 * 86_400);
        let router = Router::new(cfg).unwrap();
        let origin = Origin::Kinesis {
            stream: "s".into(),
            shard_id: "shardId-000000000000".into(),
            sequence_number: "1".into(),
            sub_sequence_number: 0,
        };
        let now = Utc::now();
        for (i, kind) in PoisonKind::ALL.into_iter().enumerate() {
            let bytes = poison(i as u64 + 40, kind, now, ChronoDuration::days(7));
            let err = router
                .route(&bytes, &origin, 0, now, &mut RouteCache::default())
                .unwrap_err();
            assert_eq!(err.reason(), kind.reason(), "{kind:?}");
            assert_eq!(find_marker(&bytes), Some(i as u64 + 40));
        }
        let spec = ProduceSpec {
            devices: 10,
            count: 1,
            hot_factor: 2,
            seed: 1,
        };
        let ok = valid(&spec, 3, now);
        assert!(
            router
                .route(&ok, &origin, 0, now, &mut RouteCache::default())
                .is_ok()
        );
        assert_eq!(find_marker(&ok), None);
    }
}
