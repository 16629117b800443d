//! Reading and writing NumPy `.npy` files (version 1/2/3 headers,
//! little-endian, C order) for `trtis infer`.

use std::path::Path;

use trtis::core::types::{DataType, Tensor};

const MAGIC: &[u8] = b"\x93NUMPY";

fn descr(dt: DataType) -> Option<&'static str> {
    Some(match dt {
        DataType::Bool => "|b1",
        DataType::Uint8 => "|u1",
        DataType::Int8 => "|i1",
        DataType::Uint16 => "<u2",
        DataType::Int16 => "<i2",
        DataType::Uint32 => "<u4",
        DataType::Int32 => "<i4",
        DataType::Uint64 => "<u8",
        DataType::Int64 => "<i8",
        DataType::Fp16 => "<f2",
        DataType::Fp32 => "<f4",
        DataType::Fp64 => "<f8",
        DataType::Bytes | DataType::Bf16 => return None,
    })
}

/// Reads an array: its datatype, shape and raw little-endian data.
pub fn read(path: &Path) -> Result<(DataType, Vec<i64>, Vec<u8>), String> {
    let fail = |m: &str| format!("{}: {m}", path.display());
    // A regular file only: a FIFO would block until a writer came.
    let bytes = trtis::core::fsutil::read_regular(path).map_err(|e| fail(&e.to_string()))?;
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err(fail("not a .npy file"));
    }
    let (header_len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        _ => return Err(fail("unsupported .npy version")),
    };
    let header = bytes
        .get(start..start + header_len)
        .and_then(|h| std::str::from_utf8(h).ok())
        .ok_or_else(|| fail("truncated header"))?;
    let field = |key: &str| -> Option<&str> {
        let at = header.find(&format!("'{key}'"))? + key.len() + 2;
        Some(header[at..].trim_start_matches([':', ' ']))
    };
    let d = field("descr").ok_or_else(|| fail("no descr"))?;
    let d = d.trim_start_matches('\'').split('\'').next().unwrap_or("");
    let d = d.replace('=', "<");
    let dt = [
        DataType::Bool,
        DataType::Uint8,
        DataType::Int8,
        DataType::Uint16,
        DataType::Int16,
        DataType::Uint32,
        DataType::Int32,
        DataType::Uint64,
        DataType::Int64,
        DataType::Fp16,
        DataType::Fp32,
        DataType::Fp64,
    ]
    .into_iter()
    .find(|t| descr(*t) == Some(d.as_str()))
    .ok_or_else(|| {
        fail(&format!(
            "unsupported dtype '{d}' (little-endian numbers and bool only)"
        ))
    })?;
    if field("fortran_order").is_some_and(|f| f.starts_with("True")) {
        return Err(fail("Fortran-ordered arrays are not supported"));
    }
    let shape_text = field("shape").ok_or_else(|| fail("no shape"))?;
    let inner = shape_text
        .trim_start_matches('(')
        .split(')')
        .next()
        .unwrap_or("");
    let shape = inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<i64>().ok().filter(|&d| d >= 0).ok_or_else(|| {
                fail(&format!(
                    "bad shape {shape_text:?}: dimensions are counts, 0 or more"
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let data = &bytes[start + header_len..];
    // The header is the file's word, not to be trusted: its shape must
    // account for exactly the data there is, counted without overflow.
    let expected = data_size(&shape, dt.size().unwrap_or(1));
    if expected != Some(data.len()) {
        let needs =
            expected.map_or_else(|| "more than can be counted".to_string(), |n| n.to_string());
        return Err(fail(&format!(
            "holds {} data bytes, its shape {shape:?} needs {needs}",
            data.len()
        )));
    }
    Ok((dt, shape, data.to_vec()))
}

/// The bytes of a tensor of `shape` (every dimension 0 or more) and
/// elements of `element_size` bytes; None when that does not fit a `usize`.
fn data_size(shape: &[i64], element_size: usize) -> Option<usize> {
    shape.iter().try_fold(element_size, |bytes, &d| {
        bytes.checked_mul(usize::try_from(d).ok()?)
    })
}

/// Writes a numeric tensor as a version 1 .npy file.
pub fn write(path: &Path, t: &Tensor) -> std::io::Result<()> {
    let d = descr(t.datatype).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "no .npy type for this datatype",
        )
    })?;
    let dims: Vec<String> = t.shape.iter().map(|d| d.to_string()).collect();
    let shape = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut header = format!("{{'descr': '{d}', 'fortran_order': False, 'shape': {shape}, }}");
    // Pad so the data starts on a 64-byte boundary; the header ends in '\n'.
    let total = MAGIC.len() + 4 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + t.data.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&t.data);
    std::fs::write(path, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A version 1 .npy file of `<f4` data with the header's `shape` text.
    fn file_with_shape(dir: &Path, shape: &str, data: &[u8]) -> std::path::PathBuf {
        let header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}\n");
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&[1, 0]);
        bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend_from_slice(data);
        let path = dir.join("a.npy");
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn a_shape_must_match_the_data() {
        let dir = tempfile::tempdir().unwrap();
        let data = [0u8; 16 * 4];
        let (dt, shape, read_data) = read(&file_with_shape(dir.path(), "(2, 8)", &data)).unwrap();
        assert_eq!(
            (dt, shape, read_data.len()),
            (DataType::Fp32, vec![2, 8], 64)
        );
        let (_, shape, read_data) = read(&file_with_shape(dir.path(), "()", &data[..4])).unwrap();
        assert_eq!((shape, read_data.len()), (vec![], 4));
        let (_, shape, read_data) = read(&file_with_shape(dir.path(), "(0, 5)", &[])).unwrap();
        assert_eq!((shape, read_data.len()), (vec![0, 5], 0));

        for (shape, data) in [
            // Overflows when multiplied: an error, never a panic or a
            // wrapped (empty) tensor.
            ("(4294967296, 4294967296)", &[][..]),
            ("(4294967296, 4294967296, 4)", &[][..]),
            ("(9223372036854775807, 2)", &data[..]),
            // Negative dimensions.
            ("(-1, 16)", &data[..]),
            ("(-1, -16)", &data[..]),
            // More or less than the data there is.
            ("(2, 9)", &data[..]),
            ("(2, 7)", &data[..]),
            ("(99999999999,)", &data[..]),
        ] {
            let e = read(&file_with_shape(dir.path(), shape, data)).unwrap_err();
            assert!(e.contains("a.npy: "), "{shape}: {e}");
        }
        let e = read(&file_with_shape(dir.path(), "(-1, 16)", &data)).unwrap_err();
        assert!(e.contains("bad shape"), "{e}");
        let e = read(&file_with_shape(
            dir.path(),
            "(4294967296, 4294967296)",
            &[],
        ))
        .unwrap_err();
        assert!(e.contains("more than can be counted"), "{e}");
    }

    #[test]
    fn data_size_is_checked() {
        assert_eq!(data_size(&[2, 3], 4), Some(24));
        assert_eq!(data_size(&[], 8), Some(8));
        assert_eq!(data_size(&[0, i64::MAX], 4), Some(0));
        assert_eq!(data_size(&[1 << 32, 1 << 32], 1), None);
        assert_eq!(data_size(&[-1], 4), None);
    }
}
