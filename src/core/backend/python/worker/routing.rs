//! The reader thread of a worker's write socket: routes each frame (a
//! response to its request's responder, a log line to the server log, the
//! model's calls into the server to `calls`, the rest to the instance
//! thread) until the worker is gone, then fails what is still open.

use std::io::BufReader;
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};

use serde_json::Value;

use super::calls::{bls, metric, model_control};
use super::{Counting, Link};
use crate::core::backend::python::frame::Frame;
use crate::core::error::Error;
use crate::core::responder::Responder;

/// The reader thread: routes every frame until the worker is gone, then
/// fails what is still open.
pub(super) fn read_frames(stream: UnixStream, link: &Arc<Link>, control: mpsc::Sender<Frame>) {
    let mut reader = Counting {
        inner: BufReader::with_capacity(1 << 16, stream),
        count: 0,
    };
    let end = loop {
        let before = reader.count;
        let frame = match Frame::read_from(&mut reader) {
            Ok(Some(frame)) => frame,
            Ok(None) => break None,
            Err(e) => break Some(e.to_string()),
        };
        match frame.kind() {
            "response" => respond(link, frame),
            "log" => {
                let level = frame.str("level").chars().next().unwrap_or('I');
                let level = if level == 'V' { 'V' } else { level };
                crate::core::logging::log_at(
                    level,
                    frame.str("message"),
                    frame.str("file"),
                    frame.u64("line") as u32,
                );
            }
            "bls" => bls(link, frame),
            "metric" => metric(link, &frame),
            "model_control" => model_control(link, &frame),
            _ => {
                if control.send(frame).is_err() {
                    // Nobody listens (the instance is going away); keep
                    // reading so responses still reach their callers.
                }
            }
        }
        link.advance(reader.count - before, false);
    };
    // A worker whose frames cannot be read is of no use: it is killed, and
    // the next batch starts a new one.
    link.dead.store(true, Ordering::Relaxed);
    if let Some(why) = end {
        // SAFETY: as in `Worker::kill`.
        unsafe {
            libc::kill(-link.pid, libc::SIGKILL);
        }
        crate::core::logging::log(
            'E',
            &format!(
                "reading from the Python worker of model instance '{}': {why}",
                link.instance
            ),
        );
    }
    link.metrics
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clear();
    let waiting = std::mem::take(&mut *link.waiting.lock().unwrap_or_else(|p| p.into_inner()));
    let open: Vec<Responder> = link
        .requests
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .drain()
        .filter(|(id, _)| !waiting.contains(id))
        .map(|(_, r)| r)
        .collect();
    let error = Error::internal(format!(
        "the Python worker of model instance '{}' exited while running the request",
        link.instance
    ));
    for r in open {
        r.fail(error.clone());
    }
    link.advance(0, true);
}

/// A `response` frame: to its request's responder.
pub(super) fn respond(link: &Link, mut frame: Frame) {
    let id = frame.u64("rid");
    let last = frame.bool("final");
    let responder = {
        let mut open = link.requests.lock().unwrap_or_else(|p| p.into_inner());
        if last {
            open.remove(&id)
        } else {
            open.get(&id).cloned()
        }
    };
    let Some(responder) = responder else { return };
    let has_tensors = frame
        .header
        .get("tensors")
        .and_then(Value::as_array)
        .is_some_and(|t| !t.is_empty());
    if let Some(e) = frame.error() {
        // The model's own error response counts as a success (Triton).
        let e = if frame.bool("answered") {
            e.answered()
        } else {
            e
        };
        responder.respond(Err(e), last);
    } else if last && !has_tensors && frame.bool("bare") {
        // A bare final flag: a decoupled stream ends; a one-answer request
        // cannot end without its answer.
        let instance = link.instance.clone();
        responder.finish(move || {
            Error::internal(format!(
                "Python model '{instance}' sent the final flag without a response"
            ))
        });
    } else {
        responder.respond(frame.take_tensors(), last);
    }
}
