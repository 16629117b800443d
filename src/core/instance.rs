//! Model instances on their own OS threads: the boundary between the async
//! runtime and blocking backend code.
//!
//! An `InstancePool` owns one named thread per instance (`trtis:<model>:<n>`)
//! and either one bounded queue they all take work from (Triton's default
//! scheduler: FIFO, no batching) or a `WorkSource` (either batcher, which
//! forms a batch on the thread of the instance that takes it). The queue
//! wakes the instance that went idle last (`instance::work_queue`), so a lightly
//! loaded model keeps running on one instance whose data is still in the
//! caches. Backends are loaded on their instance's
//! thread; `submit` never blocks (a full queue is an `Unavailable` error);
//! a request whose caller went away (or whose `CancelToken` is set) is
//! dropped, not computed; a panicking backend fails that request, not the
//! server.
//!
//! A backend with a `Pipeline` (the Python backend) runs pipelined
//! (`run_pipelined`): while one batch runs, the instance watches its queue
//! and hands the backend the next batch as soon as it comes, so the
//! backend's process finds it waiting when the batch before ends instead
//! of sleeping until the instance thread has turned round. At most one batch
//! waits so; not with the rate limiter (whose resources an instance holds
//! for one execution at a time).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{mpsc, Arc};

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::core::backend::{BatchExec, Instance, ListExec, Wake};
use crate::core::error::{Error, Result};
use crate::core::rate_limit::Claim;
use crate::core::responder::Responder;
pub use crate::core::responder::{BackendRequest, Done};
use crate::core::types::Tensor;
use work_queue::{Refused, WorkQueue};

mod pipeline;
use pipeline::run_pipelined;
mod work_queue;

/// What an instance runs, in its execution mode (`backend::Instance`).
pub enum Job {
    /// A batch of concatenated tensors: the inputs in the model config's
    /// order, and the output names to produce.
    Batch {
        inputs: Vec<Tensor>,
        outputs: Vec<String>,
    },
    /// A batch as its requests, each answering through its own responder;
    /// the work's `reply` hears only how the execution ended (`Ok` with no
    /// tensors, or the error that failed the requests still unanswered).
    Requests(Vec<BackendRequest>),
}

/// One execution's work for an instance.
pub struct Work {
    pub job: Job,
    /// When the request entered the queue.
    pub enqueued: Instant,
    /// Where the result goes.
    pub reply: Reply,
    /// The model's pending-request gauge and how many requests this work
    /// holds: decremented when an instance takes it.
    pub pending: Option<(Arc<std::sync::atomic::AtomicI64>, i64)>,
    /// Time the scheduler spent gathering `inputs` (compute_input).
    pub gather: Duration,
}

/// Where a finished request goes.
pub enum Reply {
    /// To one waiting caller; closed when the caller has gone away.
    Caller(oneshot::Sender<Done>),
    /// To a function run on the instance thread (the dynamic batcher splits
    /// a batch's outputs among its requests there).
    Callback(Box<dyn FnOnce(Done) + Send>),
}

impl Reply {
    pub fn is_closed(&self) -> bool {
        matches!(self, Reply::Caller(tx) if tx.is_closed())
    }

    pub fn send(self, done: Done) {
        match self {
            Reply::Caller(tx) => {
                let _ = tx.send(done);
            }
            Reply::Callback(f) => f(done),
        }
    }
}

/// A thread name as Linux keeps it (15 bytes).
pub fn thread_name(name: &str) -> String {
    let mut end = name.len().min(15);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_string()
}

/// How to create one instance (called on the instance's own thread).
pub type Load = Box<dyn FnOnce() -> Result<Instance> + Send>;

/// Where an instance of a pool comes from.
pub enum Loader {
    /// Loaded (and warmed up) on its thread.
    Fresh(Load),
    /// An instance of the pool this one replaces (`InstancePool::hand_over`),
    /// which arrives when that pool's thread for it ends: a reload that
    /// changes only the instance groups keeps the instances it still has.
    /// Counted ready at once; its thread takes work once it arrives.
    Handed(mpsc::Receiver<Instance>),
}

