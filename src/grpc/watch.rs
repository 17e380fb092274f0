//! WatchHolds' events as the gRPC door sends them: each converted once, by
//! the stream's own task, and charged to the bytes ledger at its encoded
//! size (the message and its 5-byte gRPC prefix) while queued.

use prost::Message as _;

use super::convert::{hold_event_to_proto, shown_into_proto, timestamp_from_millis};
use super::pb;
use crate::doors::watch_bytes::{self, QueuedBytes};
use crate::service::watch::{Charge, WatchEvent, WatchWire};

/// The gRPC form of a watch's events (charged when `bytes` is there: a call
/// that came through the admission layer).
#[derive(Debug)]
pub struct GrpcWire {
    /// The stream's queued bytes.
    pub bytes: Option<QueuedBytes>,
}

impl WatchWire for GrpcWire {
    type Item = pb::WatchHoldsResponse;

    fn encode(&self, e: WatchEvent) -> (pb::WatchHoldsResponse, usize) {
        let message = pb::WatchHoldsResponse {
            kind: hold_event_to_proto(e.kind) as i32,
            hold: e.hold.map(shown_into_proto),
            server_time: Some(timestamp_from_millis(e.server_time)),
            resumed: e.resent_buckets.is_some(),
            resent_buckets: e.resent_buckets.unwrap_or_default(),
        };
        let n = if self.bytes.is_some() {
            message.encoded_len() + 5
        } else {
            0
        };
        (message, n)
    }

    fn charge(&self, n: usize) -> Charge {
        watch_bytes::charge(self.bytes.as_ref(), n)
    }

    fn release(&self, n: usize) {
        watch_bytes::release(self.bytes.as_ref(), n);
    }
}
