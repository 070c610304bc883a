//! A plain `tools/call`, answered without the SDK's per-request machinery. Without sessions,
//! `rmcp` serves every POST by spawning a service with its own task, a handler task,
//! cancellation tokens and a one-shot transport — a third of a `kennisbank_read`'s CPU
//! (docs/performance.md, stop 52). A call in the shape the SDKs send (a protocol version
//! before 2026-07-28 in the header, plain `Accept` and `Content-Type`, no `_meta`, a tool of
//! the grant) is read strictly ([`PlainCall`]), run by the same [`run_tool`] the SDK's handler
//! runs, given the SDK's treatment of results for peers of those versions, and written as the
//! SDK writes a JSON reply. Everything else — `initialize`, `tools/list`, notifications,
//! 2026-07-28's per-request metadata and standard headers, media types with parameters,
//! bodies that do not fit — goes to the SDK unchanged.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use rmcp::model::{JsonObject, JsonRpcVersion2_0, RequestId, ServerJsonRpcMessage, ServerResult};

use super::Caller;
use super::mcp::run_tool;
use crate::app::App;
use crate::tools::tool_for;

/// Protocol versions for which the SDK checks a call's headers no further than this module
/// does: every known version before 2026-07-28 (which adds standard headers and per-request
/// metadata). No header at all means 2025-03-26.
const PLAIN_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// Whether a request's headers are ones the SDK would take a call with and check no further:
/// `Content-Type` `application/json`, `Accept` naming both media types the SDK requires (and
/// nothing with parameters or quotes, whose weights the SDK weighs), and a plain version.
pub fn plain_headers(headers: &HeaderMap) -> bool {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let essence = v.split_once(';').map_or(v, |(essence, _)| essence);
            essence.trim().eq_ignore_ascii_case("application/json")
        });
    let (mut accepts_json, mut accepts_sse) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        for entry in value.split(',') {
            if entry.contains([';', '"']) {
                return false;
            }
            accepts_json |= entry.trim().eq_ignore_ascii_case("application/json");
            accepts_sse |= entry.trim().eq_ignore_ascii_case("text/event-stream");
        }
    }
    let mut versions = headers.get_all("mcp-protocol-version").iter();
    let version = match (versions.next(), versions.next()) {
        (None, _) => true,
        (Some(v), None) => v.to_str().is_ok_and(|v| PLAIN_VERSIONS.contains(&v)),
        (Some(_), Some(_)) => false,
    };
    json && accepts_json && accepts_sse && version
}

/// A plain call, read strictly: the members a call needs and nothing else (no `_meta`, no
/// input responses or request state of 2026-07-28), with the SDK's own types for the
/// protocol's version and the request's id. Anything that does not fit goes to the SDK, whose
/// reading of a message (through serde's buffered untagged enums) costs about four times this.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainCall {
    /// "2.0", which its type checks.
    #[serde(rename = "jsonrpc")]
    _version: JsonRpcVersion2_0,
    id: RequestId,
    method: String,
    params: PlainParams,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainParams {
    name: String,
    #[serde(default)]
    arguments: Option<JsonObject>,
}

/// The reply to `body` when it is a plain call of one of `caller`'s tools; `None` hands the
/// request to the SDK. Call only after [`plain_headers`].
pub async fn answer(app: &Arc<App>, caller: &Caller, body: &Bytes) -> Option<Response> {
    let call = serde_json::from_slice::<PlainCall>(body)
        .ok()
        .filter(|c| c.method == "tools/call")?;
    // A tool outside the grant's scopes gets the SDK's "unknown tool" error.
    let tool = tool_for(caller, &call.params.name)?;
    let args = call.params.arguments.unwrap_or_default();
    let mut result = ServerResult::from(run_tool(app, caller.clone(), tool, args).await);
    // What the SDK's handler does to every result for a peer before 2026-07-28.
    result.strip_result_type_for_legacy_peer();
    result.strip_non_object_output_for_legacy_peer();
    let message = ServerJsonRpcMessage::response(result, call.id);
    let (status, body) = match serde_json::to_vec(&message) {
        Ok(body) => (StatusCode::OK, body),
        // The SDK's reply when its own serialisation fails (plain data cannot fail).
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("serialize json response: {e}").into_bytes(),
        ),
    };
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Some(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(*name, HeaderValue::from_static(value));
        }
        h
    }

    const JSON: (&str, &str) = ("content-type", "application/json");
    const BOTH: (&str, &str) = ("accept", "application/json, text/event-stream");

    #[test]
    fn only_the_plain_shape_of_headers_is_answered_here() {
        assert!(plain_headers(&headers(&[JSON, BOTH])));
        assert!(plain_headers(&headers(&[
            ("content-type", "Application/JSON; charset=utf-8"),
            ("accept", "text/event-stream"),
            ("accept", "application/json"),
            ("mcp-protocol-version", "2025-06-18"),
        ])));
        for hard in [
            // The SDK answers these itself: 406, 415, 400, or the 2026-07-28 rules.
            vec![JSON, ("accept", "application/json")],
            vec![("content-type", "text/plain"), BOTH],
            vec![BOTH],
            vec![JSON, ("accept", "application/json;q=0, text/event-stream")],
            vec![JSON, BOTH, ("mcp-protocol-version", "2026-07-28")],
            vec![JSON, BOTH, ("mcp-protocol-version", "1999-01-01")],
            vec![
                JSON,
                BOTH,
                ("mcp-protocol-version", "2025-06-18"),
                ("mcp-protocol-version", "2025-11-25"),
            ],
        ] {
            assert!(!plain_headers(&headers(&hard)), "{hard:?}");
        }
    }
}