impl Loader {
    /// A fresh instance made by `load`.
    pub fn fresh(load: impl FnOnce() -> Result<Instance> + Send + 'static) -> Self {
        Loader::Fresh(Box::new(load))
    }
}

/// Per instance thread: where its instance goes when the thread ends (the
/// pool that replaces this one), else it is dropped there.
type Successors = Arc<std::sync::Mutex<Vec<Option<mpsc::Sender<Instance>>>>>;

/// Where the instance threads take their work from instead of the pool's
/// queue: a scheduler that forms the work on the taking thread (the
/// dynamic batcher: the instance that is idle forms its own batch, so a
/// request crosses from the receiving thread to the instance thread that
/// runs it and nothing else).
pub trait WorkSource: Send + Sync {
    /// The next work for instance `taker` (numbered from 0), waiting as
    /// long as it takes; None once the source is closed and drained, which
    /// ends the instance's thread.
    fn take(&self, taker: usize) -> Option<Work>;

    /// Ends the takers' waits: `take` gives what is left, then None (the
    /// pool closes it when it goes, a failed start included).
    fn close(&self);
}

/// The instances of one model version and their queue.
pub struct InstancePool {
    /// The queue the instances share (unless they take their work from a
    /// `source`); closed when the pool goes, which lets the threads exit.
    queue: Arc<WorkQueue<Work>>,
    /// Joined on drop.
    threads: Vec<JoinHandle<()>>,
    label: String,
    /// An instance run on the submitting thread (`submit_direct`).
    inline: Option<std::sync::Mutex<Box<dyn BatchExec>>>,
    /// Where the instances take their work, if not from `queue`.
    source: Option<Arc<dyn WorkSource>>,
    /// Instances promised to the pool that replaces this one.
    successors: Successors,
    /// Set when the pool goes: a thread still waiting for a handed-over
    /// instance gives up.
    closing: Arc<std::sync::atomic::AtomicBool>,
}

