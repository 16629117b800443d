//! Triton's default scheduler: no batching; each request is one execution,
//! queued FIFO for the next free instance.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;

use super::{pending, Completion, Submission};
use crate::core::batch_io::BatchIo;
use crate::core::error::Result;
use crate::core::instance::{Done, InstancePool, Reply, Work};
use crate::core::stats::ModelStats;

/// The default scheduler of one model version.
pub struct DefaultScheduler {
    pool: Arc<InstancePool>,
    /// The model's batch inputs, scattered outputs and ragged inputs: a
    /// request is a batch of one.
    io: BatchIo,
    stats: Arc<ModelStats>,
}

impl DefaultScheduler {
    pub fn new(pool: Arc<InstancePool>, io: BatchIo, stats: Arc<ModelStats>) -> Self {
        DefaultScheduler { pool, io, stats }
    }

    pub fn submit<'a>(&self, submission: Submission<'a>) -> Result<Completion<'a>> {
        let outputs = submission.output_names();
        let batch = submission.batch;
        // A batch of one: scattered outputs take their shapes from the
        // request's own inputs.
        let scatter = self.io.scatter_shapes(&[&submission.inputs]);
        let (reply, rx) = oneshot::channel();
        let gauge = &self.stats.pending;
        pending(gauge, || {
            let gathering = Instant::now();
            let inputs = self.io.model_inputs(vec![submission.inputs])?;
            self.pool
                .submit(Work {
                    inputs,
                    outputs,
                    enqueued: submission.enqueued,
                    reply: Reply::Caller(reply),
                    pending: Some((Arc::clone(gauge), 1)),
                    gather: gathering.elapsed(),
                })
                .map_err(|(e, _)| e)
        })?;
        let stats = Arc::clone(&self.stats);
        let after = move |done: &mut Done| {
            if let Ok(tensors) = &mut done.result {
                let scattering = Instant::now();
                let scattered = BatchIo::apply_scatter(&scatter, tensors);
                done.output += scattering.elapsed();
                stats.record_execution(batch, (done.input, done.compute, done.output));
                if let Err(e) = scattered {
                    done.result = Err(e);
                }
            }
        };
        Ok(Completion::one_then(rx, Box::new(after)))
    }
}
