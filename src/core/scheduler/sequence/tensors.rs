//! A batch's rows: their tensors in (inputs, then controls, then states),
//! and out again (each row's answer to its caller, its output states kept
//! for its sequence's next request); or, for a backend that takes a batch's
//! requests apart, the rows as a list of requests, each with its row's
//! control inputs.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::places::Row;
use super::settings::{corrid_element, zeros};
use super::{requeue, Control, ControlKind, SeqReply, SeqRequest, SeqSettings, Shared, State};
use crate::core::error::{Error, Result};
use crate::core::instance::{BackendRequest, Done, Job, Reply, Work};
use crate::core::responder::{Reschedule, Responder};
use crate::core::scheduler::lists::{list_work, Answer};
use crate::core::scheduler::split::split;
use crate::core::types::{RequestInfo, Tensor};

/// A shape key for the states a sequence carries (sequences batch together
/// only with equal keys).
pub(super) fn shape_key(shapes: &[&[i64]]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    shapes.hash(&mut h);
    h.finish() | 1
}

/// One row of a batch: its request and the states it runs with.
pub(super) struct RowInfo {
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
pub(super) fn take_rows(
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

/// A batch's work for its instance: concatenated (`build`), or as a list
/// of requests (`requests_work`) for a backend that takes them apart.
pub(super) fn batch_work(
    shared: &Arc<Shared>,
    instance: usize,
    rows: Vec<Option<RowInfo>>,
) -> Work {
    if shared.answering.lists {
        return requests_work(shared, instance, rows);
    }
    build(shared, instance, rows)
}

/// One control input's element for a row (`None`: an empty row).
fn control_value(c: &Control, row: Option<&RowInfo>) -> Vec<u8> {
    let flag = |on: bool| c.values[on as usize].clone();
    match c.kind {
        ControlKind::Start => flag(row.is_some_and(|r| r.start)),
        ControlKind::End => flag(row.is_some_and(|r| r.end)),
        ControlKind::Ready => flag(row.is_some()),
        ControlKind::CorrId => corrid_element(c.datatype, row.map(|r| &r.request.id)),
    }
}

/// Runs a batch as a list of requests, one per row, in row order: each
/// with its own inputs and its row's control inputs (`[1, 1]`, or `[1]`
/// without batching), its correlation id and flags, answering through its
/// own responder. An empty row (a `direct` slot with nothing ready) is
/// Triton's null request: the first request's inputs as zeros, READY
/// false, no correlation id or flags, its answers dropped. The execution's
/// end counts the batch and hands the instance back.
fn requests_work(shared: &Arc<Shared>, instance: usize, rows: Vec<Option<RowInfo>>) -> Work {
    let settings = &shared.settings;
    let n = rows.len();
    let template = rows.iter().flatten().next().expect("a batch has a request");
    let null_inputs: Vec<Tensor> = template
        .request
        .inputs
        .iter()
        .map(|t| Tensor {
            name: t.name.clone(),
            datatype: t.datatype,
            shape: t.shape.clone(),
            data: zeros(t.datatype, &t.shape),
        })
        .collect();
    let null_outputs = template.request.outputs.clone();
    let first_enqueued = first_enqueued(&rows);
    let release = Release {
        shared: Arc::clone(shared),
        instance,
        serials: rows.iter().flatten().map(|r| r.serial).collect(),
    };
    let mut requests = Vec::with_capacity(n);
    for row in rows {
        let controls: Vec<Tensor> = settings
            .controls
            .iter()
            .map(|c| Tensor {
                name: c.name.clone(),
                datatype: c.datatype,
                shape: settings.batch_shape(1, &[1]),
                data: control_value(c, row.as_ref()),
            })
            .collect();
        let request = match row {
            Some(RowInfo {
                request: r, serial, ..
            }) => {
                r.pending.fetch_sub(1, Ordering::Relaxed);
                let reschedule = settings.iterative.then(|| rescheduler(shared, serial, &r));
                let mut inputs = r.inputs;
                inputs.extend(controls);
                BackendRequest {
                    inputs,
                    outputs: r.outputs,
                    info: r.info.map(|i| *i).unwrap_or_default(),
                    respond: r.reply.into_responder(r.enqueued),
                    reschedule,
                }
            }
            None => {
                let (nowhere, _) = Answer::new(shared.answering.decoupled);
                BackendRequest {
                    inputs: null_inputs.iter().cloned().chain(controls).collect(),
                    outputs: null_outputs.clone(),
                    info: RequestInfo::default(),
                    respond: Responder::new(nowhere.into_sink(), Instant::now()),
                    reschedule: None,
                }
            }
        };
        requests.push(request);
    }
    let stats = Arc::clone(&shared.stats);
    let finish = move |done: Done, ran: usize| {
        // An execution that ran counts, failed or not (as Triton counts).
        if ran > 0 {
            stats.record_execution(ran, (done.input, done.compute, done.output));
        }
        drop(release);
    };
    let sizes = vec![1; requests.len()];
    list_work(requests, sizes, first_enqueued, finish)
}

/// How the model puts row `serial`'s request `r` back in its sequence (an
/// iterative sequence): with its inputs as it came (a copy, made only for
/// such models), its control inputs filled again when it next runs.
fn rescheduler(shared: &Arc<Shared>, serial: u64, r: &SeqRequest) -> Reschedule {
    let shared = Arc::clone(shared);
    let inputs = r.inputs.clone();
    let outputs = r.outputs.clone();
    let info = r.info.clone();
    let (pending, id, timeout_us) = (Arc::clone(&r.pending), r.id.clone(), r.timeout_us);
    Box::new(move |responder| {
        let request = SeqRequest {
            inputs,
            outputs,
            enqueued: Instant::now(),
            reply: SeqReply::Taken(responder),
            pending,
            id,
            timeout_us,
            info,
        };
        requeue(&shared, serial, request);
    })
}

/// Builds the batch's tensors (inputs, then controls, then states) and the
/// work that runs it and hands out the results.
fn build(shared: &Arc<Shared>, instance: usize, rows: Vec<Option<RowInfo>>) -> Work {
    let gathering = Instant::now();
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
            data.extend_from_slice(&control_value(c, row.as_ref()));
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
    let first_enqueued = first_enqueued(&rows);
    let finish_shared = Arc::clone(shared);
    let finish = move |done: Done| finish(finish_shared, instance, rows, first_enqueued, done);
    Work {
        job: Job::Batch { inputs, outputs },
        enqueued: first_enqueued,
        reply: Reply::Callback(Box::new(finish)),
        pending: None,
        gather: gathering.elapsed(),
    }
}

/// When the batch's oldest request arrived (queue time runs from there).
fn first_enqueued(rows: &[Option<RowInfo>]) -> Instant {
    rows.iter()
        .flatten()
        .map(|r| r.request.enqueued)
        .min()
        .unwrap_or_else(Instant::now)
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

/// Hands an instance back to the scheduler when dropped (its batch's
/// sequences are no longer running). The instance takes its next batch
/// itself; the batcher's thread is woken only when it must keep an earlier
/// time (a sequence's idle deadline) or is closing.
struct Release {
    shared: Arc<Shared>,
    instance: usize,
    serials: Vec<u64>,
}

impl Drop for Release {
    fn drop(&mut self) {
        let keeper = {
            let mut state = self.shared.lock();
            state
                .seqs
                .finished(self.instance, &self.serials, Instant::now());
            if self.shared.settings.iterative {
                // A request released ends its iterative sequence; one
                // rescheduled keeps it.
                for &serial in &self.serials {
                    if !state.rescheduled.remove(&serial) {
                        state.seqs.end(serial);
                        state.states.remove(&serial);
                    }
                }
            }
            !state.open || state.keeper_needed()
        };
        if keeper {
            self.shared.cv.notify_all();
        }
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
fn finish(
    shared: Arc<Shared>,
    instance: usize,
    rows: Vec<Option<RowInfo>>,
    first_enqueued: Instant,
    done: Done,
) {
    // The instance goes back to the scheduler whatever happens below (a
    // panic here must not leave its sequences waiting forever).
    let release = Release {
        shared: Arc::clone(&shared),
        instance,
        serials: rows.iter().flatten().map(|r| r.serial).collect(),
    };
    let settings = &shared.settings;
    let n = rows.len();
    // Where queue time ends (gathering counts as compute_input).
    let taken_at = first_enqueued + done.queue;
    let ok = done.result.is_ok();
    let splitting = Instant::now();
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
    let output = done.output + splitting.elapsed();
    if ok {
        shared
            .stats
            .record_execution(n, (done.input, done.compute, output));
    }
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
        request.reply.send(Done {
            result: answer,
            queue: taken_at.saturating_duration_since(request.enqueued),
            compute: done.compute,
            input: done.input,
            output,
            rejected: false,
            parameters: done.parameters.clone(),
            last: done.last,
        });
    }
}
