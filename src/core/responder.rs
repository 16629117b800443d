//! How one request answers when its backend takes a batch's requests apart
//! (Triton's Python backend hands `execute` a list of requests and each
//! request answers on its own): a [`Responder`] per request, which the
//! backend may hand to another thread and use after the execution returned.
//!
//! A request answers once (the default transaction policy: the first
//! response goes to the caller) or any number of times (a decoupled model:
//! every response goes out, the final flag ends the stream). Whatever the
//! backend does, the caller is never left waiting: a responder dropped
//! without its final flag answers with an error.
//!
//! Also here, below both the instances and the backends: `Done` (a finished
//! request with Triton's time split) and `BackendRequest` (one request of a
//! batch handed to a backend whole).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::core::error::{Error, Result};
use crate::core::types::{RequestInfo, Tensor};

/// A finished request with its timing.
pub struct Done {
    pub result: Result<Vec<Tensor>>,
    /// Time in the queue before an instance took it.
    pub queue: Duration,
    /// Triton's compute_input: gathering the batch's inputs and handing
    /// them to the framework.
    pub input: Duration,
    /// Triton's compute_infer: the model run itself.
    pub compute: Duration,
    /// Triton's compute_output: taking the outputs from the framework and
    /// giving each request its part.
    pub output: Duration,
    /// Refused before reaching an instance (a queue timeout).
    pub rejected: bool,
    /// The response parameters the model set (shared by the requests of a
    /// batch).
    pub parameters: Option<Arc<crate::core::types::ResponseParameters>>,
    /// The model sent the final flag with this response (a one-answer
    /// request's only response always is; a decoupled model's last may
    /// come bare instead, after it).
    pub last: bool,
}

impl Done {
    /// A request that failed without running: `queue` long in the queue,
    /// `rejected` when refused there (a timeout), no compute time.
    pub fn failed(error: Error, queue: Duration, rejected: bool) -> Done {
        Done {
            result: Err(error),
            queue,
            input: Duration::ZERO,
            compute: Duration::ZERO,
            output: Duration::ZERO,
            rejected,
            parameters: None,
            last: true,
        }
    }
}

/// One request of a batch handed to a backend whole (Triton's Python
/// backend: `execute` gets a list of requests, each with its own tensors).
pub struct BackendRequest {
    /// The request's inputs in config order, its batch dimension included.
    pub inputs: Vec<Tensor>,
    /// The outputs to answer with: the ones the client named, else every
    /// output of the config.
    pub outputs: Vec<String>,
    pub info: RequestInfo,
    pub respond: Responder,
    /// How the model puts the request back in its scheduler's queue to run
    /// again (Triton's `TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`), keeping
    /// its responder: set only where the scheduler takes requests back
    /// (`sequence_batching { iterative_sequence: true }`).
    pub reschedule: Option<Reschedule>,
}

/// Puts a request back in its scheduler's queue; it answers through the
/// responder given. Called on the instance's thread once the execution that
/// asked for it returned (before the scheduler hears that it ended).
pub type Reschedule = Box<dyn FnOnce(Responder) + Send>;

/// Triton's refusal of a reschedule where the scheduler takes no request
/// back (a model without `iterative_sequence`).
pub fn reschedule_refused() -> Error {
    Error::invalid_arg(
        "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured to handle such a flag.",
    )
}

/// Where a request's answers go.
pub enum Sink {
    /// Exactly one answer, to a function (the scheduler's delivery).
    Once(Box<dyn FnOnce(Done) + Send>),
    /// Any number of answers; dropping the sender is the final flag.
    Stream(StreamTx),
}

/// The most bytes of a decoupled request's responses that wait for their
/// caller to take them: past it, the thread sending the next response
/// (the backend's: a Python worker's reader, which in turn stops reading
/// the model's responses) waits until the caller takes some or goes away.
/// A client that stops reading a stream so slows its own stream, never
/// the server's memory (the routes only take a response when they can
/// send it on).
pub const STREAM_BUDGET: usize = 2 << 20;

/// Bytes a waiting response counts for: its tensors' data, and a little
/// for each tensor and for the response itself, so that a stream of empty
/// responses is bounded too.
fn weight(done: &Done) -> usize {
    let tensors = done.result.as_ref().map(|t| t.as_slice()).unwrap_or(&[]);
    256 + tensors.iter().map(|t| 64 + t.data.len()).sum::<usize>()
}

struct Budget {
    /// The most bytes that may wait.
    limit: usize,
    /// Bytes waiting, and whether the caller went away.
    state: Mutex<(usize, bool)>,
    room: std::sync::Condvar,
}

impl Budget {
    fn lock(&self) -> std::sync::MutexGuard<'_, (usize, bool)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn add(&self, n: usize) {
        self.lock().0 += n;
    }

    fn take(&self, n: usize) {
        let mut s = self.lock();
        s.0 = s.0.saturating_sub(n);
        if s.0 <= self.limit {
            self.room.notify_all();
        }
    }
}

