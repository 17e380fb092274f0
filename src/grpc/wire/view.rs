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
use prost::encoding::{WireType, decode_varint};
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

    fn fill(&mut self, message: &'a [u8]) -> Option<()> {
        let mut buf = message;
        let mut texts = Texts::new(message);
        while !buf.is_empty() {
            let field_at = buf.len();
            let (tag, wire_type) = key(&mut buf)?;
            if wire_type != WireType::LengthDelimited {
                return None;
            }
            let body = take_len(&mut buf)?;
            match tag {
                // Read into its slot: an item is large, and a move is a copy.
                1 => {
                    if field_at - buf.len() - body.len() != 2 {
                        texts.broken();
                    }
                    self.items.push((Failure::default(), InputNotes::default()));
                    let at = message.len() - buf.len() - body.len();
                    read_failure(&mut self.items, body, at, &mut texts)?;
                }
                // As prost: a string given twice keeps the last.
                2 => {
                    self.locale = std::str::from_utf8(body).ok()?;
                    texts.broken();
                }
                _ => return None,
            }
        }
        texts.flush(&mut self.items)
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

/// The varint at the start of `buf`, `buf` moved past it: one byte read
/// inline (tags below 16 and lengths below 128, nearly every one), longer
/// ones by prost. perf: prost's call per varint was 7 % of a batch.
#[inline(always)]
fn varint(buf: &mut &[u8]) -> Option<u64> {
    match buf.split_first() {
        Some((&b, rest)) if b < 0x80 => {
            *buf = rest;
            Some(u64::from(b))
        }
        _ => decode_varint(buf).ok(),
    }
}

/// A field's key at the start of `buf`, `None` where prost's `decode_key`
/// errs (a key past 32 bits, an unknown wire type, tag 0).
#[inline(always)]
fn key(buf: &mut &[u8]) -> Option<(u32, WireType)> {
    let key = u32::try_from(varint(buf)?).ok()?;
    let wire_type = WireType::try_from(u64::from(key & 0x07)).ok()?;
    let tag = key >> 3;
    (tag != 0).then_some((tag, wire_type))
}

/// The length-delimited body at the start of `buf`, `buf` moved past it.
fn take_len<'a>(buf: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = usize::try_from(varint(buf)?).ok()?;
    let body = buf.get(..len)?;
    *buf = &buf[len..];
    Some(body)
}

