//! Each request's inputs ([`InputPlan`]): from an `--input-data` file, or
//! generated, in the `--shape`s given.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::client::inputs::{self, Generate, InputSpec};
use crate::core::config::ModelConfig;
use crate::core::types::{Tensor, TensorMetadata};

use super::{Options, SetupError};

/// The inputs of each request, checked against the model: one request per
/// `--input-data` entry, or one of generated data.
#[derive(Debug)]
pub(crate) struct InputPlan {
    batching: bool,
    batch: i64,
    shapes: BTreeMap<String, Vec<i64>>,
    generate: Generate,
    entries: Vec<Map<String, Value>>,
}

impl InputPlan {
    /// Reads the shapes and the data file; a batch above 1 for a model
    /// that does not batch is refused.
    pub(crate) fn new(config: &ModelConfig, options: &Options) -> Result<InputPlan, SetupError> {
        let batching = config.max_batch_size > 0;
        if !batching && options.batch > 1 {
            return Err(SetupError::Usage(format!(
                "model '{}' does not batch (max_batch_size 0): -b must be 1",
                options.model
            )));
        }
        let shapes = inputs::parse_shapes(&options.shapes).map_err(SetupError::Usage)?;
        let entries = match &options.input_data {
            Some(path) => inputs::read_input_data(path).map_err(SetupError::Usage)?,
            None => Vec::new(),
        };
        Ok(InputPlan {
            batching,
            batch: options.batch,
            shapes,
            generate: options.generate,
            entries,
        })
    }

    /// How many different requests there are.
    pub(crate) fn requests(&self) -> usize {
        self.entries.len().max(1)
    }

    /// The inputs of request `i` in the model's order (`seed` advances, so
    /// generated data differs between requests).
    pub(crate) fn inputs(
        &self,
        specs: &[TensorMetadata],
        i: usize,
        seed: &mut u64,
    ) -> Result<Vec<Tensor>, SetupError> {
        let how = InputSpec {
            batching: self.batching,
            batch: self.batch,
            shapes: &self.shapes,
            generate: self.generate,
            entry: self.entries.get(i),
        };
        inputs::build(specs, &how, seed).map_err(SetupError::Usage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::setup::tests::{config, options};

    #[test]
    fn inputs_come_from_the_data_file_or_are_generated() {
        let batching = config(
            r#"name: "m" max_batch_size: 8
               input [ { name: "A" data_type: TYPE_INT32 dims: [ 2 ] },
                       { name: "V" data_type: TYPE_FP32 dims: [ -1 ] } ]
               output [ { name: "B" data_type: TYPE_INT32 dims: [ 2 ] } ]"#,
        );
        let specs = [
            TensorMetadata {
                name: "A".into(),
                datatype: "INT32".into(),
                shape: vec![-1, 2],
            },
            TensorMetadata {
                name: "V".into(),
                datatype: "FP32".into(),
                shape: vec![-1, -1],
            },
        ];
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data.json");
        std::fs::write(
            &file,
            r#"{"data": [{"A": [1, 2]}, {"A": [3, 4], "V": {"content": [0.5], "shape": [1]}}]}"#,
        )
        .unwrap();
        let mut o = options("m");
        o.batch = 2;
        o.shapes = vec!["V:3".into()];
        o.input_data = Some(file);
        let plan = InputPlan::new(&batching, &o).unwrap();
        assert_eq!(plan.requests(), 2);
        let mut seed = 1;
        let first = plan.inputs(&specs, 0, &mut seed).unwrap();
        assert_eq!(first[0].data, [1i32, 2].map(i32::to_le_bytes).concat());
        assert_eq!(first[0].shape, [2, 2]);
        // Generated (zero), in the --shape given, after the batch size.
        assert_eq!(
            (first[1].shape.as_slice(), first[1].data.len()),
            (&[2, 3][..], 24)
        );
        assert!(first[1].data.iter().all(|&b| b == 0));
        let second = plan.inputs(&specs, 1, &mut seed).unwrap();
        assert_eq!(second[1].shape, [2, 1]);
        assert_eq!(second[1].data, 0.5f32.to_le_bytes());

        // Without the data file: one request, and a variable dimension
        // needs --shape.
        let mut o = options("m");
        o.generate = Generate::Random;
        let plan = InputPlan::new(&batching, &o).unwrap();
        assert_eq!(plan.requests(), 1);
        match plan.inputs(&specs, 0, &mut seed) {
            Err(SetupError::Usage(m)) => assert!(m.contains("--shape V:d1,d2"), "{m}"),
            other => panic!("{other:?}"),
        }

        let not_batching = config(
            r#"name: "n" max_batch_size: 0
               input [ { name: "A" data_type: TYPE_INT32 dims: [ 2 ] } ]
               output [ { name: "B" data_type: TYPE_INT32 dims: [ 2 ] } ]"#,
        );
        let mut o = options("n");
        o.batch = 2;
        match InputPlan::new(&not_batching, &o) {
            Err(SetupError::Usage(m)) => assert_eq!(
                m,
                "model 'n' does not batch (max_batch_size 0): -b must be 1"
            ),
            other => panic!("{other:?}"),
        }
        o.batch = 1;
        o.shapes = vec!["A".into()];
        assert!(matches!(
            InputPlan::new(&not_batching, &o),
            Err(SetupError::Usage(m)) if m == "--shape expects NAME:d1,d2, got 'A'"
        ));
    }
}