/// The sending end of a stream of responses (`stream_channel`).
#[derive(Clone)]
pub struct StreamTx {
    tx: mpsc::UnboundedSender<(Done, usize)>,
    budget: Arc<Budget>,
}

/// The receiving end of a stream of responses; dropping it tells the
/// sender that nobody waits any more.
pub struct StreamRx {
    rx: mpsc::UnboundedReceiver<(Done, usize)>,
    budget: Arc<Budget>,
}

/// A stream of responses whose sender waits (`StreamTx::wait_room`) while
/// more than `STREAM_BUDGET` bytes are not taken.
pub fn stream_channel() -> (StreamTx, StreamRx) {
    stream_channel_within(STREAM_BUDGET)
}

/// As `stream_channel`, the sender waiting past `limit` bytes (`usize::MAX`:
/// never, for a receiver that only reads once the sender is done).
pub fn stream_channel_within(limit: usize) -> (StreamTx, StreamRx) {
    let (tx, rx) = mpsc::unbounded_channel();
    let budget = Arc::new(Budget {
        limit,
        state: Mutex::new((0, false)),
        room: std::sync::Condvar::new(),
    });
    (
        StreamTx {
            tx,
            budget: budget.clone(),
        },
        StreamRx { rx, budget },
    )
}

impl StreamTx {
    /// Queues one response (never waits); gives it back when nobody takes
    /// responses any more.
    pub fn send(&self, done: Done) -> std::result::Result<(), Done> {
        let n = weight(&done);
        self.budget.add(n);
        self.tx.send((done, n)).map_err(|e| {
            self.budget.take(n);
            e.0 .0
        })
    }

    /// Whether the receiving end is gone.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Waits while more than `STREAM_BUDGET` bytes are queued, until the
    /// receiver takes some or goes away. Never waits on an async runtime's
    /// thread (there a response is queued regardless: no backend answers
    /// a stream from one).
    pub fn wait_room(&self) {
        if tokio::runtime::Handle::try_current().is_ok() {
            return;
        }
        let mut s = self.budget.lock();
        while s.0 > self.budget.limit && !s.1 {
            s = self
                .budget
                .room
                .wait_timeout(s, Duration::from_millis(500))
                .unwrap_or_else(|e| e.into_inner())
                .0;
            if self.tx.is_closed() {
                break;
            }
        }
    }
}

impl StreamRx {
    /// The next response; `None` once the sender is gone.
    pub async fn recv(&mut self) -> Option<Done> {
        let (done, n) = self.rx.recv().await?;
        self.budget.take(n);
        Some(done)
    }

    /// The next response if one is queued.
    pub fn try_recv(&mut self) -> std::result::Result<Done, mpsc::error::TryRecvError> {
        let (done, n) = self.rx.try_recv()?;
        self.budget.take(n);
        Ok(done)
    }

    /// The next response, waiting on this (non-async) thread.
    pub fn blocking_recv(&mut self) -> Option<Done> {
        let (done, n) = self.rx.blocking_recv()?;
        self.budget.take(n);
        Some(done)
    }
}

impl Drop for StreamRx {
    fn drop(&mut self) {
        self.budget.lock().1 = true;
        self.budget.room.notify_all();
    }
}

/// A change every response's tensors go through before they are sent (the
/// config's output `reshape`, back to the shapes clients see).
pub type OutputMap = Arc<dyn Fn(&mut Vec<Tensor>) -> Result<()> + Send + Sync>;

struct State {
    sink: Option<Sink>,
    enqueued: Instant,
    /// When an instance took the request (queue time ends).
    started: Option<Instant>,
    map: Option<OutputMap>,
    /// Parameters every response of the request carries.
    parameters: Option<Arc<crate::core::types::ResponseParameters>>,
}

/// One request's way to answer; clones share it.
#[derive(Clone)]
pub struct Responder(Arc<Mutex<State>>);

impl Responder {
    pub fn new(sink: Sink, enqueued: Instant) -> Self {
        Responder(Arc::new(Mutex::new(State {
            sink: Some(sink),
            enqueued,
            started: None,
            map: None,
            parameters: None,
        })))
    }

