//! HTTP content codings, as Triton's HTTP server has them: a request body
//! with `Content-Encoding: gzip` or `deflate` is decompressed, and an
//! inference response is compressed as the request's `Accept-Encoding`
//! asks.
//!
//! Hand-written over flate2 (already a dependency) rather than tower-http's
//! compression layers: the request side must stop the moment the
//! decompressed size passes `--http-max-input-size` and must feed the split
//! of a binary-tensor body (`read_parts`) without first collecting the whole
//! decompressed body, and the response side applies to the infer endpoint
//! only, as in Triton; tower-http would decode into a body stream of its own
//! and compress every route.
//!
//! Decompression never trusts a size claim (gzip's ISIZE, Content-Length):
//! output is produced in 64 KiB steps and each step is counted against the
//! limit before it is kept, so a zip bomb costs at most the limit.
//! `deflate` is the zlib format HTTP defines; a raw deflate stream (which
//! some clients send) is accepted too, told apart by the zlib header check.
//! A gzip body may hold several members (as `cat a.gz b.gz`).

use std::io::Write;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use flate2::{Compression, Crc, Decompress, FlushDecompress, Status};
use serde_json::json;

use super::ApiError;
use crate::core::error::Error;

/// A content coding trtis reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Coding {
    Gzip,
    Deflate,
}

impl Coding {
    pub(super) fn name(self) -> &'static str {
        match self {
            Coding::Gzip => "gzip",
            Coding::Deflate => "deflate",
        }
    }
}

/// The request's `Content-Encoding`: `None` for none (or `identity`); any
/// other coding, or more than one, is refused.
pub(super) fn request_coding(headers: &HeaderMap) -> Result<Option<Coding>, Unsupported> {
    let mut coding = None;
    for value in headers.get_all(header::CONTENT_ENCODING) {
        let text = value
            .to_str()
            .map_err(|_| Unsupported("(not text)".into()))?;
        for token in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let this = match token.to_ascii_lowercase().as_str() {
                "identity" => continue,
                "gzip" | "x-gzip" => Coding::Gzip,
                "deflate" => Coding::Deflate,
                _ => return Err(Unsupported(token.into())),
            };
            if coding.replace(this).is_some() {
                return Err(Unsupported(text.into()));
            }
        }
    }
    Ok(coding)
}

/// A body in a coding trtis does not read (the `Content-Encoding`).
pub(super) struct Unsupported(String);

impl Unsupported {
    /// The refusal as an engine error (the v1 API answers with NV-Status).
    pub(super) fn into_error(self) -> Error {
        Error::invalid_arg(format!(
            "Unsupported Content-Encoding '{}': the request body may be gzip, deflate or identity",
            self.0
        ))
    }
}

/// 415 with the codings trtis reads in `Accept-Encoding` (RFC 7694), as
/// Triton answers.
impl IntoResponse for Unsupported {
    fn into_response(self) -> Response {
        (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            [(header::ACCEPT_ENCODING, HeaderValue::from_static("gzip, deflate"))],
            axum::Json(json!({
                "error": format!(
                    "Unsupported Content-Encoding '{}': the request body may be gzip, deflate or identity",
                    self.0
                )
            })),
        )
            .into_response()
    }
}

/// The coding to answer in, from the request's `Accept-Encoding`: the
/// acceptable coding (q > 0) with the highest q, gzip on a tie; none when
/// neither is acceptable or `identity` is preferred to both. `*` stands
/// for the codings not named.
pub(super) fn response_coding(headers: &HeaderMap) -> Option<Coding> {
    let (mut gzip, mut deflate, mut identity, mut any) = (None, None, None, None);
    for value in headers.get_all(header::ACCEPT_ENCODING) {
        let Ok(text) = value.to_str() else { continue };
        for item in text.split(',') {
            let mut parts = item.split(';');
            let token = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let mut q = Some(1.0f32);
            for param in parts {
                if let Some((k, v)) = param.split_once('=') {
                    if k.trim().eq_ignore_ascii_case("q") {
                        q = v
                            .trim()
                            .parse::<f32>()
                            .ok()
                            .filter(|q| (0.0..=1.0).contains(q));
                    }
                }
            }
            // A malformed weight makes the entry unusable.
            let Some(q) = q else { continue };
            match token.as_str() {
                "gzip" | "x-gzip" => gzip = Some(q),
                "deflate" => deflate = Some(q),
                "identity" => identity = Some(q),
                "*" => any = Some(q),
                _ => {}
            }
        }
    }
    let gzip = gzip.or(any).unwrap_or(0.0);
    let deflate = deflate.or(any).unwrap_or(0.0);
    let (coding, q) = if gzip >= deflate {
        (Coding::Gzip, gzip)
    } else {
        (Coding::Deflate, deflate)
    };
    (q > 0.0 && identity.is_none_or(|i| q >= i)).then_some(coding)
}

