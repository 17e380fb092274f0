//! A ClassifyBatch request read in place: each failure's strings borrowed
//! from the request's bytes, nothing copied.
//!
//! Why: decoding into pooled `pb::Failure`s (see [`super::pool`]) still
//! copied every string once, cleared and refilled nineteen fields an item
//! and then borrowed them again as a core failure (`failure_from_proto`):
//! together about a sixth of the server's CPU under a 1 000-item batch
//! (`perf record`, docs/performance.md). Here an item is read straight into
//! the core's [`Failure`], whose strings point into the request.
//!
//! The reader covers what clients send: every field of `Failure` but
//! `upstream`, and `locale`. A request with anything else (an `upstream`
//! contract, a field this build does not know, a wrong wire type, bytes
//! that are not a message) is left to prost ([`BatchView::read`] answers
//! `None`), so refusals keep prost's words and odd requests prost's
//! meaning. Where it reads, it reads what prost reads (proptests below).

use bytes::Bytes;
use prost::encoding::{WireType, decode_key, decode_varint};
use prost_types::Timestamp;

use super::super::convert::{millis_from_timestamp, operation_from_proto, read_back_from_proto, timestamp_in_range};
use super::super::pb;
use super::pool::{POOLED_ITEMS, Pool};
use crate::core::Failure;
use crate::service::InputNotes;
use crate::service::classify::{BLOCKING_BATCH, BatchItem};

/// The storage of earlier views' items, reused (bounded as every pool of
/// this folder: [`super::pool::POOLED`] vectors of at most
/// [`POOLED_ITEMS`] items).
static ITEMS: Pool<Vec<BatchItem<'static>>> = Pool::new();

/// A ClassifyBatch request's failures, read in place from its bytes.
#[derive(Debug)]
pub struct BatchView<'a> {
    items: Vec<BatchItem<'a>>,
    locale: &'a str,
}

impl<'a> BatchView<'a> {
    /// The `ClassifyBatchRequest` whose bytes are `message`, read in place;
    /// `None` when it holds anything this reader leaves to prost.
    pub fn read(message: &'a [u8]) -> Option<Self> {
        // A vector of earlier items: `'static` items fit any request's.
        let mut view = BatchView {
            items: ITEMS.take().unwrap_or_default(),
            locale: "",
        };
        match view.fill(message) {
            Some(()) => {
                // The locale may come after the failures (prost writes it last).
                let locale = view.locale;
                view.items.iter_mut().for_each(|(f, _)| f.locale = locale);
                Some(view)
            }
            None => {
                view.recycle();
                None
            }
        }
    }

    fn fill(&mut self, mut buf: &'a [u8]) -> Option<()> {
        while !buf.is_empty() {
            let (tag, wire_type) = decode_key(&mut buf).ok()?;
            if wire_type != WireType::LengthDelimited {
                return None;
            }
            let body = take_len(&mut buf)?;
            match tag {
                // Read into its slot: an item is large, and a move is a copy.
                1 => {
                    self.items.push((Failure::default(), InputNotes::default()));
                    read_failure(self.items.last_mut()?, body)?;
                }
                // As prost: a string given twice keeps the last.
                2 => self.locale = std::str::from_utf8(body).ok()?,
                _ => return None,
            }
        }
        Some(())
    }

    /// The request's locale.
    pub fn locale(&self) -> &'a str {
        self.locale
    }

    /// How many failures the request carries.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the request carries no failure.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Failure `i` (of [`Self::len`]) and what was noticed reading it, as
    /// `failure_from_proto` and `failure_notes` give it from the message
    /// prost decodes.
    pub fn item(&self, i: usize) -> &BatchItem<'a> {
        &self.items[i]
    }

    /// Gives the items' storage back for the next request (the items
    /// themselves are dropped: nothing of this request is kept).
    pub fn recycle(self) {
        let mut items = self.items;
        items.clear();
        items.shrink_to(POOLED_ITEMS);
        ITEMS.give(unborrowed(items));
    }
}

