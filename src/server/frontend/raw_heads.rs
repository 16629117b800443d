//! Forwarded header values with their trailing blanks, as Triton forwards
//! them (`--http-header-forward-pattern`).
//!
//! hyper reads a header as RFC 9110 says, dropping the optional whitespace
//! around its value; Triton's HTTP server (libevhtp) keeps what follows the
//! value up to the line's end, and a model sees `value\ ` where trtis gave
//! it `value\`. To hand the model the same bytes, a connection serving with
//! a forward pattern passes its bytes, as they are read, through a
//! [`Recorder`]: it finds each HTTP/1 request's header block (skipping
//! bodies by `Content-Length`), and keeps, for the headers the pattern
//! forwards and whose value ends in blanks, the value as it came. The
//! connection's service takes these, one request at a time in the order
//! hyper hands it the requests (the order they were read), and puts the
//! kept bytes back in the request's headers, but only where hyper's value
//! is exactly the kept one without its trailing blanks.
//!
//! Anything the recorder does not follow (a chunked body, an upgrade,
//! HTTP/2, a header block past [`MAX_HEAD`], a request httparse refuses)
//! stops it for the rest of the connection: those requests keep hyper's
//! values, which is what every header got before. Hand-written over
//! httparse (hyper's own parser) because hyper has no hook for the raw
//! header bytes.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, HeaderName, HeaderValue};

use super::forward::HeaderForward;

/// The longest header block the recorder follows (hyper's own limit is
/// larger; a longer block stops the recorder, never the request).
pub const MAX_HEAD: usize = 64 * 1024;

/// The most headers in one block (hyper's default too).
const MAX_HEADERS: usize = 100;

/// The most requests read ahead of the service; more stops the recorder
/// (hyper reads ahead one buffer at most, so this never happens in use).
const MAX_QUEUED: usize = 256;

/// The kept values of one request: the forwarded headers that had trailing
/// blanks, each with every value of that name, as sent, in order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RawHead(Vec<(String, Vec<Vec<u8>>)>);

enum State {
    /// Collecting a header block.
    Head(Vec<u8>),
    /// Skipping a body: bytes left.
    Body(u64),
    /// Not following the connection any more.
    Off,
}

/// Follows one connection's bytes (module doc).
pub struct Recorder {
    forward: Arc<HeaderForward>,
    state: State,
    heads: Arc<Mutex<VecDeque<RawHead>>>,
}

/// The service's end: the heads in request order.
#[derive(Clone)]
pub struct Heads(Arc<Mutex<VecDeque<RawHead>>>);

impl Recorder {
    pub fn new(forward: Arc<HeaderForward>) -> (Recorder, Heads) {
        let heads = Arc::new(Mutex::new(VecDeque::new()));
        (
            Recorder {
                forward,
                state: State::Head(Vec::new()),
                heads: heads.clone(),
            },
            Heads(heads),
        )
    }

    /// Bytes just read from the connection.
    pub fn read(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            match &mut self.state {
                State::Off => return,
                State::Body(left) => {
                    let n = (*left).min(data.len() as u64);
                    *left -= n;
                    data = &data[n as usize..];
                    if *left == 0 {
                        self.state = State::Head(Vec::new());
                    }
                }
                State::Head(buf) => {
                    let from = buf.len().saturating_sub(3);
                    let room = MAX_HEAD + 1 - buf.len().min(MAX_HEAD + 1);
                    let take = data.len().min(room);
                    buf.extend_from_slice(&data[..take]);
                    match find_end(&buf[from..]) {
                        Some(end) => {
                            let end = from + end;
                            let used = take - (buf.len() - end);
                            data = &data[used..];
                            let buf = std::mem::take(buf);
                            self.state = self.head(&buf[..end]);
                        }
                        None if buf.len() > MAX_HEAD => self.state = State::Off,
                        None => return,
                    }
                }
            }
        }
    }

    /// A whole header block (ending in its blank line): queues its kept
    /// values; what follows it.
    fn head(&mut self, block: &[u8]) -> State {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(block) {
            Ok(httparse::Status::Complete(_)) => {}
            _ => return State::Off,
        }
        let mut body = 0u64;
        let mut next_ok = true;
        let mut kept: Vec<(String, Vec<Vec<u8>>)> = Vec::new();
        for h in request.headers.iter() {
            let name = h.name.to_ascii_lowercase();
            match name.as_str() {
                "content-length" => match std::str::from_utf8(h.value)
                    .ok()
                    .and_then(|v| v.trim().parse::<u64>().ok())
                {
                    Some(n) => body = n,
                    None => next_ok = false,
                },
                "transfer-encoding" | "upgrade" => next_ok = false,
                _ => {}
            }
            if !self.forward.matches(&name) {
                continue;
            }
            let raw = raw_value(block, h.value);
            match kept.iter_mut().find(|(n, _)| *n == name) {
                Some((_, values)) => values.push(raw),
                None => kept.push((name, vec![raw])),
            }
        }
        kept.retain(|(_, values)| values.iter().any(|v| ends_blank(v)));
        {
            let mut heads = self.heads.lock().unwrap_or_else(|e| e.into_inner());
            if heads.len() >= MAX_QUEUED {
                heads.clear();
                return State::Off;
            }
            heads.push_back(RawHead(kept));
        }
        match (next_ok, body) {
            (false, _) => State::Off,
            (true, 0) => State::Head(Vec::new()),
            (true, n) => State::Body(n),
        }
    }
}