impl InstancePool {
    /// Starts one thread per loader and waits until every instance loaded;
    /// the first load error fails the whole pool. The instances share one
    /// queue (`submit`), or with a `source` take their work from it
    /// instead (a batcher's; nothing is submitted then).
    /// `claims` holds, per instance, what the rate limiter must grant
    /// before each execution (none without `--rate-limit`).
    pub fn start(
        label: &str,
        loaders: Vec<Loader>,
        claims: Vec<Option<Claim>>,
        queue_capacity: usize,
        source: Option<Arc<dyn WorkSource>>,
    ) -> Result<Self> {
        let queue = Arc::new(WorkQueue::new(queue_capacity, loaders.len()));
        let (ready_tx, ready_rx) = mpsc::channel::<Result<()>>();
        let mut threads = Vec::new();
        let count = loaders.len();
        let successors: Successors = Arc::new(std::sync::Mutex::new(
            std::iter::repeat_with(|| None).take(count).collect(),
        ));
        let closing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut claims = claims.into_iter();
        for (i, loader) in loaders.into_iter().enumerate() {
            let claim = claims.next().flatten();
            let queue = Arc::clone(&queue);
            let ready = ready_tx.clone();
            let name = thread_name(&format!("trtis:{label}:{i}"));
            let from_source = source.clone();
            let successors = Arc::clone(&successors);
            let closing = Arc::clone(&closing);
            let handle = std::thread::Builder::new()
                .name(name)
                .spawn(move || {
                    let from = match &from_source {
                        Some(source) => TakeFrom::Source(source.as_ref(), i),
                        None => TakeFrom::Queue(&queue, i),
                    };
                    if let Some(instance) = run_instance(loader, claim, from, ready, &closing) {
                        let next = successors.lock().unwrap_or_else(|p| p.into_inner())[i].take();
                        if let Some(next) = next {
                            // The replacing pool's thread waits for it; if
                            // that pool is gone already, it is dropped here.
                            let _ = next.send(instance);
                        }
                    }
                })
                .map_err(|e| Error::internal(format!("failed to start an instance thread: {e}")))?;
            threads.push(handle);
        }
        drop(ready_tx);
        let pool = InstancePool {
            queue,
            threads,
            label: label.to_string(),
            inline: None,
            source,
            successors,
            closing,
        };
        for _ in 0..count {
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(Error::internal("an instance thread exited while loading")),
            }
        }
        Ok(pool)
    }

    /// How many instances the pool runs.
    pub fn instances(&self) -> usize {
        self.threads.len()
    }

    /// Whether every instance is promised to a replacing pool (an instance
    /// update that removes none).
    pub fn hands_over_all(&self) -> bool {
        let successors = self.successors.lock().unwrap_or_else(|p| p.into_inner());
        successors.iter().all(Option::is_some)
    }

    /// Promises instance `i` to a pool that replaces this one: when this
    /// pool goes (its queue closed and drained), that instance thread hands
    /// its instance to the returned receiver instead of dropping it. Pass
    /// it as `Loader::Handed` to the new pool.
    pub fn hand_over(&self, i: usize) -> Option<mpsc::Receiver<Instance>> {
        let mut successors = self.successors.lock().unwrap_or_else(|p| p.into_inner());
        // (A promise made before, to a pool that failed to start, is void.)
        let slot = successors.get_mut(i)?;
        let (tx, rx) = mpsc::channel();
        *slot = Some(tx);
        Some(rx)
    }

    /// Runs work given to `submit_direct` on the submitting thread with
    /// `instance` (`backend::inline_instance`: an execution that is a few
    /// moves of memory, not worth a thread hop).
    pub fn run_inline(&mut self, instance: Box<dyn BatchExec>) {
        self.inline = Some(std::sync::Mutex::new(instance));
    }

    /// As `submit`, but with an inline instance (`run_inline`) the work
    /// runs now, on this thread, and its reply is sent before this returns.
    /// Not for a caller whose reply callback needs a lock it holds.
    #[allow(clippy::result_large_err)]
    pub fn submit_direct(&self, mut work: Work) -> std::result::Result<(), (Error, Work)> {
        let Some(inline) = &self.inline else {
            return self.submit(work);
        };
        let (inputs, outputs) = match work.job {
            Job::Batch { inputs, outputs } => (inputs, outputs),
            job => return self.submit(Work { job, ..work }),
        };
        leave_queue(&mut work.pending);
        if work.reply.is_closed() {
            return Ok(());
        }
        let taken = Instant::now();
        let result = {
            let mut instance = inline.lock().unwrap_or_else(|p| p.into_inner());
            guarded("executing the request", || {
                instance.execute(inputs, &outputs)
            })
        };
        let parameters = inline
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .response_parameters();
        let done = Done {
            result,
            queue: (taken - work.enqueued).saturating_sub(work.gather),
            compute: taken.elapsed(),
            input: work.gather,
            output: Duration::ZERO,
            rejected: false,
            parameters,
            last: true,
        };
        work.reply.send(done);
        Ok(())
    }

    /// Queues work for the next free instance; refused work comes back
    /// with the reason.
    #[allow(clippy::result_large_err)] // the work comes back whole, by design
    pub fn submit(&self, work: Work) -> std::result::Result<(), (Error, Work)> {
        let unloading = || Error::unavailable(format!("model '{}' is unloading", self.label));
        self.queue.push(work).map_err(|e| match e {
            Refused::Full(work) => (
                Error::unavailable(format!(
                    "inference request queue of model '{}' is full",
                    self.label
                )),
                work,
            ),
            Refused::Closed(work) => (unloading(), work),
        })
    }
}