/// An emptied vector's storage, free of the request's borrow: std collects
/// a vector's own iterator in place when the item's size is unchanged, so
/// the storage is kept (a test checks it).
fn unborrowed(mut items: Vec<BatchItem<'_>>) -> Vec<BatchItem<'static>> {
    items.clear();
    items
        .into_iter()
        .map(|_| (Failure::default(), InputNotes::default()))
        .collect()
}

/// A ClassifyBatch request as a route hands it in.
#[derive(Debug)]
pub enum BatchRequest {
    /// Decoded already (the generated server's method).
    Decoded(pb::ClassifyBatchRequest),
    /// The message's bytes, unframed (the hot route, `grpc::first`).
    Bytes(Bytes),
}

/// Requests longer than this are decided on the blocking pool: about
/// [`BLOCKING_BATCH`] items of the load generator's mix (a 1 000-item
/// batch of it is about 90 KB).
pub const BLOCKING_BATCH_BYTES: usize = 24 * 1024;

impl BatchRequest {
    /// Whether deciding it could hold up an async worker.
    pub fn is_large(&self) -> bool {
        match self {
            BatchRequest::Decoded(req) => req.failures.len() > BLOCKING_BATCH,
            BatchRequest::Bytes(message) => message.len() > BLOCKING_BATCH_BYTES,
        }
    }
}

/// What the items' pool keeps now.
pub(super) fn kept() -> (&'static str, super::Kept) {
    let bytes = |v: &Vec<BatchItem<'static>>| v.capacity() * std::mem::size_of::<BatchItem<'static>>();
    ("batch_views", ITEMS.kept(bytes))
}

/// The length-delimited body at the start of `buf`, `buf` moved past it.
fn take_len<'a>(buf: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = usize::try_from(decode_varint(buf).ok()?).ok()?;
    let body = buf.get(..len)?;
    *buf = &buf[len..];
    Some(body)
}

/// One `Failure` message's fields read into `item` (a default one), `None`
/// on anything left to prost.
fn read_failure<'a>(item: &mut BatchItem<'a>, mut body: &'a [u8]) -> Option<()> {
    let (f, notes) = item;
    // Enums and timestamps as the wire has them, turned into the core's
    // values once all fields are read (a field may come twice).
    let (mut operation, mut read_back) = (0_i32, 0_i32);
    let (mut deadline, mut quota_resets_at) = (None, None);
    while !body.is_empty() {
        let (tag, wire_type) = decode_key(&mut body).ok()?;
        match wire_type {
            WireType::LengthDelimited => {
                let bytes = take_len(&mut body)?;
                let text = match tag {
                    9 => {
                        merge_timestamp(deadline.get_or_insert_with(Timestamp::default), bytes)?;
                        continue;
                    }
                    18 => {
                        merge_timestamp(quota_resets_at.get_or_insert_with(Timestamp::default), bytes)?;
                        continue;
                    }
                    1 => &mut f.catalog,
                    2 => &mut f.code,
                    4 => &mut f.method,
                    7 => &mut f.retry_after,
                    10 => &mut f.idempotency_key,
                    14 => &mut f.request_id,
                    15 => &mut f.tenant,
                    17 => &mut f.dependency,
                    19 => &mut f.probe_token,
                    // 16, the upstream contract, and fields unknown here.
                    _ => return None,
                };
                *text = std::str::from_utf8(bytes).ok()?;
            }
            WireType::Varint => {
                // prost's conversions: int32 and uint32 keep the low 32 bits.
                let v = decode_varint(&mut body).ok()?;
                match tag {
                    3 => operation = v as i32,
                    5 => f.attempt = v as u32,
                    6 => f.max_attempts = v as u32,
                    8 => f.retry_after_ms = Some(v),
                    11 => f.idempotency_key_enforced = v != 0,
                    12 => read_back = v as i32,
                    13 => f.cannot_verify_effect = v != 0,
                    _ => return None,
                }
            }
            _ => return None,
        }
    }
    f.operation = operation_from_proto(operation);
    f.read_back = read_back_from_proto(read_back);
    f.deadline = deadline.as_ref().map(millis_from_timestamp);
    f.quota_resets_at = quota_resets_at.as_ref().map(millis_from_timestamp);
    notes.timestamp_out_of_range = [&deadline, &quota_resets_at]
        .into_iter()
        .flatten()
        .any(|t| !timestamp_in_range(t));
    Some(())
}

/// A `Timestamp`'s fields merged into `t`, as prost merges a message field
/// given again: each field present overwrites.
fn merge_timestamp(t: &mut Timestamp, mut body: &[u8]) -> Option<()> {
    while !body.is_empty() {
        let (tag, wire_type) = decode_key(&mut body).ok()?;
        if wire_type != WireType::Varint {
            return None;
        }
        let v = decode_varint(&mut body).ok()?;
        match tag {
            1 => t.seconds = v as i64,
            2 => t.nanos = v as i32,
            _ => return None,
        }
    }
    Some(())
}

#[cfg(test)]
#[path = "view_tests.rs"]
mod tests;