/// `pieces` compressed as one body in `coding` (zlib's default level, as
/// Triton's DataCompressor).
pub(super) fn compress(pieces: &[Bytes], coding: Coding) -> std::io::Result<Vec<u8>> {
    let size: usize = pieces.iter().map(|p| p.len()).sum();
    let out = Vec::with_capacity(size / 2 + 64);
    match coding {
        Coding::Gzip => {
            let mut e = flate2::write::GzEncoder::new(out, Compression::default());
            for p in pieces {
                e.write_all(p)?;
            }
            e.finish()
        }
        Coding::Deflate => {
            let mut e = flate2::write::ZlibEncoder::new(out, Compression::default());
            for p in pieces {
                e.write_all(p)?;
            }
            e.finish()
        }
    }
}

/// Decompressed output per step.
const STEP: usize = 64 * 1024;

/// The most a gzip member header (with its file name and comment) or the
/// start of a deflate body may take before it is understood.
const MAX_HEADER: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// A gzip member's header, or the first two bytes of a deflate body.
    Header,
    Data,
    /// A gzip member's CRC-32 and size.
    Trailer,
    /// A zlib or raw deflate stream ended.
    Done,
}

/// A request body's decompressor: compressed chunks in (`feed`), bytes out
/// through a callback that may refuse them (the size limit).
pub(super) struct Inflater {
    coding: Coding,
    stage: Stage,
    /// Bytes of a header or trailer that arrived split across chunks.
    pending: Vec<u8>,
    z: Decompress,
    crc: Crc,
    /// Gzip members read whole.
    members: usize,
    /// The last step filled `scratch`: more output may be waiting.
    more: bool,
    scratch: Box<[u8]>,
}

impl Inflater {
    pub(super) fn new(coding: Coding) -> Inflater {
        Inflater {
            coding,
            stage: Stage::Header,
            pending: Vec::new(),
            z: Decompress::new(false),
            crc: Crc::new(),
            members: 0,
            more: false,
            scratch: vec![0u8; STEP].into_boxed_slice(),
        }
    }

    fn corrupt(&self, why: impl std::fmt::Display) -> ApiError {
        ApiError(Error::invalid_arg(format!(
            "failed to decompress the request body (Content-Encoding: {}): {why}",
            self.coding.name()
        )))
    }

    /// Decompresses the next chunk of the body, handing the output to `out`.
    pub(super) fn feed(
        &mut self,
        input: &[u8],
        out: &mut impl FnMut(&[u8]) -> Result<(), ApiError>,
    ) -> Result<(), ApiError> {
        if self.pending.is_empty() {
            return self.run(input, out);
        }
        let mut joined = std::mem::take(&mut self.pending);
        joined.extend_from_slice(input);
        self.run(&joined, out)
    }

    /// The body has ended: refused unless its compressed data was whole.
    pub(super) fn finish(&self) -> Result<(), ApiError> {
        let whole = match self.stage {
            Stage::Done => true,
            Stage::Header => {
                self.coding == Coding::Gzip && self.members > 0 && self.pending.is_empty()
            }
            Stage::Data | Stage::Trailer => false,
        };
        if whole {
            Ok(())
        } else {
            Err(self.corrupt("the compressed data ends early"))
        }
    }

