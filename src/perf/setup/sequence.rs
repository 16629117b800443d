//! The sequence flags and the [`Sequences`] they give a sequence model.

use crate::core::config::pb::model_config::SchedulingChoice;
use crate::core::config::ModelConfig;
use crate::perf::driver::Sequences;

use super::SetupError;

/// The sequence flags (perf_analyzer's `--sequence-length`,
/// `--sequence-length-variation`, `--sequence-id-range`,
/// `--num-of-sequences`).
#[derive(Debug, Clone)]
pub struct SequenceOptions {
    pub length: usize,
    pub length_variation: f64,
    pub id_range: Option<String>,
    pub num_of_sequences: usize,
}

/// `--sequence-id-range start[:end]` → (start, ids in the range; 0:
/// unbounded). perf_analyzer's default starts at 1.
fn sequence_ids(spec: Option<&str>) -> Result<(u64, u64), String> {
    let Some(spec) = spec else {
        return Ok((1, 0));
    };
    let bad = || format!("--sequence-id-range expects start[:end] with start >= 1, got '{spec}'");
    let mut parts = spec.split(':').map(|p| p.trim().parse::<u64>());
    let start = parts
        .next()
        .and_then(|p| p.ok())
        .filter(|&s| s >= 1)
        .ok_or_else(bad)?;
    let range = match parts.next() {
        None => 0,
        Some(Ok(end)) if end > start => end - start,
        Some(_) => return Err(bad()),
    };
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok((start, range))
}

/// The sequences to send to a sequence model (`sequence_batching`); None
/// for other models.
pub(super) fn sequences(
    config: &ModelConfig,
    options: &SequenceOptions,
) -> Result<Option<Sequences>, SetupError> {
    let Some(SchedulingChoice::SequenceBatching(_)) = &config.scheduling_choice else {
        return Ok(None);
    };
    let (start, range) = sequence_ids(options.id_range.as_deref()).map_err(SetupError::Usage)?;
    Ok(Some(Sequences::new(
        options.length,
        options.length_variation,
        start,
        range,
        options.num_of_sequences,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::setup::tests::{config, options};

    #[test]
    fn sequence_id_ranges() {
        assert_eq!(sequence_ids(None), Ok((1, 0)));
        assert_eq!(sequence_ids(Some("5")), Ok((5, 0)));
        assert_eq!(sequence_ids(Some("5:8")), Ok((5, 3)));
        for bad in ["0", "5:5", "5:2", "x", "1:2:3", ""] {
            assert_eq!(
                sequence_ids(Some(bad)),
                Err(format!(
                    "--sequence-id-range expects start[:end] with start >= 1, got '{bad}'"
                )),
                "{bad}"
            );
        }
    }

    #[test]
    fn only_sequence_models_get_sequences() {
        let plain = config(
            r#"name: "m" max_batch_size: 8
               input [ { name: "A" data_type: TYPE_INT32 dims: [ 1 ] } ]
               output [ { name: "B" data_type: TYPE_INT32 dims: [ 1 ] } ]"#,
        );
        let stateful = config(
            r#"name: "s" max_batch_size: 8 sequence_batching { }
               input [ { name: "A" data_type: TYPE_INT32 dims: [ 1 ] } ]
               output [ { name: "B" data_type: TYPE_INT32 dims: [ 1 ] } ]"#,
        );
        let mut o = options("s").sequence;
        assert!(sequences(&plain, &o).unwrap().is_none());
        o.id_range = Some("7:9".into());
        let s = sequences(&stateful, &o).unwrap().unwrap();
        assert_eq!((s.length, s.id_start, s.id_range), (5, 7, 2));
        assert_eq!(s.rate_sequences, 2);
        o.id_range = Some("0".into());
        assert!(matches!(
            sequences(&stateful, &o),
            Err(SetupError::Usage(_))
        ));
        // A bad range does not matter to a model without sequences.
        assert!(sequences(&plain, &o).unwrap().is_none());
    }
}
