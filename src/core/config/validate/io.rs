//! Rules 23–27: every input and output (name, type, dims, reshape, format,
//! shape tensors, non-linear IO) and the batch inputs and outputs.

use std::collections::BTreeSet;

use crate::core::config::pb::{batch_input, batch_output, model_input::Format, DataType};

use super::Validator;

impl Validator<'_> {
    /// Rules 23–27 for every input and output, and the batch inputs/outputs.
    pub(super) fn io(&mut self) {
        let c = self.config;
        let name = self.name;
        let trt = c.platform == "tensorrt_plan";
        for (i, input) in c.input.iter().enumerate() {
            let field = format!("input[{i}]");
            let before = self.issues.len();
            self.io_shape(
                &field,
                "model input",
                &input.name,
                input.data_type,
                &input.dims,
                input.reshape.as_ref().map(|r| &r.shape[..]),
            );
            if self.issues.len() > before {
                continue;
            }
            let format = input.format;
            if (format == Format::Nhwc as i32 || format == Format::Nchw as i32)
                && input.dims.len() != 3
            {
                self.error(
                    format!("{field}.format"),
                    format!("model input NHWC/NCHW require 3 dims for {name}"),
                );
            }
            if input.is_shape_tensor && !trt {
                self.error(
                    format!("{field}.is_shape_tensor"),
                    format!("shape tensors are only supported for TensorRT platform for {name}"),
                );
            }
            if input.is_non_linear_format_io {
                self.non_linear(&field, "input", input.dims.len(), trt);
            }
        }
        for (i, output) in c.output.iter().enumerate() {
            let field = format!("output[{i}]");
            let before = self.issues.len();
            self.io_shape(
                &field,
                "model output",
                &output.name,
                output.data_type,
                &output.dims,
                output.reshape.as_ref().map(|r| &r.shape[..]),
            );
            if self.issues.len() > before {
                continue;
            }
            if output.is_shape_tensor && !trt {
                self.error(
                    format!("{field}.is_shape_tensor"),
                    format!("shape tensors are only supported for TensorRT platform for {name}"),
                );
            }
            if output.is_non_linear_format_io {
                self.non_linear(&field, "output", output.dims.len(), trt);
            }
        }
        self.batch_io();
    }

    fn non_linear(&mut self, field: &str, what: &str, dims: usize, trt: bool) {
        let name = self.name;
        if !trt {
            self.error(
                format!("{field}.is_non_linear_format_io"),
                format!(
                    "Non-linear IO format is only supported for the TensorRT platform for {name}"
                ),
            );
        } else if dims != 3 {
            self.error(
                format!("{field}.is_non_linear_format_io"),
                format!("Non-linear IO format {what} requires 3 dims for {name}"),
            );
        }
    }

    /// Rules 23–25 (`ValidateIOShape`): name, type, dims, reshape.
    fn io_shape(
        &mut self,
        field: &str,
        prefix: &str,
        io_name: &str,
        data_type: i32,
        dims: &[i64],
        reshape: Option<&[i64]>,
    ) {
        let name = self.name;
        if io_name.is_empty() {
            self.error(field, format!("{prefix} must specify 'name' for {name}"));
            return;
        }
        let who = format!("{prefix} '{io_name}'");
        if data_type == DataType::TypeInvalid as i32 {
            self.error(
                format!("{field}.data_type"),
                format!("{who} must specify 'data_type' for {name}"),
            );
            return;
        }
        if dims.is_empty() {
            self.error(
                format!("{field}.dims"),
                format!("{who} must specify 'dims' for {name}"),
            );
            return;
        }
        if let Some([]) = reshape {
            if self.config.max_batch_size == 0 {
                self.error(
                    format!("{field}.reshape"),
                    format!("{who} cannot have empty reshape for non-batching model as scalar tensors are not supported for {name}"),
                );
                return;
            }
        }
        for (j, &d) in dims.iter().enumerate() {
            if d < 1 && d != -1 {
                self.error(
                    format!("{field}.dims[{j}]"),
                    format!("{who} dimension must be integer >= 1, or -1 to indicate a variable-size dimension for {name}"),
                );
                return;
            }
        }
        let Some(reshape) = reshape else { return };
        for (j, &d) in reshape.iter().enumerate() {
            if d < 1 && d != -1 {
                self.error(
                    format!("{field}.reshape.shape[{j}]"),
                    format!("{who} reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension for {name}"),
                );
                return;
            }
        }
        let field = format!("{field}.reshape");
        let variable = dims.contains(&-1) || reshape.contains(&-1);
        if !variable {
            let count = |s: &[i64]| s.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d));
            let (Some(dc), Some(rc)) = (count(dims), count(reshape)) else {
                self.error(field, format!("element count for tensor '{io_name} dims' exceeds maximum size of {} for {name}", i64::MAX));
                return;
            };
            let rc = if reshape.is_empty() { 0 } else { rc };
            if dc != rc && !(reshape.is_empty() && dc == 1) {
                self.error(
                    field,
                    format!("{who} has different size for dims and reshape for {name}"),
                );
            }
            return;
        }
        // Variable dims: the fixed-size chunks between -1s must match
        // pairwise (a chunk whose element count overflows is refused).
        let chunks = |s: &[i64]| -> Option<Vec<i64>> {
            s.split(|&d| d == -1)
                .map(|c| c.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d)))
                .collect()
        };
        let (Some(dc), Some(rc)) = (chunks(dims), chunks(reshape)) else {
            self.error(field, format!("element count for tensor '{io_name} dims' exceeds maximum size of {} for {name}", i64::MAX));
            return;
        };
        if dc.len() != rc.len() {
            self.error(field, format!("{who} has different number of variable-size dimensions for dims and reshape for {name}"));
        } else if dc != rc {
            self.error(
                field,
                format!("{who} has different size for dims and reshape for {name}"),
            );
        }
    }

    /// Rule 27.
    fn batch_io(&mut self) {
        let c = self.config;
        let name = self.name;
        let inputs: BTreeSet<&str> = c.input.iter().map(|i| i.name.as_str()).collect();
        let outputs: BTreeSet<&str> = c.output.iter().map(|o| o.name.as_str()).collect();
        for (i, bi) in c.batch_input.iter().enumerate() {
            let field = format!("batch_input[{i}]");
            let kind = batch_input::Kind::try_from(bi.kind)
                .map(|k| k.as_str_name())
                .unwrap_or("UNKNOWN");
            if bi.source_input.len() != 1 {
                self.error(
                    format!("{field}.source_input"),
                    format!(
                        "batch input kind '{kind}' expects 1 source input, got {} for {name}",
                        bi.source_input.len()
                    ),
                );
            }
            if bi.data_type != DataType::TypeInt32 as i32
                && bi.data_type != DataType::TypeFp32 as i32
            {
                self.error(
                    format!("{field}.data_type"),
                    format!("batch input data type must be TYPE_INT32 or TYPE_FP32 for {name}"),
                );
            }
            for (j, source) in bi.source_input.iter().enumerate() {
                if !inputs.contains(source.as_str()) {
                    self.error(
                        format!("{field}.source_input[{j}]"),
                        format!("unknown source input name '{source}' for {name}"),
                    );
                }
            }
        }
        let mut targets: BTreeSet<&str> = BTreeSet::new();
        for (i, bo) in c.batch_output.iter().enumerate() {
            let field = format!("batch_output[{i}]");
            let kind = batch_output::Kind::try_from(bo.kind)
                .map(|k| k.as_str_name())
                .unwrap_or("UNKNOWN");
            if bo.source_input.len() != 1 {
                self.error(
                    format!("{field}.source_input"),
                    format!(
                        "batch output kind '{kind}' expects 1 source input, got {} for {name}",
                        bo.source_input.len()
                    ),
                );
            }
            for (j, source) in bo.source_input.iter().enumerate() {
                if !inputs.contains(source.as_str()) {
                    self.error(
                        format!("{field}.source_input[{j}]"),
                        format!("unknown source input name '{source}' for {name}"),
                    );
                }
            }
            for (j, target) in bo.target_name.iter().enumerate() {
                if !outputs.contains(target.as_str()) {
                    self.error(
                        format!("{field}.target_name[{j}]"),
                        format!("unknown target output name '{target}' for {name}"),
                    );
                } else if !targets.insert(target) {
                    self.error(
                        format!("{field}.target_name[{j}]"),
                        format!(
                            "target output name '{target}' can only be specified once for {name}"
                        ),
                    );
                }
            }
        }
    }
}
