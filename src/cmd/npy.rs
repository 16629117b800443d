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
    let bytes = std::fs::read(path).map_err(|e| fail(&e.to_string()))?;
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
        .map(|s| s.parse::<i64>().map_err(|_| fail("bad shape")))
        .collect::<Result<Vec<_>, _>>()?;
    let data = bytes[start + header_len..].to_vec();
    let expected = shape.iter().product::<i64>() as usize * dt.size().unwrap_or(1);
    if data.len() != expected {
        return Err(fail(&format!(
            "holds {} data bytes, its shape needs {expected}",
            data.len()
        )));
    }
    Ok((dt, shape, data))
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
