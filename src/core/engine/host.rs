//! The engine as the backends' `Host`: a Python model's BLS call runs as a
//! full inference request on the engine (the target's scheduler, batching,
//! statistics, any backend), never over the network.
//!
//! The host holds the engine weakly: the engine owns the models, whose
//! instances hold the host, and a strong handle would keep it alive forever.

use std::sync::{Arc, Weak};

use super::{Engine, Inner};
use crate::core::backend::{Host, HostAnswers, ModelControl};
use crate::core::error::{Error, Result};
use crate::core::types::{InferRequest, InferResponse};

pub(super) struct EngineHost {
    engine: Weak<Inner>,
}

impl EngineHost {
    pub(super) fn new(engine: Weak<Inner>) -> Self {
        EngineHost { engine }
    }
}

impl Host for EngineHost {
    fn control(&self, op: ModelControl, done: Box<dyn FnOnce(Result<bool>) + Send>) {
        let Some(inner) = self.engine.upgrade() else {
            return done(Err(Error::unavailable("the server is shutting down")));
        };
        let engine = Engine { inner };
        let Some(runtime) = engine.inner.runtime.get().cloned() else {
            return done(Err(Error::unavailable(
                "model control is not available in this server",
            )));
        };
        runtime.spawn(async move {
            done(Self::control_async(engine, op).await);
        });
    }

    fn infer(&self, name: String, version: String, request: InferRequest, each: HostAnswers) {
        let mut each = Ended(Some(each));
        let Some(inner) = self.engine.upgrade() else {
            each.call(Some(Err(Error::unavailable("the server is shutting down"))));
            return each.call(None);
        };
        let engine = Engine { inner };
        let runtime = engine.inner.runtime.get().cloned();
        let call = async move {
            let mut each = each;
            match engine.model(&name, &version) {
                Err(_) => each.call(Some(Err(Error::unavailable(format!(
                    "Failed for execute the inference request. Model '{name}' is not ready."
                ))))),
                Ok(model) if model.decoupled() => {
                    engine
                        .infer_each(model, request, |r| each.call(Some(r)))
                        .await
                }
                Ok(model) => {
                    let answer = engine.infer_on(Arc::clone(&model), request).await;
                    each.call(Some(answer));
                }
            }
            each.call(None);
        };
        match runtime {
            Some(runtime) => {
                runtime.spawn(call);
            }
            None => {
                // No runtime serves the engine (a program embedding it
                // without `attach_runtime`): the call gets a thread.
                std::thread::spawn(move || {
                    match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(rt) => rt.block_on(call),
                        Err(e) => crate::core::logging::log(
                            'E',
                            &format!("failed to start a runtime for a BLS call: {e}"),
                        ),
                    }
                });
            }
        }
    }
}

/// A BLS call's answer callback that always ends: dropped before its end
/// (a task that panicked or was dropped with the runtime), it answers with
/// an error and the end, so the model's `exec()` never waits forever.
impl EngineHost {
    async fn control_async(engine: Engine, op: ModelControl) -> Result<bool> {
        match op {
            ModelControl::Load {
                name,
                config,
                files,
            } => {
                let over = (!config.is_empty() || !files.is_empty())
                    .then_some(crate::core::repository::LoadOverride { config, files });
                engine.load_with(&name, over).await.map(|()| true)
            }
            ModelControl::Unload { name, dependents } => {
                engine.unload_with(&name, dependents).await.map(|()| true)
            }
            ModelControl::Ready { name, version } => Ok(engine.model_ready(&name, &version)),
        }
    }
}

struct Ended(Option<HostAnswers>);

impl Ended {
    fn call(&mut self, answer: Option<Result<InferResponse>>) {
        let last = answer.is_none();
        if let Some(f) = self.0.as_mut() {
            f(answer);
        }
        if last {
            self.0 = None;
        }
    }
}

impl Drop for Ended {
    fn drop(&mut self) {
        if let Some(mut f) = self.0.take() {
            f(Some(Err(Error::internal(
                "the server stopped running this inference call",
            ))));
            f(None);
        }
    }
}
