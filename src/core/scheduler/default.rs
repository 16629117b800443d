//! Triton's default scheduler: no batching; each request is one execution,
//! queued FIFO for the next free instance.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;

use super::lists::Answer;
use super::{pending, Answering, Completion, Submission};
use crate::core::batch_io::BatchIo;
use crate::core::error::Result;
use crate::core::instance::{BackendRequest, Done, InstancePool, Job, Reply, Work};
use crate::core::metrics::stats::ModelStats;
use crate::core::responder::Responder;

/// The default scheduler of one model version.
pub struct DefaultScheduler {
    pool: Arc<InstancePool>,
    /// The model's batch inputs, scattered outputs and ragged inputs: a
    /// request is a batch of one.
    io: BatchIo,
    answering: Answering,
    stats: Arc<ModelStats>,
}

impl DefaultScheduler {
    pub fn new(
        pool: Arc<InstancePool>,
        io: BatchIo,
        answering: Answering,
        stats: Arc<ModelStats>,
    ) -> Self {
        DefaultScheduler {
            pool,
            io,
            answering,
            stats,
        }
    }

    pub fn submit<'a>(&self, submission: Submission<'a>) -> Result<Completion<'a>> {
        if self.answering.lists {
            return self.submit_request(submission);
        }
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
            // An inline instance answers before this returns; nothing here
            // holds a lock its reply needs.
            self.pool
                .submit_direct(Work {
                    job: Job::Batch { inputs, outputs },
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

    /// A request for a backend that takes requests apart: it answers
    /// through its responder (once, or any number of times when the model
    /// is decoupled); the execution's end is counted here.
    fn submit_request<'a>(&self, submission: Submission<'a>) -> Result<Completion<'a>> {
        let (answer, completion) = Answer::new(self.answering.decoupled);
        let batch = submission.batch;
        let request = BackendRequest {
            outputs: submission.output_names(),
            info: submission.info(),
            respond: Responder::new(answer.into_sink(), submission.enqueued),
            reschedule: None,
            inputs: submission.inputs,
        };
        let stats = Arc::clone(&self.stats);
        let started = request.respond.clone();
        // An execution that ran counts, failed or not (Triton counts a
        // Python model's raising execute too); a request cancelled before
        // the instance took it did not run.
        let counted = move |done: Done| {
            if started.was_started() {
                stats.record_execution(batch, (done.input, done.compute, done.output));
            }
        };
        let gauge = &self.stats.pending;
        pending(gauge, || {
            self.pool
                .submit(Work {
                    job: Job::Requests(vec![request]),
                    enqueued: submission.enqueued,
                    reply: Reply::Callback(Box::new(counted)),
                    pending: Some((Arc::clone(gauge), 1)),
                    gather: std::time::Duration::ZERO,
                })
                .map_err(|(e, work)| {
                    // Refused: the request is answered by the error
                    // returned, not through its responder.
                    if let Job::Requests(requests) = work.job {
                        for r in requests {
                            r.respond.finish(|| e.clone());
                        }
                    }
                    e
                })
        })?;
        Ok(completion)
    }
}
