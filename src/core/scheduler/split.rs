//! Splitting a batch's outputs among its requests (both batchers).

use crate::core::error::{Error, Result};
use crate::core::types::Tensor;

/// Splits batched outputs along dim 0 into the requests' parts; a
/// scattered output (`batch_output`) by the requests' shapes of it.
pub(super) fn split(
    tensors: &[Tensor],
    sizes: &[usize],
    scatter: &[(String, Vec<Vec<i64>>)],
) -> Vec<Result<Vec<Tensor>>> {
    let total: usize = sizes.iter().sum();
    let mut parts: Vec<Result<Vec<Tensor>>> = sizes.iter().map(|_| Ok(Vec::new())).collect();
    for t in tensors {
        if let Some((_, shapes)) = scatter.iter().find(|(name, _)| name == &t.name) {
            match crate::core::batch_io::scatter(t, shapes) {
                Ok(pieces) => {
                    for (part, piece) in parts.iter_mut().zip(pieces) {
                        if let Ok(list) = part {
                            list.push(piece);
                        }
                    }
                }
                Err(e) => return sizes.iter().map(|_| Err(e.clone())).collect(),
            }
            continue;
        }
        let rows = t.shape.first().copied().unwrap_or(0) as usize;
        if rows != total {
            let e = Error::internal(format!(
                "output '{}' has {rows} rows for a batch of {total}",
                t.name
            ));
            return sizes.iter().map(|_| Err(e.clone())).collect();
        }
        let pieces: Vec<Vec<u8>> = match t.datatype.size() {
            Some(_) => {
                let row = t.data.len().checked_div(total).unwrap_or(0);
                let mut at = 0;
                sizes
                    .iter()
                    .map(|&n| {
                        let piece = t.data[at..at + n * row].to_vec();
                        at += n * row;
                        piece
                    })
                    .collect()
            }
            None => {
                let elements = Tensor::bytes_elements(&t.data).unwrap_or_default();
                let per_row = elements.len().checked_div(total).unwrap_or(0);
                let mut at = 0;
                sizes
                    .iter()
                    .map(|&n| {
                        let piece =
                            Tensor::serialize_bytes(elements[at..at + n * per_row].iter().copied());
                        at += n * per_row;
                        piece
                    })
                    .collect()
            }
        };
        for ((part, piece), &n) in parts.iter_mut().zip(pieces).zip(sizes) {
            if let Ok(list) = part {
                let mut shape = t.shape.clone();
                shape[0] = n as i64;
                list.push(Tensor {
                    name: t.name.clone(),
                    datatype: t.datatype,
                    shape,
                    data: piece,
                });
            }
        }
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::types::DataType;

    #[test]
    fn split_gives_each_request_its_rows() {
        let t = Tensor {
            name: "OUT".into(),
            datatype: DataType::Int32,
            shape: vec![3, 2],
            data: (0..6i32).flat_map(|x| x.to_le_bytes()).collect(),
        };
        let parts = split(&[t], &[1, 2], &[]);
        let a = parts[0].as_ref().unwrap();
        let b = parts[1].as_ref().unwrap();
        assert_eq!(a[0].shape, vec![1, 2]);
        assert_eq!(b[0].shape, vec![2, 2]);
        assert_eq!(
            b[0].data,
            (2..6i32).flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>()
        );
        let strings = Tensor {
            name: "S".into(),
            datatype: DataType::Bytes,
            shape: vec![2, 1],
            data: Tensor::serialize_bytes([b"a".as_slice(), b"bc".as_slice()]),
        };
        let parts = split(&[strings], &[1, 1], &[]);
        assert_eq!(
            parts[1].as_ref().unwrap()[0].data,
            Tensor::serialize_bytes([b"bc".as_slice()])
        );
    }
}
