//! KPL de-aggregation on arbitrary bytes, three ways per input:
//!
//! 1. the bytes as a Kinesis record: no magic means `Ok(None)`, magic without
//!    room for the digest means `TooShort`, anything else never panics;
//! 2. the bytes as an aggregate's protobuf body, with magic and a correct MD5
//!    added (random bytes never pass the digest check, so without this the
//!    parser behind it would never be reached): never panics, never reports
//!    a digest problem, and what it returns aggregates and de-aggregates back
//!    to the same records;
//! 3. the bytes as `arbitrary` user records (partition key, data):
//!    `aggregate` then `deaggregate` gives exactly those records back, with
//!    sub-sequence numbers 0, 1, 2, ...
#![no_main]

use arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use md5::{Digest, Md5};
use tidemark_consumer::testing::kpl::{self, KplError, MAGIC, UserRecord};

fn round_trips(records: &[(String, Vec<u8>)]) {
    let agg = kpl::aggregate(records);
    assert!(agg.starts_with(&MAGIC));
    let back = kpl::deaggregate(&agg)
        .unwrap_or_else(|e| panic!("our own aggregate is rejected: {e}"))
        .expect("our own aggregate is an aggregate");
    assert_eq!(back.len(), records.len());
    for (i, (r, (pk, data))) in back.iter().zip(records).enumerate() {
        assert_eq!(&r.partition_key, pk);
        assert_eq!(&r.data[..], &data[..]);
        assert_eq!(r.explicit_hash_key, None);
        assert_eq!(r.sub_sequence_number, i as u64);
    }
}

fn check_records(recs: &[UserRecord]) {
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(r.sub_sequence_number, i as u64);
    }
    let pairs: Vec<(String, Vec<u8>)> = recs
        .iter()
        .map(|r| (r.partition_key.clone(), r.data.to_vec()))
        .collect();
    round_trips(&pairs);
}

fuzz_target!(|data: &[u8]| {
    // 1. As a record.
    match kpl::deaggregate(data) {
        Ok(None) => assert!(!data.starts_with(&MAGIC)),
        Ok(Some(recs)) => {
            assert!(data.starts_with(&MAGIC));
            check_records(&recs);
        }
        Err(KplError::TooShort(n)) => {
            assert_eq!(n, data.len());
            assert!(data.starts_with(&MAGIC) && n < MAGIC.len() + 16);
        }
        Err(e) => {
            assert!(data.starts_with(&MAGIC) && data.len() >= MAGIC.len() + 16);
            assert!(!e.to_string().is_empty());
        }
    }

    // 2. As a body with a valid envelope.
    let mut agg = MAGIC.to_vec();
    agg.extend_from_slice(data);
    agg.extend_from_slice(&Md5::digest(data));
    match kpl::deaggregate(&agg) {
        Ok(Some(recs)) => check_records(&recs),
        Ok(None) => panic!("an aggregate with magic was not recognised"),
        Err(e @ (KplError::TooShort(_) | KplError::Md5Mismatch)) => {
            panic!("valid envelope rejected: {e}")
        }
        Err(KplError::Protobuf(_) | KplError::BadKeyIndex { .. }) => {}
    }

    // 3. As structured user records.
    let mut u = Unstructured::new(data);
    if let Ok(records) = u.arbitrary::<Vec<(String, Vec<u8>)>>() {
        round_trips(&records);
    }
});
