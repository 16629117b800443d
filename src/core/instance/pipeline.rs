//! The instance loop of a backend with a `Pipeline` (the Python backend):
//! while a batch runs, the queue is watched and the next batch is handed
//! over at once, so the backend finds it waiting when the one before ends.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::work_queue::{Signal, WorkQueue};
use super::{guarded, leave_out_cancelled, leave_queue, panicked, Job, Reply, Work};
use crate::core::backend::{Pipeline, Wake};
use crate::core::error::{Error, Result};
use crate::core::responder::{Done, Responder};

/// How many batches a pipelined backend holds at most: the one running and
/// the one waiting for it.
const PIPELINE_DEPTH: usize = 2;

/// A batch handed to a pipelined backend.
struct Sent {
    reply: Reply,
    enqueued: Instant,
    gather: Duration,
    /// Each request's responder and cancel token.
    requests: Vec<(Responder, crate::core::types::CancelToken)>,
    /// The model's pending-request gauge, decremented when the batch
    /// begins (it waits as if in the queue until then).
    pending: Option<(Arc<std::sync::atomic::AtomicI64>, i64)>,
    /// When it began to run: when it was sent with nothing before it, else
    /// when the batch before it ended.
    began: Option<Instant>,
}

impl Sent {
    /// The batch begins to run now: its requests are started (their queue
    /// time ends here), but for those cancelled while they waited, which
    /// the backend leaves out (they end CANCELLED and do not count as
    /// executed).
    fn begin(&mut self) {
        self.began = Some(Instant::now());
        leave_queue(&mut self.pending);
        for (r, cancel) in &self.requests {
            if !cancel.is_cancelled() {
                r.start();
            }
        }
    }

    /// The batch ended with `result`: its requests left unanswered fail
    /// with the error, and its reply hears how it ended.
    fn end(mut self, result: Result<()>) {
        let now = Instant::now();
        let began = self.began.unwrap_or(now);
        leave_queue(&mut self.pending);
        if let Err(e) = &result {
            for (r, _) in &self.requests {
                r.fail(e.clone());
            }
        }
        let done = Done {
            result: result.map(|()| Vec::new()),
            queue: began
                .saturating_duration_since(self.enqueued)
                .saturating_sub(self.gather),
            compute: now.saturating_duration_since(began),
            input: self.gather,
            output: Duration::ZERO,
            rejected: false,
            parameters: None,
            last: true,
        };
        if catch_unwind(AssertUnwindSafe(|| self.reply.send(done))).is_err() {
            crate::core::logging::log('E', "a batch's completion handler panicked");
        }
    }
}

/// The instance loop of a backend with a `Pipeline`: as `run_instance`'s,
/// but while a batch runs the queue is watched (`wake` signalled when work
/// comes) and the next batch is sent at once. Requests cancelled while
/// they waited in the queue are left out as in `execute_requests`; one
/// cancelled after it was sent and before its batch began is left out by
/// the backend (the Python worker reads the `cancel` that came behind the
/// batch before it runs it), and once its batch runs, the backend tells
/// its model.
pub(super) fn run_pipelined(
    pipe: &mut dyn Pipeline,
    queue: &WorkQueue<Work>,
    taker: usize,
    wake: Arc<Wake>,
) {
    let signal: Signal = {
        let wake = Arc::clone(&wake);
        Arc::new(move || wake.signal())
    };
    let mut sent: std::collections::VecDeque<Sent> = std::collections::VecDeque::new();
    loop {
        let mut watching = false;
        let work = if sent.is_empty() {
            match queue.take(taker) {
                Some(work) => Some(work),
                None => return,
            }
        } else if sent.len() < PIPELINE_DEPTH && pipe.can_send() {
            wake.clear();
            watching = true;
            queue.try_take_or_watch(taker, &signal)
        } else {
            None
        };
        if let Some(work) = work {
            send(pipe, work, &mut sent);
            continue;
        }
        // Something runs: wait for it to end (or, watching, for work).
        let ended = catch_unwind(AssertUnwindSafe(|| {
            pipe.finish(watching.then_some(wake.as_ref()))
        }))
        .unwrap_or_else(|_| Some(Err(panicked("executing the requests"))));
        if let Some(result) = ended {
            let first = sent.pop_front().expect("a batch was running");
            first.end(result);
            if let Some(next) = sent.front_mut() {
                next.begin();
            }
        }
    }
}

/// Hands `work` to the backend (or ends it now: its caller went away, all
/// its requests were cancelled, or the backend refused it).
fn send(pipe: &mut dyn Pipeline, mut work: Work, sent: &mut std::collections::VecDeque<Sent>) {
    if work.reply.is_closed() {
        leave_queue(&mut work.pending);
        return; // the caller went away: do not compute it
    }
    let (mut requests, was_batch) = match work.job {
        Job::Requests(requests) => (requests, false),
        Job::Batch { .. } => (Vec::new(), true),
    };
    leave_out_cancelled(&mut requests);
    let mut batch = Sent {
        reply: work.reply,
        enqueued: work.enqueued,
        gather: work.gather,
        requests: requests
            .iter()
            .map(|r| (r.respond.clone(), r.info.cancel.clone()))
            .collect(),
        pending: work.pending,
        began: None,
    };
    if was_batch {
        batch.end(Err(Error::internal(
            "a pipelined backend takes lists of requests, not batches",
        )));
        return;
    }
    if requests.is_empty() {
        batch.end(Err(Error::cancelled()));
        return;
    }
    if sent.is_empty() {
        batch.begin();
    }
    let result = guarded("executing the requests", || pipe.send(requests));
    match result {
        Ok(()) => sent.push_back(batch),
        Err(e) => {
            batch.began.get_or_insert_with(Instant::now);
            batch.end(Err(e));
        }
    }
}