    fn run(
        &mut self,
        mut input: &[u8],
        out: &mut impl FnMut(&[u8]) -> Result<(), ApiError>,
    ) -> Result<(), ApiError> {
        while !input.is_empty() || (self.stage == Stage::Data && self.more) {
            match self.stage {
                Stage::Header => {
                    let start = match self.coding {
                        Coding::Gzip => gzip_header(input).map_err(|e| self.corrupt(e))?,
                        Coding::Deflate => (input.len() >= 2).then(|| {
                            // zlib: a deflate method byte and a check sum
                            // (RFC 1950); anything else is raw deflate.
                            let zlib = input[0] & 0x0f == 8
                                && input[0] >> 4 <= 7
                                && (u16::from(input[0]) << 8 | u16::from(input[1])) % 31 == 0;
                            self.z = Decompress::new(zlib);
                            0
                        }),
                    };
                    match start {
                        Some(n) => {
                            input = &input[n..];
                            self.stage = Stage::Data;
                            if self.coding == Coding::Gzip {
                                self.z.reset(false);
                                self.crc.reset();
                            }
                        }
                        None => return self.keep(input),
                    }
                }
                Stage::Data => {
                    let (before_in, before_out) = (self.z.total_in(), self.z.total_out());
                    let status = self
                        .z
                        .decompress(input, &mut self.scratch, FlushDecompress::None)
                        .map_err(|e| self.corrupt(e))?;
                    let used = (self.z.total_in() - before_in) as usize;
                    let made = (self.z.total_out() - before_out) as usize;
                    input = &input[used..];
                    self.more = made == self.scratch.len();
                    if made > 0 {
                        let output = &self.scratch[..made];
                        if self.coding == Coding::Gzip {
                            self.crc.update(output);
                        }
                        out(output)?;
                    }
                    if status == Status::StreamEnd {
                        self.more = false;
                        self.stage = match self.coding {
                            Coding::Gzip => Stage::Trailer,
                            Coding::Deflate => Stage::Done,
                        };
                    } else if used == 0 && made == 0 {
                        if input.is_empty() {
                            self.more = false;
                        } else {
                            return Err(self.corrupt("the decompressor made no progress"));
                        }
                    }
                }
                Stage::Trailer => {
                    if input.len() < 8 {
                        return self.keep(input);
                    }
                    let word = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    if word(&input[..4]) != self.crc.sum() {
                        return Err(self.corrupt("CRC-32 mismatch"));
                    }
                    if word(&input[4..8]) != self.crc.amount() {
                        return Err(self.corrupt("size mismatch"));
                    }
                    input = &input[8..];
                    self.members += 1;
                    self.stage = Stage::Header;
                }
                Stage::Done => {
                    return Err(self.corrupt("data after the end of the compressed stream"));
                }
            }
        }
        Ok(())
    }

    /// Keeps the start of a header or trailer for the next chunk.
    fn keep(&mut self, input: &[u8]) -> Result<(), ApiError> {
        if input.len() > MAX_HEADER {
            return Err(self.corrupt("gzip header too long"));
        }
        self.pending.extend_from_slice(input);
        Ok(())
    }
}

