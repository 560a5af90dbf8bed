//! Message size limit with the status code the protocol promises.
//!
//! tonic refuses a request over `max_decoding_message_size` with
//! `OUT_OF_RANGE` before the handler runs (so an oversized batch is never
//! buffered whole). The protocol (`ingest.proto`) promises
//! `RESOURCE_EXHAUSTED`, which agents treat as "do not retry as is"; this
//! layer rewrites exactly that refusal, leaving every other status alone.

use http::{HeaderValue, Response};

/// The message tonic puts in its refusal of an oversized message.
const TOO_LARGE: &str = "message length too large";

/// Rewrites tonic's oversized-message `OUT_OF_RANGE` (11) to
/// `RESOURCE_EXHAUSTED` (8) in a trailers-only response.
pub fn rewrite_too_large<B>(mut resp: Response<B>) -> Response<B> {
    let h = resp.headers_mut();
    let is_too_large = h.get("grpc-status").is_some_and(|v| v == "11")
        && h.get("grpc-message")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|m| m.contains(TOO_LARGE) || m.contains("message%20length%20too%20large"));
    if is_too_large {
        h.insert("grpc-status", HeaderValue::from_static("8"));
    }
    resp
}