impl Heads {
    /// The next request's kept values (`None` once the recorder stopped).
    pub fn next(&self) -> Option<RawHead> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).pop_front()
    }
}

impl RawHead {
    /// Puts the kept values back where `headers` has them without their
    /// trailing blanks, and nowhere else.
    pub fn restore(self, headers: &mut HeaderMap) {
        for (name, raw) in self.0 {
            let Ok(name) = HeaderName::from_bytes(name.as_bytes()) else {
                continue;
            };
            let same = {
                let now: Vec<&[u8]> = headers
                    .get_all(&name)
                    .iter()
                    .map(|v| v.as_bytes())
                    .collect();
                now.len() == raw.len() && now.iter().zip(&raw).all(|(n, r)| *n == trim_end(r))
            };
            if !same {
                continue;
            }
            let values: Option<Vec<HeaderValue>> = raw
                .iter()
                .map(|r| HeaderValue::from_bytes(r).ok())
                .collect();
            if let Some(values) = values {
                headers.remove(&name);
                for v in values {
                    headers.append(name.clone(), v);
                }
            }
        }
    }
}

/// Where a header block's blank line ends, in `buf`.
fn find_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// httparse's value (a slice of `block`, its blanks trimmed) with the
/// blanks that followed it on its line.
fn raw_value(block: &[u8], value: &[u8]) -> Vec<u8> {
    let base = block.as_ptr() as usize;
    let start = (value.as_ptr() as usize).wrapping_sub(base);
    if value.is_empty() || start > block.len() {
        return value.to_vec();
    }
    let mut end = start + value.len();
    while end < block.len() && matches!(block[end], b' ' | b'\t') {
        end += 1;
    }
    block[start..end].to_vec()
}

fn ends_blank(v: &[u8]) -> bool {
    matches!(v.last(), Some(b' ' | b'\t'))
}

fn trim_end(v: &[u8]) -> &[u8] {
    let mut end = v.len();
    while end > 0 && matches!(v[end - 1], b' ' | b'\t') {
        end -= 1;
    }
    &v[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorder() -> (Recorder, Heads) {
        Recorder::new(Arc::new(HeaderForward::new("my_.*", "--test").unwrap()))
    }

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (n, v) in pairs {
            m.append(
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        m
    }

    #[test]
    fn keeps_trailing_blanks_of_forwarded_headers_across_requests() {
        let (mut rec, heads) = recorder();
        let wire = b"POST /a HTTP/1.1\r\nHost: x\r\nMy_Header_3: quoted\\ \r\nOther: y \r\nContent-Length: 5\r\n\r\nab\r\n\r\
GET /b HTTP/1.1\r\nmy_h:  two\t \r\nmy_h: one\r\n\r\nGET /c HTTP/1.1\r\n\r\n";
        // Fed in small pieces, as a socket may hand them over.
        for piece in wire.chunks(3) {
            rec.read(piece);
        }
        let first = heads.next().unwrap();
        assert_eq!(
            first,
            RawHead(vec![("my_header_3".into(), vec![b"quoted\\ ".to_vec()])])
        );
        let mut h = map(&[("my_header_3", "quoted\\"), ("other", "y")]);
        first.restore(&mut h);
        assert_eq!(h["my_header_3"].as_bytes(), b"quoted\\ ");
        assert_eq!(h["other"].as_bytes(), b"y");

        let second = heads.next().unwrap();
        let mut h = map(&[("my_h", "two"), ("my_h", "one")]);
        second.restore(&mut h);
        let all: Vec<&[u8]> = h.get_all("my_h").iter().map(|v| v.as_bytes()).collect();
        assert_eq!(all, vec![&b"two\t "[..], &b"one"[..]]);

        assert_eq!(heads.next(), Some(RawHead::default()));
        assert_eq!(heads.next(), None);
    }

    #[test]
    fn a_value_that_differs_is_left_as_hyper_read_it() {
        let (mut rec, heads) = recorder();
        rec.read(b"GET / HTTP/1.1\r\nmy_a: v \r\n\r\n");
        let mut h = map(&[("my_a", "w")]);
        heads.next().unwrap().restore(&mut h);
        assert_eq!(h["my_a"].as_bytes(), b"w");
    }

    #[test]
    fn stops_where_it_cannot_follow() {
        // A chunked body: the head before it counts, nothing after.
        let (mut rec, heads) = recorder();
        rec.read(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nmy_a: v \r\n\r\n3\r\nabc\r\n0\r\n\r\nGET / HTTP/1.1\r\nmy_a: v \r\n\r\n");
        assert_eq!(heads.next().unwrap().0.len(), 1);
        assert_eq!(heads.next(), None);
        // HTTP/2's preface.
        let (mut rec, heads) = recorder();
        rec.read(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        assert_eq!(heads.next(), None);
        // A header block past the bound.
        let (mut rec, heads) = recorder();
        rec.read(b"GET / HTTP/1.1\r\n");
        rec.read(&vec![b'a'; MAX_HEAD + 10]);
        rec.read(b"\r\n\r\n");
        assert_eq!(heads.next(), None);
    }
}
