use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use prost::Message as _;

use super::*;
use crate::grpc::convert::{failure_from_proto, failure_notes};
use crate::grpc::pb;
use crate::grpc::wire::pool::POOLED;

/// What the view read of `bytes`, if it read them, is what prost decodes
/// and `failure_from_proto` borrows: item for item, the locale too. Returns
/// whether the view read them.
fn same_as_prost(bytes: &[u8]) -> Result<bool, TestCaseError> {
    let Some(view) = BatchView::read(bytes) else {
        return Ok(false);
    };
    let req = pb::ClassifyBatchRequest::decode(bytes);
    prop_assert!(req.is_ok(), "read what prost refuses: {:?}", req);
    let req = req.expect("checked");
    prop_assert_eq!(view.len(), req.failures.len());
    prop_assert_eq!(view.locale(), req.locale.as_str());
    for (i, f) in req.failures.iter().enumerate() {
        let (ours, notes) = *view.item(i);
        // The core's failure has no `PartialEq` (a decision never compares
        // one): every field is in its `Debug`.
        prop_assert_eq!(
            format!("{ours:?}"),
            format!("{:?}", failure_from_proto(f, &req.locale)),
            "item {}",
            i
        );
        prop_assert_eq!(notes, failure_notes(f), "item {}", i);
    }
    view.recycle();
    Ok(true)
}

fn timestamp() -> impl Strategy<Value = Option<prost_types::Timestamp>> {
    prop::option::of(
        (any::<i64>(), any::<i32>()).prop_map(|(seconds, nanos)| prost_types::Timestamp { seconds, nanos }),
    )
}

prop_compose! {
    /// Any failure without an upstream contract: any Unicode, numbers to
    /// their ends (2^64 - 1 included), timestamps in range or not.
    fn any_failure()(
        texts in proptest::collection::vec(".{0,12}", 9),
        enums in (any::<i32>(), any::<i32>()),
        counts in (any::<u32>(), any::<u32>(), prop::option::of(prop_oneof![Just(u64::MAX), any::<u64>()])),
        flags in (any::<bool>(), any::<bool>()),
        stamps in (timestamp(), timestamp()),
    ) -> pb::Failure {
        pb::Failure {
            catalog: texts[0].clone(),
            code: texts[1].clone(),
            operation: enums.0,
            method: texts[2].clone(),
            attempt: counts.0,
            max_attempts: counts.1,
            retry_after: texts[3].clone(),
            retry_after_ms: counts.2,
            deadline: stamps.0,
            idempotency_key: texts[4].clone(),
            idempotency_key_enforced: flags.0,
            read_back: enums.1,
            cannot_verify_effect: flags.1,
            request_id: texts[5].clone(),
            tenant: texts[6].clone(),
            upstream: None,
            dependency: texts[7].clone(),
            quota_resets_at: stamps.1,
            probe_token: texts[8].clone(),
        }
    }
}

proptest! {
    /// Requests of any failures without an upstream contract are read, and
    /// read as prost reads them.
    #[test]
    fn reads_what_clients_send_as_prost_does(
        failures in proptest::collection::vec(any_failure(), 0..20),
        locale in ".{0,8}",
    ) {
        let wire = pb::ClassifyBatchRequest { failures, locale }.encode_to_vec();
        prop_assert!(same_as_prost(&wire)?, "a plain request was left to prost");
    }

    /// Any bytes, cut or not: whatever the view reads, prost reads the same.
    #[test]
    fn any_bytes_read_are_prosts(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        same_as_prost(&bytes)?;
    }

    /// A valid request with one byte changed or cut short: read as prost
    /// reads it, or left to prost.
    #[test]
    fn damaged_requests_read_as_prost_does(
        failures in proptest::collection::vec(any_failure(), 1..4),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut wire = pb::ClassifyBatchRequest { failures, locale: "ru".into() }.encode_to_vec();
        let i = at.index(wire.len());
        wire[i] = byte;
        same_as_prost(&wire)?;
        same_as_prost(&wire[..cut.index(wire.len() + 1)])?;
    }
}

