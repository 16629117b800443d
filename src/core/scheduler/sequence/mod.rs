//! The sequence batcher (`sequence_batching` in the config): routes every
//! request of a sequence to one instance (`sequence` keeps the places, the
//! backlog and the idle clock), fills the control inputs (START, END,
//! READY, CORRID) of each batch row, and carries implicit state from one
//! request of a sequence to the next.
//!
//! It runs on its own thread, waiting on one condition variable for new
//! requests, finished batches, a batch's queue delay and the next idle
//! deadline. Each instance has its own queue in the pool, and an instance
//! runs one batch at a time, so a sequence's requests run in order and its
//! state is stored before its next request is batched.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::sequence::{Next, Refusal, Row, SeqConfig, Sequences, Strategy};
use super::split;
use super::worker::{self, Batcher, Worker};
use crate::core::config::pb::model_config::SchedulingChoice;
use crate::core::config::pb::model_sequence_batching::control::Kind as PbKind;
use crate::core::config::pb::model_sequence_batching::initial_state::StateData;
use crate::core::config::pb::model_sequence_batching::StrategyChoice;
use crate::core::config::ModelConfig;
use crate::core::error::{Error, Result};
use crate::core::instance::{Done, InstancePool, Reply, Work};
use crate::core::types::{element_count, DataType, SequenceId, Tensor};

/// A control input's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlKind {
    Start,
    End,
    Ready,
    CorrId,
}

/// One control input tensor the batcher fills.
#[derive(Debug, Clone)]
pub struct Control {
    pub name: String,
    pub kind: ControlKind,
    pub datatype: DataType,
    /// The encoded element for false and for true (START, END, READY).
    pub values: [Vec<u8>; 2],
}

/// One implicit state.
#[derive(Debug, Clone)]
pub struct StateSpec {
    pub input: String,
    pub output: String,
    pub datatype: DataType,
    /// The state a sequence starts with, per request (no batch dim).
    pub initial_shape: Vec<i64>,
    pub initial_data: Vec<u8>,
}

/// Everything the batcher needs from the model config.
#[derive(Debug, Clone)]
pub struct SeqSettings {
    pub seq: SeqConfig,
    pub controls: Vec<Control>,
    pub states: Vec<StateSpec>,
    /// `max_batch_size > 0`: tensors have a batch dimension.
    pub batching: bool,
}