impl Drop for InstancePool {
    fn drop(&mut self) {
        self.closing
            .store(true, std::sync::atomic::Ordering::SeqCst);
        // Closing the queue ends each thread after the work already queued.
        self.queue.close();
        if let Some(source) = &self.source {
            source.close();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The work leaves the queue: the model's pending-request gauge goes down
/// by its requests, once.
fn leave_queue(pending: &mut Option<(Arc<std::sync::atomic::AtomicI64>, i64)>) {
    if let Some((gauge, n)) = pending.take() {
        gauge.fetch_sub(n, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Ends the requests cancelled while they waited with Triton's CANCELLED
/// and leaves them out.
fn leave_out_cancelled(requests: &mut Vec<BackendRequest>) {
    if requests.iter().any(|r| r.info.cancel.is_cancelled()) {
        requests.retain(|r| {
            let cancelled = r.info.cancel.is_cancelled();
            if cancelled {
                r.respond.fail(Error::cancelled());
            }
            !cancelled
        });
    }
}

/// What a panicking backend's execution ends with.
fn panicked(what: &str) -> Error {
    Error::internal(format!("the backend panicked while {what}"))
}

/// Runs backend code; a panic becomes an error (the instance lives on).
fn guarded<T>(what: &str, run: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(run)).unwrap_or_else(|_| Err(panicked(what)))
}

/// Runs a batch of requests that answer on their own; when the execution
/// fails, the requests it left unanswered get its error. A request
/// cancelled while it waited is not run: it ends with Triton's CANCELLED;
/// a batch left with no request is not run at all (nor counted).
fn execute_requests(
    instance: &mut dyn ListExec,
    mut requests: Vec<BackendRequest>,
) -> Result<Vec<Tensor>> {
    leave_out_cancelled(&mut requests);
    if requests.is_empty() {
        return Err(Error::cancelled());
    }
    let responders: Vec<Responder> = requests.iter().map(|r| r.respond.clone()).collect();
    for r in &responders {
        r.start();
    }
    let result = guarded("executing the requests", || {
        instance.execute_requests(requests)
    });
    if let Err(e) = &result {
        for r in &responders {
            r.fail(e.clone());
        }
    }
    result.map(|()| Vec::new())
}

/// Where an instance thread takes its work: the pool's queue (as taker
/// `n`), or a scheduler's `WorkSource` (as instance `n`).
#[derive(Clone, Copy)]
enum TakeFrom<'a> {
    Queue(&'a WorkQueue<Work>, usize),
    Source(&'a dyn WorkSource, usize),
}

impl TakeFrom<'_> {
    fn take(&self) -> Option<Work> {
        match self {
            TakeFrom::Queue(queue, taker) => queue.take(*taker),
            TakeFrom::Source(source, taker) => source.take(*taker),
        }
    }
}

/// Runs one instance until its work ends; returns the instance (for the
/// pool that replaces this one), None when it never loaded.
fn run_instance(
    loader: Loader,
    claim: Option<Claim>,
    from: TakeFrom<'_>,
    ready: mpsc::Sender<Result<()>>,
    closing: &std::sync::atomic::AtomicBool,
) -> Option<Instance> {
    let mut instance = match loader {
        Loader::Fresh(load) => match guarded("loading", load) {
            Ok(instance) => {
                let _ = ready.send(Ok(()));
                instance
            }
            Err(e) => {
                let _ = ready.send(Err(e));
                return None;
            }
        },
        Loader::Handed(from_before) => {
            let _ = ready.send(Ok(()));
            loop {
                match from_before.recv_timeout(Duration::from_millis(20)) {
                    Ok(instance) => break instance,
                    // This pool went before the instance came (its start
                    // failed, or it was unloaded at once).
                    Err(mpsc::RecvTimeoutError::Timeout)
                        if closing.load(std::sync::atomic::Ordering::SeqCst) =>
                    {
                        return None
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => {
                        crate::core::logging::log(
                            'E',
                            "an instance kept across a reload was lost (its thread ended without it); the model runs with one instance fewer",
                        );
                        return None;
                    }
                }
            }
        }
    };
    drop(ready);
    if let (TakeFrom::Queue(queue, taker), Instance::Lists(lists)) = (from, &mut instance) {
        if claim.is_none() && lists.pipeline().is_some() {
            if let Ok(wake) = Wake::new() {
                let ran = match lists.pipeline() {
                    Some(pipe) => {
                        run_pipelined(pipe, queue, taker, Arc::new(wake));
                        true
                    }
                    None => false,
                };
                if ran {
                    return Some(instance);
                }
            }
        }
    }
    loop {
        let Some(mut work) = from.take() else {
            return Some(instance);
        };
        leave_queue(&mut work.pending);
        if work.reply.is_closed() {
            continue; // the caller went away: do not compute it
        }
        // The rate limiter's turn: the instance waits for its resources
        // and holds them while it runs (Triton counts the wait as queue).
        let permit = claim.as_ref().map(Claim::acquire);
        let taken = Instant::now();
        let result = match (&mut instance, work.job) {
            (Instance::Batches(batches), Job::Batch { inputs, outputs }) => {
                guarded("executing the request", || {
                    batches.execute(inputs, &outputs)
                })
            }
            (Instance::Lists(lists), Job::Requests(requests)) => {
                execute_requests(lists.as_mut(), requests)
            }
            (_, job) => Err(other_mode(job)),
        };
        let total = taken.elapsed();
        drop(permit);
        // The backend's own split of its time (zero where it does not
        // measure): the rest is the model run.
        let ((input, output), parameters) = match &instance {
            Instance::Batches(b) => (b.timing(), b.response_parameters()),
            Instance::Lists(_) => (Default::default(), None),
        };
        let done = Done {
            result,
            // The scheduler's gathering happened after the request was
            // queued but is compute_input, not queue time.
            queue: (taken - work.enqueued).saturating_sub(work.gather),
            compute: total.saturating_sub(input + output),
            input: work.gather + input,
            output,
            rejected: false,
            parameters,
            last: true,
        };
        // A panicking reply callback (a bug) must not take the instance
        // thread with it.
        if catch_unwind(AssertUnwindSafe(|| work.reply.send(done))).is_err() {
            crate::core::logging::log('E', "a batch's completion handler panicked");
        }
    }
}

/// Work of the mode the instance does not run (a scheduler's bug: the
/// instance's mode and the schedulers' both come from the catalog): its
/// requests fail, and so does the execution.
fn other_mode(job: Job) -> Error {
    let e = Error::internal(
        "this instance runs the other execution mode (batches or lists of requests)",
    );
    if let Job::Requests(requests) = job {
        for r in requests {
            r.respond.fail(e.clone());
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::error::ErrorKind;
    use crate::core::responder::Sink;
    use crate::core::types::{CancelToken, RequestInfo};
    use std::sync::Mutex;

    /// Answers each request with nothing and remembers their ids.
    struct Recorder(Arc<Mutex<Vec<String>>>);

    impl ListExec for Recorder {
        fn execute_requests(&mut self, requests: Vec<BackendRequest>) -> Result<()> {
            for r in requests {
                self.0.lock().unwrap().push(r.info.id.clone());
                r.respond.respond(Ok(Vec::new()), true);
            }
            Ok(())
        }
    }

    fn request(id: &str, cancel: &CancelToken) -> (BackendRequest, mpsc::Receiver<Done>) {
        let (tx, rx) = mpsc::channel();
        let respond = Responder::new(
            Sink::Once(Box::new(move |d| {
                let _ = tx.send(d);
            })),
            Instant::now(),
        );
        let info = RequestInfo {
            id: id.to_string(),
            cancel: cancel.clone(),
            ..Default::default()
        };
        let request = BackendRequest {
            inputs: Vec::new(),
            outputs: Vec::new(),
            info,
            respond,
            reschedule: None,
        };
        (request, rx)
    }

    fn run(pool: &InstancePool, requests: Vec<BackendRequest>) -> Done {
        let (tx, rx) = mpsc::channel();
        let work = Work {
            job: Job::Requests(requests),
            enqueued: Instant::now(),
            reply: Reply::Callback(Box::new(move |d| {
                let _ = tx.send(d);
            })),
            pending: None,
            gather: Duration::ZERO,
        };
        assert!(pool.submit(work).is_ok());
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the execution ends")
    }

    /// Records the thread it runs on.
    struct WhereRun(Arc<Mutex<Vec<std::thread::ThreadId>>>);

    impl BatchExec for WhereRun {
        fn execute(&mut self, inputs: Vec<Tensor>, _: &[String]) -> Result<Vec<Tensor>> {
            self.0.lock().unwrap().push(std::thread::current().id());
            Ok(inputs)
        }
    }

    fn batch_work(reply: oneshot::Sender<Done>) -> Work {
        Work {
            job: Job::Batch {
                inputs: vec![Tensor {
                    name: "X".into(),
                    datatype: crate::core::types::DataType::Uint8,
                    shape: vec![1],
                    data: vec![7],
                }],
                outputs: vec!["X".into()],
            },
            enqueued: Instant::now(),
            reply: Reply::Caller(reply),
            pending: None,
            gather: Duration::ZERO,
        }
    }

    #[test]
    fn submit_direct_runs_an_inline_instance_on_the_callers_thread() {
        let threads = Arc::new(Mutex::new(Vec::new()));
        let on_pool = Arc::clone(&threads);
        let loader = Loader::fresh(move || Ok(Instance::Batches(Box::new(WhereRun(on_pool)))));
        let mut pool = InstancePool::start("m", vec![loader], vec![None], 4, None).unwrap();

        // Without an inline instance: the instance thread runs it.
        let (tx, mut rx) = oneshot::channel();
        assert!(pool.submit_direct(batch_work(tx)).is_ok());
        let done = loop {
            match rx.try_recv() {
                Ok(done) => break done,
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        };
        assert_eq!(done.result.unwrap()[0].data, vec![7]);
        assert_ne!(threads.lock().unwrap()[0], std::thread::current().id());

        // With one: this thread, answered before submit_direct returns.
        pool.run_inline(Box::new(WhereRun(Arc::clone(&threads))));
        let (tx, mut rx) = oneshot::channel();
        assert!(pool.submit_direct(batch_work(tx)).is_ok());
        let done = rx.try_recv().expect("answered at once");
        assert_eq!(done.result.unwrap()[0].data, vec![7]);
        assert_eq!(threads.lock().unwrap()[1], std::thread::current().id());
    }

    #[test]
    fn a_request_cancelled_before_its_execution_is_not_run() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let recorder = Arc::clone(&seen);
        let loader = Loader::fresh(move || Ok(Instance::Lists(Box::new(Recorder(recorder)))));
        let pool = InstancePool::start("m", vec![loader], vec![None], 4, None).unwrap();

        let (live, cancelled) = (CancelToken::new(), CancelToken::new());
        cancelled.cancel();
        let (a, a_rx) = request("a", &live);
        let (b, b_rx) = request("b", &cancelled);
        let done = run(&pool, vec![a, b]);
        assert!(done.result.is_ok(), "the batch ran for the request left");
        assert_eq!(*seen.lock().unwrap(), ["a"]);
        assert!(a_rx.recv().unwrap().result.is_ok());
        let e = b_rx.recv().unwrap().result.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Cancelled);

        // Nothing left to run: no execution at all, and it fails (so it is
        // not counted as one).
        let (c, c_rx) = request("c", &cancelled);
        let done = run(&pool, vec![c]);
        assert_eq!(done.result.unwrap_err().kind, ErrorKind::Cancelled);
        assert_eq!(
            c_rx.recv().unwrap().result.unwrap_err().kind,
            ErrorKind::Cancelled
        );
        assert_eq!(*seen.lock().unwrap(), ["a"]);
    }
}