/// The length of the gzip member header (RFC 1952) at the start of `buf`,
/// `None` while it is incomplete.
fn gzip_header(buf: &[u8]) -> Result<Option<usize>, String> {
    const FHCRC: u8 = 2;
    const FEXTRA: u8 = 4;
    const FNAME: u8 = 8;
    const FCOMMENT: u8 = 16;
    let fixed = [0x1f, 0x8b, 8];
    let seen = buf.len().min(3);
    if buf[..seen] != fixed[..seen] {
        return Err("not gzip data".into());
    }
    if buf.len() < 10 {
        return Ok(None);
    }
    let flags = buf[3];
    if flags & 0xe0 != 0 {
        return Err("reserved gzip header flags set".into());
    }
    let mut at = 10;
    if flags & FEXTRA != 0 {
        let Some(len) = buf.get(at..at + 2) else {
            return Ok(None);
        };
        at += 2 + usize::from(u16::from_le_bytes([len[0], len[1]]));
    }
    for flag in [FNAME, FCOMMENT] {
        if flags & flag != 0 {
            let Some(rest) = buf.get(at..) else {
                return Ok(None);
            };
            match rest.iter().position(|&b| b == 0) {
                Some(end) => at += end + 1,
                None => return Ok(None),
            }
        }
    }
    if flags & FHCRC != 0 {
        at += 2;
    }
    Ok((at <= buf.len()).then_some(at))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inflate(coding: Coding, body: &[u8], chunk: usize, max: usize) -> Result<Vec<u8>, String> {
        let mut inflater = Inflater::new(coding);
        let mut got = Vec::new();
        let mut push = |b: &[u8]| {
            if got.len() + b.len() > max {
                return Err(ApiError(Error::invalid_arg("too large")));
            }
            got.extend_from_slice(b);
            Ok(())
        };
        for c in body.chunks(chunk.max(1)) {
            inflater.feed(c, &mut push).map_err(|e| e.0.message)?;
        }
        inflater.finish().map_err(|e| e.0.message)?;
        Ok(got)
    }

    fn data() -> Vec<u8> {
        (0..300_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect()
    }

    #[test]
    fn round_trips_in_any_chunking() {
        let data = data();
        for coding in [Coding::Gzip, Coding::Deflate] {
            let packed = compress(&[Bytes::from(data.clone())], coding).unwrap();
            for chunk in [1, 7, 4096, packed.len()] {
                assert_eq!(inflate(coding, &packed, chunk, usize::MAX).unwrap(), data);
            }
        }
    }

    #[test]
    fn raw_deflate_and_gzip_members() {
        let data = data();
        let mut raw = flate2::write::DeflateEncoder::new(Vec::new(), Compression::fast());
        raw.write_all(&data).unwrap();
        let raw = raw.finish().unwrap();
        assert_eq!(
            inflate(Coding::Deflate, &raw, 1000, usize::MAX).unwrap(),
            data
        );
        let one = compress(&[Bytes::from_static(b"abc")], Coding::Gzip).unwrap();
        let two = [one.clone(), one].concat();
        assert_eq!(
            inflate(Coding::Gzip, &two, 3, usize::MAX).unwrap(),
            b"abcabc"
        );
    }

    #[test]
    fn refuses_truncated_corrupt_and_trailing() {
        let packed = compress(&[Bytes::from(data())], Coding::Gzip).unwrap();
        let cut = &packed[..packed.len() - 3];
        assert!(inflate(Coding::Gzip, cut, 4096, usize::MAX)
            .unwrap_err()
            .contains("ends early"));
        let mut bad = packed.clone();
        let n = bad.len();
        bad[n - 6] ^= 0xff;
        assert!(inflate(Coding::Gzip, &bad, 4096, usize::MAX).is_err());
        assert!(inflate(Coding::Gzip, b"hello world", 4, usize::MAX)
            .unwrap_err()
            .contains("not gzip"));
        assert!(inflate(Coding::Gzip, b"", 4, usize::MAX).is_err());
        let z = compress(&[Bytes::from_static(b"abc")], Coding::Deflate).unwrap();
        let trailing = [z, b"x".to_vec()].concat();
        assert!(inflate(Coding::Deflate, &trailing, 100, usize::MAX).is_err());
    }

    #[test]
    fn stops_at_the_limit() {
        let zeros = vec![0u8; 8 << 20];
        let packed = compress(&[Bytes::from(zeros)], Coding::Gzip).unwrap();
        let e = inflate(Coding::Gzip, &packed, packed.len(), 1 << 20).unwrap_err();
        assert!(e.contains("too large"), "{e}");
    }

    #[test]
    fn picks_the_response_coding() {
        let pick = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
            response_coding(&h)
        };
        assert_eq!(pick("gzip"), Some(Coding::Gzip));
        assert_eq!(pick("deflate"), Some(Coding::Deflate));
        assert_eq!(pick("deflate, gzip"), Some(Coding::Gzip));
        assert_eq!(pick("gzip;q=0.5, deflate"), Some(Coding::Deflate));
        assert_eq!(pick("gzip;q=0"), None);
        assert_eq!(pick("gzip;q=0, deflate;q=0"), None);
        assert_eq!(pick("br"), None);
        assert_eq!(pick("*"), Some(Coding::Gzip));
        assert_eq!(pick("*, gzip;q=0"), Some(Coding::Deflate));
        assert_eq!(pick("identity, gzip;q=0.5"), None);
        assert_eq!(pick("GZIP ; Q=1"), Some(Coding::Gzip));
        assert_eq!(response_coding(&HeaderMap::new()), None);
    }

    #[test]
    fn reads_the_request_coding() {
        let coding = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_ENCODING, HeaderValue::from_str(v).unwrap());
            request_coding(&h).map_err(|r| r.into_response().status())
        };
        assert_eq!(coding("gzip"), Ok(Some(Coding::Gzip)));
        assert_eq!(coding("Deflate"), Ok(Some(Coding::Deflate)));
        assert_eq!(coding("identity"), Ok(None));
        assert_eq!(coding("br"), Err(StatusCode::UNSUPPORTED_MEDIA_TYPE));
        assert_eq!(
            coding("gzip, deflate"),
            Err(StatusCode::UNSUPPORTED_MEDIA_TYPE)
        );
    }
}