impl SeqSettings {
    /// The settings of a model with `sequence_batching` (None otherwise).
    /// `model_dir` holds `initial_state/` files.
    pub fn from_config(
        c: &ModelConfig,
        instances: usize,
        model_dir: &Path,
    ) -> Result<Option<Self>> {
        let Some(SchedulingChoice::SequenceBatching(sb)) = &c.scheduling_choice else {
            return Ok(None);
        };
        let max_batch = c.max_batch_size.max(1) as usize;
        let idle = Duration::from_micros(sb.max_sequence_idle_microseconds);
        // `oldest.preserve_ordering` needs nothing more: an instance runs
        // one batch at a time and answers it before the next, so answers
        // leave each instance in batch order (Triton orders per instance).
        let seq = match &sb.strategy_choice {
            Some(StrategyChoice::Oldest(o)) => {
                let preferred = super::queue::preferred_sizes(&o.preferred_batch_size);
                SeqConfig {
                    strategy: Strategy::Oldest,
                    instances,
                    // Triton: max(1, max_batch_size) when not set.
                    places: if o.max_candidate_sequences > 0 {
                        o.max_candidate_sequences as usize
                    } else {
                        max_batch
                    },
                    max_batch,
                    preferred,
                    max_queue_delay: Duration::from_micros(o.max_queue_delay_microseconds),
                    min_slot_utilization: 0.0,
                    idle,
                }
            }
            direct => {
                let d = match direct {
                    Some(StrategyChoice::Direct(d)) => *d,
                    _ => Default::default(),
                };
                SeqConfig {
                    strategy: Strategy::Direct,
                    instances,
                    places: max_batch,
                    max_batch,
                    preferred: vec![],
                    max_queue_delay: Duration::from_micros(d.max_queue_delay_microseconds),
                    min_slot_utilization: d.minimum_slot_utilization,
                    idle,
                }
            }
        };
        let mut controls = Vec::new();
        for input in &sb.control_input {
            for control in &input.control {
                let kind = match PbKind::try_from(control.kind) {
                    Ok(PbKind::ControlSequenceStart) => ControlKind::Start,
                    Ok(PbKind::ControlSequenceEnd) => ControlKind::End,
                    Ok(PbKind::ControlSequenceReady) => ControlKind::Ready,
                    Ok(PbKind::ControlSequenceCorrid) => ControlKind::CorrId,
                    Err(_) => continue,
                };
                let (datatype, values) = if kind == ControlKind::CorrId {
                    let dt = DataType::from_config(control.data_type).ok_or_else(|| {
                        Error::invalid_arg(format!(
                            "sequence batching control '{}' has no valid data_type",
                            input.name
                        ))
                    })?;
                    (dt, [vec![], vec![]])
                } else if control.int32_false_true.len() == 2 {
                    let v = &control.int32_false_true;
                    (
                        DataType::Int32,
                        [v[0].to_le_bytes().to_vec(), v[1].to_le_bytes().to_vec()],
                    )
                } else if control.fp32_false_true.len() == 2 {
                    let v = &control.fp32_false_true;
                    (
                        DataType::Fp32,
                        [v[0].to_le_bytes().to_vec(), v[1].to_le_bytes().to_vec()],
                    )
                } else if control.bool_false_true.len() == 2 {
                    let v = &control.bool_false_true;
                    (DataType::Bool, [vec![v[0] as u8], vec![v[1] as u8]])
                } else {
                    return Err(Error::invalid_arg(format!(
                        "sequence batching control '{}' must have exactly 2 false/true values",
                        input.name
                    )));
                };
                controls.push(Control {
                    name: input.name.clone(),
                    kind,
                    datatype,
                    values,
                });
            }
        }
        let mut states = Vec::new();
        for s in &sb.state {
            let datatype = DataType::from_config(s.data_type).ok_or_else(|| {
                Error::invalid_arg(format!("state '{}' has no valid data_type", s.input_name))
            })?;
            let (shape, data) = match s.initial_state.first() {
                Some(init) => {
                    let shape = init.dims.clone();
                    let data = match &init.state_data {
                        Some(StateData::DataFile(file)) => {
                            let path = model_dir.join("initial_state").join(file);
                            let mut data = std::fs::read(&path).map_err(|e| {
                                Error::invalid_arg(format!(
                                    "failed to read initial state file '{}': {}",
                                    path.display(),
                                    crate::core::error::os_reason(&e)
                                ))
                            })?;
                            // As Triton: the expected bytes of a fixed-size
                            // type, from the start of a longer file.
                            if let (Some(size), Some(n)) = (datatype.size(), element_count(&shape))
                            {
                                data.truncate(size * n);
                            }
                            data
                        }
                        _ => zeros(datatype, &shape),
                    };
                    (shape, data)
                }
                None => {
                    // Variable dims start at 1 (the seed).
                    let shape: Vec<i64> =
                        s.dims.iter().map(|&d| if d < 0 { 1 } else { d }).collect();
                    let data = zeros(datatype, &shape);
                    (shape, data)
                }
            };
            states.push(StateSpec {
                input: s.input_name.clone(),
                output: s.output_name.clone(),
                datatype,
                initial_shape: shape,
                initial_data: data,
            });
        }
        Ok(Some(SeqSettings {
            seq,
            controls,
            states,
            batching: c.max_batch_size > 0,
        }))
    }

    /// The CORRID control, if the model has one.
    pub fn corrid_control(&self) -> Option<&Control> {
        self.controls.iter().find(|c| c.kind == ControlKind::CorrId)
    }

    /// Names the batcher supplies (control and state inputs): not inputs a
    /// client sends.
    pub fn supplied_inputs(&self) -> impl Iterator<Item = &str> {
        self.controls
            .iter()
            .map(|c| c.name.as_str())
            .chain(self.states.iter().map(|s| s.input.as_str()))
    }

