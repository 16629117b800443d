//! `ModelStreamInfer`: one call's requests run concurrently (up to
//! `STREAM_IN_FLIGHT`), their responses written in Triton's order, a
//! failed request answered in the stream with its id.

use std::pin::Pin;

use futures_util::{Stream, StreamExt};
use tonic::{Status, Streaming};

use super::*;
use crate::core::engine::Engine;
use crate::core::error::Error;
use crate::core::types::TraceContext;
use crate::server::protocol::pb::inference::*;

/// A stream's response, with the gRPC code of its error when it is one.
pub(super) type Sent = (ModelStreamInferResponse, Option<tonic::Code>);

/// A failed request's stream response: as Triton, the error and the id
/// only, so the client knows which failed.
pub(super) fn failed(id: &str, e: Error) -> Sent {
    let code = code_of(e.kind);
    (
        ModelStreamInferResponse {
            error_message: e.message,
            infer_response: Some(ModelInferResponse {
                id: id.to_string(),
                ..Default::default()
            }),
        },
        Some(code),
    )
}

/// One request of a stream at work: its responses, each with its place
/// among the stream's one-answer requests (`None`: a decoupled model's
/// response, written as it comes).
type Running = Pin<Box<dyn Stream<Item = (Option<u64>, Sent)> + Send>>;

/// One `ModelStreamInfer` call: reads the client's requests, runs up to
/// `STREAM_IN_FLIGHT` of them at once and yields their responses. As
/// Triton: a one-answer request's response is written in the order the
/// requests were read; a decoupled model's responses are written as they
/// come, between the others. A failed request answers with
/// `error_message` and its id, and the stream goes on.
///
/// The requests run while the call's response stream is polled, inside
/// it: when the client cancels the call (or its connection goes), the
/// server drops the stream and with it every request still open, which
/// the engine then cancels. A half-close only stops the reading: the call
/// ends (OK) after the last response of the requests already read, or
/// with the status of a message that could not be read, after the
/// responses of the requests before it.
///
/// With the call's metadata `triton_grpc_error: true` (Triton's
/// `triton_grpc_error` mode), the first error ends the call with its
/// gRPC status instead, and the requests still open are cancelled.
pub(super) struct StreamCall {
    engine: Engine,
    incoming: Streaming<ModelInferRequest>,
    /// Still reading requests.
    reading: bool,
    /// Why the reading stopped, when a message could not be read: the
    /// call's final status.
    broken: Option<Status>,
    running: futures_util::stream::SelectAll<Running>,
    /// The place the next one-answer request gets, and the place whose
    /// response is written next.
    next_place: u64,
    next_write: u64,
    /// One-answer responses that came before those ahead of them.
    held: std::collections::BTreeMap<u64, ModelStreamInferResponse>,
    /// Responses due now, in order.
    due: std::collections::VecDeque<ModelStreamInferResponse>,
    /// Request parameters from the call's metadata
    /// (`--grpc-header-forward-pattern`), added to each request.
    pub(super) forwarded: std::collections::HashMap<String, InferParameter>,
    /// The call's W3C trace context, for each of its requests.
    pub(super) trace: Option<TraceContext>,
    /// Triton's `triton_grpc_error` mode: an error ends the call.
    pub(super) grpc_error: bool,
    /// Ended by an error in that mode: nothing more is written.
    ended: bool,
}

impl StreamCall {
    pub(super) fn new(engine: Engine, incoming: Streaming<ModelInferRequest>) -> Self {
        StreamCall {
            engine,
            incoming,
            reading: true,
            broken: None,
            running: futures_util::stream::SelectAll::new(),
            next_place: 0,
            next_write: 0,
            held: Default::default(),
            due: Default::default(),
            forwarded: Default::default(),
            trace: None,
            grpc_error: false,
            ended: false,
        }
    }

    /// Starts one request (it runs when `running` is polled, in the order
    /// started).
    fn start(&mut self, mut request: ModelInferRequest) {
        for (name, value) in &self.forwarded {
            request
                .parameters
                .entry(name.clone())
                .or_insert_with(|| value.clone());
        }
        let engine = self.engine.clone();
        let running: Running = match engine.model(&request.model_name, &request.model_version) {
            Ok(model) if model.decoupled() => {
                let trace = self.trace.clone();
                Box::pin(
                    GrpcService::infer_decoupled(engine, model, request, trace).map(|r| (None, r)),
                )
            }
            looked_up => {
                let place = self.next_place;
                self.next_place += 1;
                let id = request.id.clone();
                let trace = self.trace.clone();
                Box::pin(futures_util::stream::once(async move {
                    let answer = match looked_up {
                        Ok(model) => GrpcService::infer_model(&engine, model, request, trace).await,
                        Err(e) => Err(e),
                    };
                    let response = match answer {
                        Ok(response) => (
                            ModelStreamInferResponse {
                                error_message: String::new(),
                                infer_response: Some(response),
                            },
                            None,
                        ),
                        Err(e) => failed(&id, e),
                    };
                    (Some(place), response)
                }))
            }
        };
        self.running.push(running);
    }
}

impl Stream for StreamCall {
    type Item = Result<ModelStreamInferResponse, Status>;

    fn poll_next(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        loop {
            if let Some(response) = this.due.pop_front() {
                return Poll::Ready(Some(Ok(response)));
            }
            while this.reading && this.running.len() < STREAM_IN_FLIGHT {
                match Pin::new(&mut this.incoming).poll_next(cx) {
                    Poll::Ready(Some(Ok(request))) => this.start(request),
                    Poll::Ready(Some(Err(e))) => {
                        this.reading = false;
                        this.broken = Some(e);
                    }
                    Poll::Ready(None) => this.reading = false,
                    Poll::Pending => break,
                }
            }
            match Pin::new(&mut this.running).poll_next(cx) {
                Poll::Ready(Some((_, (response, Some(code))))) if this.grpc_error => {
                    // Triton's triton_grpc_error mode: the error is the
                    // call's status; what still runs is cancelled.
                    this.ended = true;
                    this.reading = false;
                    this.running = futures_util::stream::SelectAll::new();
                    this.due.clear();
                    this.held.clear();
                    return Poll::Ready(Some(Err(Status::new(code, response.error_message))));
                }
                Poll::Ready(Some((None, (response, _)))) => return Poll::Ready(Some(Ok(response))),
                Poll::Ready(Some((Some(place), (response, _)))) => {
                    this.held.insert(place, response);
                    while let Some(r) = this.held.remove(&this.next_write) {
                        this.due.push_back(r);
                        this.next_write += 1;
                    }
                }
                // Nothing runs: wait for the next request, or end.
                Poll::Ready(None) if this.reading => return Poll::Pending,
                Poll::Ready(None) => return Poll::Ready(this.broken.take().map(Err)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
