//! Requests for a backend that takes a batch's requests apart (the Python
//! backend hands `execute` a list): where a queued request's answers go,
//! before and after an instance takes it (`Answer`), and a list of
//! requests as one execution's work (`list_work`). The default scheduler
//! and both batchers use them.

use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::Completion;
use crate::core::instance::{BackendRequest, Done, Job, Reply, Work};
use crate::core::responder::{Responder, Sink};

/// Where a queued request's answers go: one answer, or (a decoupled model)
/// a stream of them, ended by dropping the sender.
pub enum Answer {
    Once(oneshot::Sender<Done>),
    Stream(crate::core::responder::StreamTx),
}

impl Answer {
    /// A request's answer channel and the completion its caller awaits:
    /// one answer, or any number when the model is decoupled.
    pub(super) fn new<'a>(decoupled: bool) -> (Answer, Completion<'a>) {
        if decoupled {
            let (tx, completion) = Completion::stream();
            (Answer::Stream(tx), completion)
        } else {
            let (tx, rx) = oneshot::channel();
            (Answer::Once(tx), Completion::one(rx))
        }
    }

    /// Sends one answer (a stream's last: it ends with it).
    pub(super) fn send(self, done: Done) {
        match self {
            Answer::Once(tx) => {
                let _ = tx.send(done);
            }
            Answer::Stream(tx) => {
                let _ = tx.send(done);
            }
        }
    }

    /// Whether the caller went away.
    pub(super) fn gone(&self) -> bool {
        match self {
            Answer::Once(tx) => tx.is_closed(),
            Answer::Stream(tx) => tx.is_closed(),
        }
    }

    /// Where the request's responder sends its answers once an instance
    /// took it.
    pub(super) fn into_sink(self) -> Sink {
        match self {
            Answer::Once(tx) => Sink::Once(Box::new(move |done| {
                let _ = tx.send(done);
            })),
            Answer::Stream(tx) => Sink::Stream(tx),
        }
    }
}

/// `requests` as one execution's work, for the instance that takes it from
/// a batcher; `finish` hears how the execution ended, on the instance's
/// thread (each request answers through its own responder), with the batch
/// size that ran: the `sizes` of the requests the instance started (one
/// cancelled while it waited is left out of the execution, and of its
/// count).
pub(super) fn list_work(
    requests: Vec<BackendRequest>,
    sizes: Vec<usize>,
    enqueued: Instant,
    finish: impl FnOnce(Done, usize) + Send + 'static,
) -> Work {
    let watched: Vec<(Responder, usize)> = requests
        .iter()
        .map(|r| r.respond.clone())
        .zip(sizes)
        .collect();
    let finish = move |done: Done| {
        let ran = watched
            .iter()
            .filter(|(r, _)| r.was_started())
            .map(|(_, n)| n)
            .sum();
        finish(done, ran)
    };
    Work {
        job: Job::Requests(requests),
        enqueued,
        reply: Reply::Callback(Box::new(finish)),
        pending: None,
        gather: Duration::ZERO,
    }
}