    /// Every response's tensors go through `map` from now on; its error
    /// replaces the response.
    pub fn map_outputs(&self, map: OutputMap) {
        self.lock().map = Some(map);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The instance took the request now.
    pub fn start(&self) {
        self.lock().started.get_or_insert_with(Instant::now);
    }

    /// Whether an instance took the request (`start`).
    pub fn was_started(&self) -> bool {
        self.lock().started.is_some()
    }

    /// Whether the request has had its final answer.
    pub fn is_finished(&self) -> bool {
        self.lock().sink.is_none()
    }

    /// Whether nobody waits for the answers any more (the caller went
    /// away): the request counts as cancelled.
    pub fn is_abandoned(&self) -> bool {
        match &self.lock().sink {
            Some(Sink::Stream(tx)) => tx.is_closed(),
            _ => false,
        }
    }

    /// Sends one response; `last` ends the request. A one-answer request
    /// ends with its first response. Returns false when the request had
    /// already ended (nothing is sent).
    /// Sets the parameters every later response of the request carries.
    pub fn set_parameters(&self, parameters: Option<Arc<crate::core::types::ResponseParameters>>) {
        self.lock().parameters = parameters;
    }

    pub fn respond(&self, result: Result<Vec<Tensor>>, last: bool) -> bool {
        let mut state = self.lock();
        let result = match (result, &state.map) {
            (Ok(mut tensors), Some(map)) => map(&mut tensors).map(|()| tensors),
            (result, _) => result,
        };
        let done = state.done(result, last);
        match state.sink.take() {
            None => false,
            Some(Sink::Once(f)) => {
                drop(state);
                f(done);
                true
            }
            Some(Sink::Stream(tx)) => {
                let _ = tx.send(done);
                if !last {
                    state.sink = Some(Sink::Stream(tx.clone()));
                    // Past the budget, the backend waits for the caller
                    // (not holding the request's lock).
                    drop(state);
                    tx.wait_room();
                }
                true
            }
        }
    }

    /// Ends the request with no further response (a decoupled model's bare
    /// final flag). A one-answer request cannot end without its answer: it
    /// gets `error` instead.
    pub fn finish(&self, error: impl FnOnce() -> Error) {
        let mut state = self.lock();
        match state.sink.take() {
            Some(Sink::Once(f)) => {
                let done = state.done(Err(error()), true);
                drop(state);
                f(done);
            }
            Some(Sink::Stream(_)) | None => {}
        }
    }

    /// Ends the request with `error`, unless it has ended already.
    pub fn fail(&self, error: Error) {
        self.respond(Err(error), true);
    }
}

impl State {
    fn done(&self, result: Result<Vec<Tensor>>, last: bool) -> Done {
        let now = Instant::now();
        let started = self.started.unwrap_or(now);
        Done {
            result,
            queue: started.saturating_duration_since(self.enqueued),
            input: Duration::ZERO,
            compute: now.saturating_duration_since(started),
            output: Duration::ZERO,
            rejected: false,
            parameters: self.parameters.clone(),
            last,
        }
    }
}

impl Drop for State {
    fn drop(&mut self) {
        // The last handle went without the final answer: the caller hears
        // why instead of waiting forever.
        if self.sink.is_some() {
            let done = self.done(
                Err(Error::internal(
                    "the model ended the request without a final response",
                )),
                true,
            );
            match self.sink.take() {
                Some(Sink::Once(f)) => f(done),
                Some(Sink::Stream(tx)) => {
                    let _ = tx.send(done);
                }
                None => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::types::DataType;

    fn tensor(n: u8) -> Vec<Tensor> {
        vec![Tensor {
            name: "OUT".into(),
            datatype: DataType::Uint8,
            shape: vec![1],
            data: vec![n],
        }]
    }

    fn once() -> (Responder, std::sync::mpsc::Receiver<Done>) {
        let (tx, rx) = std::sync::mpsc::channel();
        let r = Responder::new(
            Sink::Once(Box::new(move |d| {
                let _ = tx.send(d);
            })),
            Instant::now(),
        );
        (r, rx)
    }

    #[test]
    fn a_one_answer_request_takes_its_first_response_only() {
        let (r, rx) = once();
        assert!(r.respond(Ok(tensor(1)), false));
        assert!(r.is_finished());
        assert!(!r.respond(Ok(tensor(2)), true));
        assert_eq!(rx.recv().unwrap().result.unwrap()[0].data, [1]);
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn a_one_answer_request_ended_without_an_answer_gets_the_error() {
        let (r, rx) = once();
        r.finish(|| Error::internal("no response"));
        assert_eq!(
            rx.recv().unwrap().result.unwrap_err().message,
            "no response"
        );
    }

    #[test]
    fn a_stream_carries_every_response_until_the_final_flag() {
        let (tx, mut rx) = stream_channel();
        let r = Responder::new(Sink::Stream(tx), Instant::now());
        let other = r.clone();
        assert!(r.respond(Ok(tensor(1)), false));
        assert!(other.respond(Ok(tensor(2)), false));
        other.finish(|| unreachable!());
        assert!(!r.respond(Ok(tensor(3)), false), "closed by the final flag");
        assert_eq!(rx.try_recv().unwrap().result.unwrap()[0].data, [1]);
        assert_eq!(rx.try_recv().unwrap().result.unwrap()[0].data, [2]);
        assert!(rx.try_recv().is_err(), "ended");
    }

    #[test]
    fn a_dropped_responder_answers_with_an_error_rather_than_never() {
        let (r, rx) = once();
        let clone = r.clone();
        drop(r);
        assert!(rx.try_recv().is_err(), "a clone still lives");
        drop(clone);
        let e = rx.recv().unwrap().result.unwrap_err();
        assert!(e.message.contains("without a final response"), "{e:?}");
        let (tx, mut rx) = stream_channel();
        let r = Responder::new(Sink::Stream(tx), Instant::now());
        drop(r);
        assert!(rx.try_recv().unwrap().result.is_err());
    }
}