    /// A request's (or a batch row's) shape without the batch dimension.
    pub fn row_shape(&self, shape: &[i64]) -> Vec<i64> {
        match shape.split_first() {
            Some((_, rest)) if self.batching => rest.to_vec(),
            _ => shape.to_vec(),
        }
    }

    /// The shape of `n` rows of `row` (the batch dimension first when the
    /// model batches).
    pub fn batch_shape(&self, n: usize, row: &[i64]) -> Vec<i64> {
        if self.batching {
            std::iter::once(n as i64)
                .chain(row.iter().copied())
                .collect()
        } else {
            row.to_vec()
        }
    }

    /// The control and state inputs for a request of `rows` rows that
    /// are each a whole sequence (START, END and READY true, CORRID 0,
    /// initial states): what model warmup adds to its samples.
    pub fn standalone_inputs(&self, rows: usize) -> Vec<Tensor> {
        let shape = |row: &[i64]| self.batch_shape(rows, row);
        let rows = if self.batching { rows } else { 1 };
        let mut out = Vec::new();
        for c in &self.controls {
            let one = match c.kind {
                ControlKind::CorrId => corrid_element(c.datatype, None),
                _ => c.values[1].clone(),
            };
            out.push(Tensor {
                name: c.name.clone(),
                datatype: c.datatype,
                shape: shape(&[1]),
                data: one.repeat(rows),
            });
        }
        for s in &self.states {
            out.push(Tensor {
                name: s.input.clone(),
                datatype: s.datatype,
                shape: shape(&s.initial_shape),
                data: s.initial_data.repeat(rows),
            });
        }
        out
    }
}

/// Zero-filled data of a shape (BYTES: empty strings).
fn zeros(datatype: DataType, shape: &[i64]) -> Vec<u8> {
    let n = element_count(shape).unwrap_or(0);
    vec![0; n * datatype.size().unwrap_or(4)]
}

/// A request waiting in the sequence batcher.
pub struct SeqRequest {
    /// Inputs in the model config's order, batch dimension included.
    pub inputs: Vec<Tensor>,
    pub outputs: Vec<String>,
    pub enqueued: Instant,
    pub reply: oneshot::Sender<Done>,
    pub pending: Arc<AtomicI64>,
    pub id: SequenceId,
    /// The request's `timeout` (µs, 0: none): how long it may wait in the
    /// backlog for its sequence to get a place.
    pub timeout_us: u64,
}

impl std::fmt::Debug for SeqRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeqRequest").field("id", &self.id).finish()
    }
}

struct State {
    seqs: Sequences<SequenceId, SeqRequest>,
    /// Implicit state of each sequence (by serial), per state spec.
    states: HashMap<u64, Vec<Tensor>>,
}

/// The most sequences that may wait for a place (the backlog) in one model
/// version; a new sequence past it is refused (UNAVAILABLE). Triton's
/// backlog has no bound; this one keeps a flood of never-ended sequences
/// from growing the server's memory without end.
pub const MAX_BACKLOG: usize = 16384;

/// The most requests queued in one model version, in places and in the
/// backlog together.
pub const MAX_QUEUED: usize = 65536;

/// What the batcher's thread works with, beside its state.
struct Seq {
    label: String,
    stats: Arc<crate::core::stats::ModelStats>,
    settings: SeqSettings,
}

type Shared = worker::Shared<Seq>;

impl Batcher for Seq {
    type State = State;
    type Context = Arc<InstancePool>;

    fn thread_name(&self) -> String {
        format!("trtis:seq:{}", self.label)
    }

    fn run(shared: &Arc<Shared>, pool: &Arc<InstancePool>) {
        run(shared, pool)
    }

    fn fail_queued(&self, state: &mut State, error: &Error) {
        state.states.clear();
        for r in state.seqs.drain() {
            fail(r, error.clone(), false);
        }
    }
}

/// The sequence batcher of one model version.
pub struct SequenceBatcher {
    worker: Worker<Seq>,
}

/// A shape key for the states a sequence carries (sequences batch together
/// only with equal keys).
fn shape_key(shapes: &[&[i64]]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    shapes.hash(&mut h);
    h.finish() | 1
}

