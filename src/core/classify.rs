//! The classification extension: outputs asked for as classifications
//! become their top-N `"<value>:<index>[:<label>]"` strings.

use std::collections::BTreeMap;

use crate::core::error::{Error, ErrorKind, Result};
use crate::core::types::{DataType, RequestedOutput, Tensor};

/// Replaces outputs asked for as classifications by their top-N
/// `"<value>:<index>[:<label>]"` strings (a BYTES tensor `[batch, N]`).
pub(crate) fn classify(
    labels: &BTreeMap<String, Vec<String>>,
    batching: bool,
    outputs: &[RequestedOutput],
    tensors: Vec<Tensor>,
    batch: usize,
) -> Result<Vec<Tensor>> {
    tensors
        .into_iter()
        .map(|t| {
            // By name: an ensemble leaves out an output no step produced.
            let Some(n) = outputs
                .iter()
                .find(|o| o.name == t.name)
                .and_then(|o| o.classification)
            else {
                return Ok(t);
            };
            let values = as_f64(&t)?;
            let rows = if batching { batch.max(1) } else { 1 };
            let per_row = values.len() / rows.max(1);
            let labels = labels.get(&t.name);
            let mut elements: Vec<Vec<u8>> = Vec::new();
            let k = n.min(per_row);
            for row in values.chunks(per_row.max(1)).take(rows) {
                for i in top_k(row, k) {
                    let mut s = format!("{}:{}", fmt_value(row[i], t.datatype), i);
                    if let Some(label) = labels.and_then(|l| l.get(i)) {
                        s.push(':');
                        s.push_str(label);
                    }
                    elements.push(s.into_bytes());
                }
            }
            let shape = if batching {
                vec![rows as i64, k as i64]
            } else {
                vec![k as i64]
            };
            Ok(Tensor {
                name: t.name,
                datatype: DataType::Bytes,
                shape,
                data: Tensor::serialize_bytes(elements.iter().map(|e| e.as_slice())),
            })
        })
        .collect()
}

/// The indices of the `k` largest values of `row`, largest first (ties:
/// the lower index first).
pub(crate) fn top_k(row: &[f64], k: usize) -> Vec<usize> {
    // A total order (a NaN ranks below everything), so the sort is sound
    // whatever the model put out.
    let key = |v: f64| if v.is_nan() { f64::NEG_INFINITY } else { v };
    let mut idx: Vec<usize> = (0..row.len()).collect();
    idx.sort_by(|&a, &b| key(row[b]).total_cmp(&key(row[a])).then(a.cmp(&b)));
    idx.truncate(k);
    idx
}

fn fmt_value(v: f64, dt: DataType) -> String {
    match dt {
        DataType::Fp16 | DataType::Fp32 | DataType::Fp64 | DataType::Bf16 => format!("{v:.6}"),
        _ => format!("{v}"),
    }
}

/// The elements of a numeric tensor as f64, for ranking.
fn as_f64(t: &Tensor) -> Result<Vec<f64>> {
    crate::core::types::element::to_f64s(t.datatype, &t.data).ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidArg,
            format!("class result not available for output due to unsupported type 'BYTES' of output '{}'", t.name),
        )
    })
}