/// One `Failure` message's fields read into the last of `items` (a
/// default one), `None` on anything left to prost. `whole` starts at `at`
/// in the message; its strings are set once `texts` has checked them.
fn read_failure<'a>(items: &mut [BatchItem<'a>], whole: &'a [u8], at: usize, texts: &mut Texts<'a>) -> Option<()> {
    let item = items.len().checked_sub(1)?;
    let mut body = whole;
    // Enums and timestamps as the wire has them, turned into the core's
    // values once all fields are read (a field may come twice).
    let (mut operation, mut read_back) = (0_i32, 0_i32);
    let (mut deadline, mut quota_resets_at) = (None, None);
    while !body.is_empty() {
        let field_at = body.len();
        let (tag, wire_type) = key(&mut body)?;
        match wire_type {
            WireType::LengthDelimited => {
                let bytes = take_len(&mut body)?;
                // Key and length of one byte each: nothing but ASCII
                // before the body.
                if field_at - body.len() - bytes.len() != 2 {
                    texts.broken();
                }
                match tag {
                    9 | 18 => {
                        let t = if tag == 9 { &mut deadline } else { &mut quota_resets_at };
                        merge_timestamp(t.get_or_insert_with(Timestamp::default), bytes)?;
                        texts.broken();
                    }
                    // The string fields are `text_field`'s.
                    _ if text_field(&mut items[item].0, tag).is_some() => {
                        let end = at + whole.len() - body.len();
                        texts.push(items, (item, tag), end - bytes.len(), end)?;
                    }
                    // 16, the upstream contract, and fields unknown here.
                    _ => return None,
                }
            }
            WireType::Varint => {
                // prost's conversions: int32 and uint32 keep the low 32 bits.
                let v = varint(&mut body)?;
                if field_at - body.len() != 2 {
                    texts.broken();
                }
                let f = &mut items[item].0;
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
    let (f, notes) = &mut items[item];
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

/// The string field `tag` of `f`.
fn text_field<'f, 'a>(f: &'f mut Failure<'a>, tag: u32) -> Option<&'f mut &'a str> {
    Some(match tag {
        1 => &mut f.catalog,
        2 => &mut f.code,
        4 => &mut f.method,
        7 => &mut f.retry_after,
        10 => &mut f.idempotency_key,
        14 => &mut f.request_id,
        15 => &mut f.tenant,
        17 => &mut f.dependency,
        19 => &mut f.probe_token,
        _ => return None,
    })
}

/// Most strings held for one check (past this, the check runs early).
const HELD_TEXTS: usize = 32;

/// One string held: its item and field tag, its start and end in the message.
type Held = ((usize, u32), usize, usize);

/// A request's strings checked as UTF-8 a stretch at a time rather than
/// one by one. Strings separated only by ASCII bytes (keys, lengths and
/// small numbers of one byte each, within a failure and from one failure
/// to the next) are held and checked together, as the stretch of the
/// message from the first one's start to the last one's end: an ASCII byte
/// is a character of its own, so that stretch is UTF-8 exactly when each
/// string is, and each is then cut from it (`str::get`, checked again for
/// character boundaries; a string it does not give is checked alone). A
/// byte of 0x80 or more outside the strings (a key of tag 16 or more, a
/// number or length of 128 or more, a timestamp) ends a stretch.
/// perf: checking each short string alone was a sixth of a batch's CPU,
/// most of it in the byte-at-a-time head and tail of every check.
struct Texts<'a> {
    message: &'a [u8],
    held: [Held; HELD_TEXTS],
    len: usize,
    /// Whether only ASCII bytes came after the last string held.
    joinable: bool,
}

impl<'a> Texts<'a> {
    fn new(message: &'a [u8]) -> Self {
        Texts {
            message,
            held: [((0, 0), 0, 0); HELD_TEXTS],
            len: 0,
            joinable: false,
        }
    }

    /// Holds string field `field` (item, tag), `message[start..end]`,
    /// checking the strings held before it first if they cannot share a
    /// stretch with it.
    fn push(&mut self, items: &mut [BatchItem<'a>], field: (usize, u32), start: usize, end: usize) -> Option<()> {
        if !self.joinable || self.len == HELD_TEXTS {
            self.flush(items)?;
        }
        self.held[self.len] = (field, start, end);
        self.len += 1;
        self.joinable = true;
        Some(())
    }

    /// A byte of 0x80 or more came after the strings held: the next one
    /// starts a new stretch.
    fn broken(&mut self) {
        self.joinable = false;
    }

    /// Checks the strings held and sets them in their items (in the order
    /// given: a field given twice keeps the last); `None` if one is not UTF-8.
    fn flush(&mut self, items: &mut [BatchItem<'a>]) -> Option<()> {
        let held = &self.held[..std::mem::take(&mut self.len)];
        let (Some(first), Some(last)) = (held.first(), held.last()) else {
            return Some(());
        };
        let base = first.1;
        let stretch = std::str::from_utf8(self.message.get(base..last.2)?).ok();
        for &((item, tag), start, end) in held {
            let text = match stretch.and_then(|s| s.get(start - base..end - base)) {
                Some(text) => text,
                None => std::str::from_utf8(self.message.get(start..end)?).ok()?,
            };
            *text_field(&mut items.get_mut(item)?.0, tag)? = text;
        }
        Some(())
    }
}

/// A `Timestamp`'s fields merged into `t`, as prost merges a message field
/// given again: each field present overwrites.
fn merge_timestamp(t: &mut Timestamp, mut body: &[u8]) -> Option<()> {
    while !body.is_empty() {
        let (tag, wire_type) = key(&mut body)?;
        if wire_type != WireType::Varint {
            return None;
        }
        let v = varint(&mut body)?;
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