impl SequenceBatcher {
    pub fn start(
        label: &str,
        settings: SeqSettings,
        pool: Arc<InstancePool>,
        stats: Arc<crate::core::stats::ModelStats>,
    ) -> Result<Self> {
        let mut seqs = Sequences::new(settings.seq.clone());
        let initial: Vec<&[i64]> = settings
            .states
            .iter()
            .map(|s| s.initial_shape.as_slice())
            .collect();
        seqs.set_start_key(shape_key(&initial));
        let worker = Worker::start(
            Seq {
                label: label.to_string(),
                stats,
                settings,
            },
            State {
                seqs,
                states: HashMap::new(),
            },
            pool,
        )?;
        Ok(SequenceBatcher { worker })
    }

    pub fn settings(&self) -> &SeqSettings {
        &self.worker.shared().settings
    }

    /// Queues a request of a sequence, or refuses it with Triton's message
    /// (`prefix` is the request id prefix).
    pub fn submit(&self, request: SeqRequest, start: bool, end: bool, prefix: &str) -> Result<()> {
        let shared = self.worker.shared();
        let mut state = self.worker.lock_open(&shared.label)?;
        if state.seqs.queued() >= MAX_QUEUED {
            return Err(Error::unavailable(format!(
                "{prefix}inference request queue is full for model '{}': {MAX_QUEUED} requests are queued",
                shared.label
            )));
        }
        let key = request.id.clone();
        if start && state.seqs.backlog_len() >= MAX_BACKLOG && state.seqs.serial_of(&key).is_none()
        {
            return Err(Error::unavailable(format!(
                "{prefix}sequence backlog is full for model '{}': {MAX_BACKLOG} sequences are waiting for a slot",
                shared.label
            )));
        }
        if start && state.seqs.serial_of(&key).is_some() {
            crate::core::logging::log(
                'W',
                &format!(
                    "sequence {key} for model '{}' has a conflict. The previous sequence did not end before this sequence start. Previous sequence will be terminated early.",
                    shared.label
                ),
            );
        }
        let now = Instant::now();
        let timeout = request.timeout_us;
        match state.seqs.submit(key, start, end, request, now) {
            Ok(serial) if timeout > 0 => {
                state
                    .seqs
                    .set_backlog_deadline(serial, now + Duration::from_micros(timeout));
            }
            Ok(_) => {}
            Err((Refusal::NoStart, r)) => {
                return Err(Error::invalid_arg(format!(
                    "inference request for sequence {} to model '{}' must specify the START flag on the first request of the sequence",
                    r.id, shared.label
                )))
            }
        }
        drop(state);
        self.worker.notify();
        Ok(())
    }

    /// Stops taking requests; the queued ones are sent without waiting for
    /// fuller batches.
    pub fn close(&self) {
        self.worker.close();
    }
}

/// Whether two requests can share a batch: equal input shapes and equal
/// state shapes.
fn compatible(a: (&SeqRequest, u64), b: (&SeqRequest, u64)) -> bool {
    a.1 == b.1
        && a.0.inputs.len() == b.0.inputs.len()
        && a.0
            .inputs
            .iter()
            .zip(&b.0.inputs)
            .all(|(x, y)| x.name == y.name && x.shape == y.shape)
}

/// Answers a request that never reached an instance.
fn fail(r: SeqRequest, error: Error, rejected: bool) {
    r.pending.fetch_sub(1, Ordering::Relaxed);
    let _ = r.reply.send(Done {
        result: Err(error),
        queue: r.enqueued.elapsed(),
        compute: Duration::ZERO,
        rejected,
    });
}

