//! The tests' HTTP/1.1 client: `ureq`, configured to behave like a fresh
//! client per request (no connection pooling, no proxy from the
//! environment), to hand back every status instead of raising 4xx/5xx as
//! errors, and to read bodies of any size (chunked ones decoded).
//!
//! The few tests that must misbehave on the wire (a caller that sends a
//! request and hangs up before the answer) keep a raw `TcpStream`.

use std::net::SocketAddr;
use std::sync::OnceLock;

use serde_json::Value;

fn agent() -> &'static ureq::Agent {
    static AGENT: OnceLock<ureq::Agent> = OnceLock::new();
    AGENT.get_or_init(|| {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .proxy(None)
            .max_idle_connections(0)
            .max_idle_connections_per_host(0)
            .build()
            .into()
    })
}

/// Sends one request to `addr`; returns status, headers (lower-case names)
/// and body.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut builder = ureq::http::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    for (name, value) in headers {
        builder = builder.header(*name, value.as_str());
    }
    let mut response = agent()
        .run(builder.body(body).unwrap())
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(name, value)| {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            (name.as_str().to_string(), value)
        })
        .collect();
    let body = response
        .body_mut()
        .with_config()
        .limit(u64::MAX)
        .read_to_vec()
        .unwrap_or_else(|e| panic!("{method} {path}: reading the body: {e}"));
    (status, headers, body)
}

/// Sends `body` as JSON (no body when it is null); returns the status and
/// the JSON body (null when empty or not JSON).
pub fn json(addr: SocketAddr, method: &str, path: &str, body: Value) -> (u16, Value) {
    let bytes = if body.is_null() {
        Vec::new()
    } else {
        serde_json::to_vec(&body).unwrap()
    };
    let (status, _, body) = request(addr, method, path, &[], &bytes);
    (status, parse(&body))
}

/// POSTs `body` as given; returns the status and the JSON body (null when
/// empty or not JSON).
pub fn post(addr: SocketAddr, path: &str, body: &str) -> (u16, Value) {
    let (status, _, body) = request(addr, "POST", path, &[], body.as_bytes());
    (status, parse(&body))
}

/// GETs `path`; returns the status and the body as text.
pub fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let (status, _, body) = request(addr, "GET", path, &[], b"");
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn parse(body: &[u8]) -> Value {
    if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(body).unwrap_or(Value::Null)
    }
}
