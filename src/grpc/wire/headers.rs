//! The gRPC header names read or written on every call, made once.
//!
//! Why: a name given as `&str` is parsed and checked at each use. Under
//! callgrind, `HeaderMap::get("grpc-status")` cost 330–390 instructions and
//! inserting `"grpc-status"` 580, 1.7 k a Classify over its four uses; a
//! `HeaderName` is only hashed and looked up (1.1 k a Classify saved).

use http::HeaderName;

/// `grpc-status`: an answer's status, in its trailers (or in the headers of
/// a trailers-only answer).
pub static GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");

/// `grpc-timeout`: the caller's deadline.
pub static GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");

/// `grpc-encoding`: how the request's messages are compressed.
pub static GRPC_ENCODING: HeaderName = HeaderName::from_static("grpc-encoding");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_ones_on_the_wire() {
        // Found by the `&str` a client's header map uses, both ways.
        let mut map = http::HeaderMap::new();
        map.insert("grpc-status", http::HeaderValue::from_static("0"));
        map.insert(GRPC_TIMEOUT.clone(), http::HeaderValue::from_static("1S"));
        map.insert(GRPC_ENCODING.clone(), http::HeaderValue::from_static("gzip"));
        assert_eq!(map.get(&GRPC_STATUS).map(|v| v.as_bytes()), Some(&b"0"[..]));
        assert_eq!(map.get("grpc-timeout").map(|v| v.as_bytes()), Some(&b"1S"[..]));
        assert_eq!(map.get("grpc-encoding").map(|v| v.as_bytes()), Some(&b"gzip"[..]));
    }
}