fn run(shared: &Arc<Shared>, pool: &InstancePool) {
    let mut state = shared.state.lock().unwrap();
    loop {
        let open = state.open;
        // Shutting down: queued requests go without waiting for fuller
        // batches, and idle sequences give their places to the backlog at
        // once (its requests still run).
        let now = if open {
            Instant::now()
        } else {
            Instant::now() + Duration::from_secs(86_400)
        };
        for (serial, id) in state.seqs.reap(now) {
            state.states.remove(&serial);
            if open {
                crate::core::logging::verbose(&format!(
                    "Reaper: CORRID {id}: max sequence idle exceeded for model '{}'",
                    shared.label
                ));
            }
        }
        // Backlogged sequences whose requests' timeout passed give up
        // (Triton's message and code).
        let expired = state.seqs.expire_backlog(Instant::now());
        if !expired.is_empty() {
            drop(state);
            for r in expired {
                let e =
                    Error::unavailable("timeout of the corresponding sequence has been expired");
                fail(r, e, true);
            }
            state = shared.state.lock().unwrap();
            continue;
        }
        if !open && state.seqs.queued() == 0 {
            return;
        }
        let mut wake = match (state.seqs.next_idle(), state.seqs.next_backlog_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // Batches and the states their rows carry are taken under the lock;
        // their tensors are built after it is released.
        let mut batches = Vec::new();
        for i in 0..state.seqs.instances() {
            match state.seqs.next(i, now, compatible) {
                Next::Run(batch) => {
                    let rows = take_rows(&shared.settings, &mut state, batch.rows);
                    batches.push((batch.instance, rows));
                }
                Next::WaitUntil(at) => wake = Some(wake.map_or(at, |w| w.min(at))),
                Next::Nothing => {}
            }
        }
        if !batches.is_empty() {
            drop(state);
            for (instance, rows) in batches {
                let work = build(shared, instance, rows);
                if let Err((e, work)) = pool.submit_to(instance, work) {
                    work.reply.send(Done {
                        result: Err(e),
                        queue: Duration::ZERO,
                        compute: Duration::ZERO,
                        rejected: false,
                    });
                }
            }
            state = shared.state.lock().unwrap();
            continue;
        }
        state = match wake {
            Some(at) if open => {
                let wait = at.saturating_duration_since(Instant::now());
                shared.cv.wait_timeout(state, wait).unwrap().0
            }
            _ => shared.cv.wait(state).unwrap(),
        };
    }
}

/// One row of a batch: its request and the states it runs with.
struct RowInfo {
    serial: u64,
    start: bool,
    end: bool,
    request: SeqRequest,
    /// The states this row runs with (the stored ones, taken out of the
    /// batcher and put back if the execution fails, or the initial ones on
    /// START); empty without implicit state.
    states: Vec<Tensor>,
}

/// Takes each row's stored states out of the batcher (under its lock).
fn take_rows(
    settings: &SeqSettings,
    state: &mut State,
    rows: Vec<Option<Row<SeqRequest>>>,
) -> Vec<Option<RowInfo>> {
    rows.into_iter()
        .map(|r| {
            r.map(|Row { serial, entry }| {
                let states = if settings.states.is_empty() {
                    Vec::new()
                } else {
                    match state.states.remove(&serial) {
                        Some(stored) if !entry.start => stored,
                        _ => initial_states(settings),
                    }
                };
                RowInfo {
                    serial,
                    start: entry.start,
                    end: entry.end,
                    request: entry.request,
                    states,
                }
            })
        })
        .collect()
}

/// Builds the batch's tensors (inputs, then controls, then states) and the
/// work that runs it and hands out the results.
fn build(shared: &Arc<Shared>, instance: usize, rows: Vec<Option<RowInfo>>) -> Work {
    let settings = &shared.settings;
    let n = rows.len();
    let template = rows.iter().flatten().next().expect("a batch has a request");
    let batched = |row: &[i64]| settings.batch_shape(n, row);
    let mut inputs = Vec::new();
    for (j, t) in template.request.inputs.iter().enumerate() {
        let per_row = settings.row_shape(&t.shape);
        let null = zeros(t.datatype, &per_row);
        inputs.push(Tensor {
            name: t.name.clone(),
            datatype: t.datatype,
            shape: batched(&per_row),
            data: column(&rows, &null, |r| &r.request.inputs[j].data),
        });
    }
    for c in &settings.controls {
        let mut data = Vec::new();
        for row in &rows {
            let flag = |on: bool| c.values[on as usize].clone();
            let value = match (c.kind, row) {
                (ControlKind::Start, r) => flag(r.as_ref().is_some_and(|r| r.start)),
                (ControlKind::End, r) => flag(r.as_ref().is_some_and(|r| r.end)),
                (ControlKind::Ready, r) => flag(r.is_some()),
                (ControlKind::CorrId, r) => {
                    corrid_element(c.datatype, r.as_ref().map(|r| &r.request.id))
                }
            };
            data.extend_from_slice(&value);
        }
        inputs.push(Tensor {
            name: c.name.clone(),
            datatype: c.datatype,
            shape: batched(&[1]),
            data,
        });
    }
    for (k, spec) in settings.states.iter().enumerate() {
        let template = &template.states[k].shape;
        let null = zeros(spec.datatype, template);
        inputs.push(Tensor {
            name: spec.input.clone(),
            datatype: spec.datatype,
            shape: batched(template),
            data: column(&rows, &null, |r| &r.states[k].data),
        });
    }
    // Outputs: everything any row asked for, and the output states.
    let mut outputs: Vec<String> = Vec::new();
    for r in rows.iter().flatten() {
        for o in &r.request.outputs {
            if !outputs.contains(o) {
                outputs.push(o.clone());
            }
        }
    }
    for spec in &settings.states {
        if !outputs.contains(&spec.output) {
            outputs.push(spec.output.clone());
        }
    }
    for r in rows.iter().flatten() {
        r.request.pending.fetch_sub(1, Ordering::Relaxed);
    }
    let first_enqueued = rows
        .iter()
        .flatten()
        .map(|r| r.request.enqueued)
        .min()
        .unwrap_or_else(Instant::now);
    let finish_shared = Arc::clone(shared);
    let finish = move |done: Done| finish(finish_shared, instance, rows, done);
    Work {
        inputs,
        outputs,
        enqueued: first_enqueued,
        reply: Reply::Callback(Box::new(finish)),
        pending: None,
    }
}

/// One batched tensor's data: each row's piece in row order (`null` for an
/// empty row).
fn column<'a>(
    rows: &'a [Option<RowInfo>],
    null: &'a [u8],
    piece: impl Fn(&'a RowInfo) -> &'a [u8],
) -> Vec<u8> {
    let mut data = Vec::new();
    for row in rows {
        data.extend_from_slice(row.as_ref().map_or(null, &piece));
    }
    data
}

/// The initial value of every implicit state.
fn initial_states(settings: &SeqSettings) -> Vec<Tensor> {
    settings
        .states
        .iter()
        .map(|s| Tensor {
            name: s.input.clone(),
            datatype: s.datatype,
            shape: s.initial_shape.clone(),
            data: s.initial_data.clone(),
        })
        .collect()
}

/// One CORRID element: the row's sequence id in the control's type (0 or
/// "" for an empty row).
fn corrid_element(datatype: DataType, id: Option<&SequenceId>) -> Vec<u8> {
    let number = match id {
        Some(SequenceId::Number(n)) => *n,
        _ => 0,
    };
    match datatype {
        DataType::Uint64 => number.to_le_bytes().to_vec(),
        DataType::Int64 => (number as i64).to_le_bytes().to_vec(),
        DataType::Uint32 => (number as u32).to_le_bytes().to_vec(),
        DataType::Int32 => (number as i32).to_le_bytes().to_vec(),
        _ => {
            let text = match id {
                Some(SequenceId::Text(s)) => s.clone(),
                Some(SequenceId::Number(n)) => n.to_string(),
                _ => String::new(),
            };
            Tensor::serialize_bytes([text.as_bytes()])
        }
    }
}

/// Hands an instance back to the scheduler when dropped (its batch's
/// sequences are no longer running).
struct Release {
    shared: Arc<Shared>,
    instance: usize,
    serials: Vec<u64>,
}

impl Drop for Release {
    fn drop(&mut self) {
        self.shared.state.clear_poison();
        if let Ok(mut state) = self.shared.state.lock() {
            state
                .seqs
                .finished(self.instance, &self.serials, Instant::now());
        }
        self.shared.cv.notify_all();
    }
}

/// A row's outcome: what its caller gets and the states its sequence
/// keeps (None: put the stored ones back).
type RowOutcome = (Result<Vec<Tensor>>, Option<Vec<Tensor>>);

/// One row's answer and next states from its part of the batch's outputs.
fn row_outcome(settings: &SeqSettings, row: &RowInfo, part: Result<Vec<Tensor>>) -> RowOutcome {
    let tensors = match part {
        Ok(t) => t,
        Err(e) => return (Err(e), None),
    };
    let mut next = Vec::new();
    for spec in &settings.states {
        let Some(t) = tensors.iter().find(|t| t.name == spec.output) else {
            let e = Error::internal(format!(
                "the model did not produce output state '{}'",
                spec.output
            ));
            return (Err(e), None);
        };
        next.push(Tensor {
            name: spec.input.clone(),
            datatype: t.datatype,
            shape: settings.row_shape(&t.shape),
            data: t.data.clone(),
        });
    }
    // The caller gets what it asked for, in its order.
    let answer = row
        .request
        .outputs
        .iter()
        .map(|name| {
            tensors
                .iter()
                .find(|t| &t.name == name)
                .cloned()
                .ok_or_else(|| {
                    Error::internal(format!("the model did not produce output '{name}'"))
                })
        })
        .collect();
    (answer, Some(next))
}

/// Hands out a finished batch: each row's outputs to its caller, each
/// row's output states to its sequence (a failed row keeps the states it
/// had, unless it was a START), and the instance back to the scheduler.
fn finish(shared: Arc<Shared>, instance: usize, rows: Vec<Option<RowInfo>>, done: Done) {
    // The instance goes back to the scheduler whatever happens below (a
    // panic here must not leave its sequences waiting forever).
    let release = Release {
        shared: Arc::clone(&shared),
        instance,
        serials: rows.iter().flatten().map(|r| r.serial).collect(),
    };
    let settings = &shared.settings;
    let n = rows.len();
    let taken_at = Instant::now() - done.compute;
    if done.result.is_ok() {
        shared.stats.record_execution(n, done.compute);
    }
    let parts: Vec<Result<Vec<Tensor>>> = match done.result {
        Ok(tensors) if settings.batching => split(&tensors, &vec![1; n], &[]),
        Ok(tensors) => vec![Ok(tensors)],
        Err(e) => (0..n).map(|_| Err(e.clone())).collect(),
    };
    // Outside the lock: each row's answer and next states.
    let outcomes: Vec<(RowInfo, RowOutcome)> = rows
        .into_iter()
        .zip(parts)
        .filter_map(|(row, part)| {
            let row = row?;
            let outcome = row_outcome(settings, &row, part);
            Some((row, outcome))
        })
        .collect();
    let mut answers = Vec::with_capacity(outcomes.len());
    {
        let mut state = shared.state.lock().unwrap();
        for (row, (answer, next)) in outcomes {
            if !row.end && state.seqs.alive(row.serial) && !settings.states.is_empty() {
                let keep = match next {
                    Some(next) => Some(next),
                    // A failed row keeps its states (a START has none yet).
                    None if !row.start => Some(row.states),
                    None => None,
                };
                match keep {
                    Some(states) => {
                        let shapes: Vec<&[i64]> =
                            states.iter().map(|t| t.shape.as_slice()).collect();
                        let key = shape_key(&shapes);
                        state.seqs.set_shape_key(row.serial, key);
                        state.states.insert(row.serial, states);
                    }
                    None => {
                        let key = state.seqs.start_key();
                        state.seqs.set_shape_key(row.serial, key);
                    }
                }
            }
            answers.push((row.request, answer));
        }
    }
    drop(release);
    // An instance runs one batch at a time, so its answers leave in the
    // order its requests were batched (`preserve_ordering` holds per
    // instance, as with Triton's per-instance batcher for `oldest`).
    for (request, answer) in answers {
        let _ = request.reply.send(Done {
            result: answer,
            queue: taken_at.saturating_duration_since(request.enqueued),
            compute: done.compute,
            rejected: false,
        });
    }
}