/// One `Failure` field: `tag` and its length-delimited `body`.
fn field(tag: u32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    prost::encoding::encode_varint(u64::from((tag << 3) | 2), &mut out);
    prost::encoding::encode_varint(body.len() as u64, &mut out);
    out.extend_from_slice(body);
    out
}

#[test]
fn fields_given_twice_read_as_prost_does() {
    // A string twice keeps the last; a timestamp twice merges (seconds
    // from the first, nanos from the second); the locale twice keeps the last.
    let seconds = pb::Failure {
        deadline: Some(prost_types::Timestamp { seconds: 90, nanos: 0 }),
        code: "FIRST".into(),
        ..Default::default()
    };
    let nanos = pb::Failure {
        deadline: Some(prost_types::Timestamp { seconds: 0, nanos: 7 }),
        code: "SECOND".into(),
        ..Default::default()
    };
    let mut body = seconds.encode_to_vec();
    body.extend(nanos.encode_to_vec());
    let mut wire = field(2, b"en");
    wire.extend(field(1, &body));
    wire.extend(field(2, b"ru"));
    assert!(same_as_prost(&wire).expect("same"), "left to prost");
    let view = BatchView::read(&wire).expect("read");
    let (f, _) = *view.item(0);
    assert_eq!((f.code, f.locale), ("SECOND", "ru"));
    let merged = prost_types::Timestamp { seconds: 90, nanos: 7 };
    assert_eq!(f.deadline, Some(millis_from_timestamp(&merged)));
}

#[test]
fn a_string_cut_inside_a_character_is_left_to_prost() {
    // `code` is a lone 0xC3, then `method` (joined to it in one stretch)
    // or `dependency` (whose two-byte key starts with 0x8A, so that the
    // bytes read on as "\u{CA}"): the string alone is not UTF-8, and
    // prost refuses it.
    for next in [field(4, b"crm.deal.add"), field(17, b"dep")] {
        let mut body = field(2, &[0xC3]);
        body.extend(next);
        let wire = field(1, &body);
        assert!(BatchView::read(&wire).is_none(), "{wire:?}");
        assert!(pb::ClassifyBatchRequest::decode(wire.as_slice()).is_err());
    }
    // Whole characters next to keys of two bytes and numbers of several
    // are read, every string intact.
    let mut body = field(2, "é".as_bytes());
    body.extend(field(17, b"dep"));
    body.extend(field(9, &[0x08, 0xFF, 0x01]));
    body.extend(field(15, "тенант".as_bytes()));
    body.extend([0x28, 0x80, 0x01]);
    body.extend(field(4, "метод".as_bytes()));
    body.extend(field(1, b"vibecode"));
    let wire = field(1, &body);
    assert!(same_as_prost(&wire).expect("same"), "left to prost");
    let view = BatchView::read(&wire).expect("read");
    let (f, _) = *view.item(0);
    assert_eq!(
        (f.code, f.dependency, f.tenant, f.method, f.catalog, f.attempt),
        ("é", "dep", "тенант", "метод", "vibecode", 128)
    );
}

#[test]
fn a_field_given_many_times_keeps_the_last() {
    // More strings than one stretch holds: the last of each field wins.
    let mut body = Vec::new();
    for i in 0..(HELD_TEXTS * 3) {
        body.extend(field(2, format!("CODE_{i}").as_bytes()));
        body.extend(field(15, format!("t{i}").as_bytes()));
    }
    let wire = field(1, &body);
    assert!(same_as_prost(&wire).expect("same"), "left to prost");
    let view = BatchView::read(&wire).expect("read");
    let (f, _) = *view.item(0);
    let last = HELD_TEXTS * 3 - 1;
    assert_eq!((f.code, f.tenant), (&*format!("CODE_{last}"), &*format!("t{last}")));
}

