//! A request's responses as a stream, for the routes that stream (HTTP's
//! `generate_stream` and the OpenAI API; gRPC's stream for a decoupled
//! model): one response for a model that answers once, any number for a
//! decoupled one. The request runs while the stream is polled; dropping the
//! stream (a client that hung up, a cancelled gRPC call) cancels it
//! (`Engine::infer_each`).

use std::pin::Pin;
use std::sync::Arc;

use futures_util::{FutureExt, Stream, StreamExt};

use crate::core::engine::Engine;
use crate::core::error::Result;
use crate::core::repository::LoadedModel;
use crate::core::types::{InferRequest, InferResponse};

/// The responses of one request, each a response or an error, until the
/// final one.
pub type Answers = Pin<Box<dyn Stream<Item = Result<InferResponse>> + Send>>;

/// Runs `request` on `model` (admitted as every inference is: not while
/// the server refuses new work).
pub fn answers(engine: Engine, model: Arc<LoadedModel>, request: InferRequest) -> Answers {
    if let Err(e) = engine.admit(&request) {
        return Box::pin(futures_util::stream::once(std::future::ready(Err(e))));
    }
    if !model.decoupled() {
        return Box::pin(futures_util::stream::once(async move {
            engine.infer_on(model, request).await
        }));
    }
    each(engine, model, request)
}

/// The responses of an admitted request to a decoupled model
/// (`Engine::infer_each`) as they come.
pub fn each(engine: Engine, model: Arc<LoadedModel>, request: InferRequest) -> Answers {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let run = async move {
        engine
            .infer_each(model, request, |answer| {
                let _ = tx.send(answer);
            })
            .await;
    };
    // The run yields nothing; it ends the channel (drops its sender) when
    // the request ends.
    let run = run.into_stream().filter_map(|()| std::future::ready(None));
    Box::pin(futures_util::stream::select(
        tokio_stream::wrappers::UnboundedReceiverStream::new(rx),
        run,
    ))
}