#[test]
fn what_only_prost_reads_is_left_to_it() {
    let upstream = pb::Failure {
        upstream: Some(pb::RetryContract::default()),
        ..Default::default()
    };
    let with_upstream = pb::ClassifyBatchRequest {
        failures: vec![pb::Failure::default(), upstream],
        locale: String::new(),
    };
    let unknown_field = [field(1, &field(40, b"x")), field(3, b"x")];
    let wrong_wire_type = [vec![0x08, 0x01], field(1, &[0x08, 0x01])];
    for wire in [with_upstream.encode_to_vec()]
        .into_iter()
        .chain(unknown_field)
        .chain(wrong_wire_type)
    {
        assert!(BatchView::read(&wire).is_none(), "{wire:?}");
    }
}

#[test]
fn values_at_their_ends_read_as_prost_does() {
    let f = pb::Failure {
        attempt: u32::MAX,
        max_attempts: u32::MAX,
        retry_after_ms: Some(u64::MAX),
        operation: i32::MIN,
        read_back: i32::MAX,
        deadline: Some(prost_types::Timestamp {
            seconds: i64::MAX,
            nanos: i32::MIN,
        }),
        quota_resets_at: Some(prost_types::Timestamp {
            seconds: i64::MIN,
            nanos: -1,
        }),
        ..Default::default()
    };
    let wire = pb::ClassifyBatchRequest {
        failures: vec![f],
        locale: String::new(),
    }
    .encode_to_vec();
    assert!(same_as_prost(&wire).expect("same"));
    let view = BatchView::read(&wire).expect("read");
    assert!(view.item(0).1.timestamp_out_of_range);
}

#[test]
fn recycling_keeps_the_storage() {
    let mut items: Vec<BatchItem<'_>> = Vec::with_capacity(1_000);
    let text = String::from("borrowed");
    items.push((
        Failure {
            code: &text,
            ..Failure::default()
        },
        InputNotes::default(),
    ));
    let at = items.as_ptr() as usize;
    let kept = unborrowed(items);
    assert!(kept.is_empty());
    assert_eq!(kept.capacity(), 1_000, "the in-place collect did not happen");
    assert_eq!(kept.as_ptr() as usize, at);
}

#[test]
fn recycled_views_carry_nothing_over_and_stay_bounded() {
    let secret = pb::Failure {
        idempotency_key: "secret".into(),
        ..Default::default()
    };
    let many = pb::ClassifyBatchRequest {
        failures: vec![secret; 300],
        locale: "ru".into(),
    }
    .encode_to_vec();
    BatchView::read(&many).expect("read").recycle();
    let one = pb::ClassifyBatchRequest {
        failures: vec![pb::Failure::default()],
        locale: String::new(),
    }
    .encode_to_vec();
    let view = BatchView::read(&one).expect("read");
    assert_eq!(view.len(), 1);
    assert_eq!((view.item(0).0.idempotency_key, view.locale()), ("", ""));
    view.recycle();

    // Past the bound: more vectors than kept, each bigger than kept (other
    // tests share the pool: only the bound is asserted).
    let huge = pb::ClassifyBatchRequest {
        failures: vec![pb::Failure::default(); POOLED_ITEMS * 2],
        locale: String::new(),
    }
    .encode_to_vec();
    let views: Vec<_> = (0..POOLED * 2).map(|_| BatchView::read(&huge).expect("read")).collect();
    views.into_iter().for_each(BatchView::recycle);
    let (_, kept) = kept();
    assert!(kept.values <= POOLED, "{kept:?}");
    let most = std::mem::size_of::<Vec<BatchItem<'static>>>()
        + (POOLED_ITEMS + 64) * std::mem::size_of::<BatchItem<'static>>();
    assert!(kept.bytes <= POOLED * most, "{kept:?}");
}
