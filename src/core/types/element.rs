//! Tensor elements as Rust types. [`Element`] ties each fixed-size
//! [`DataType`] to its Rust type (`bool`, the eight integers, `f16`, `bf16`,
//! `f32`, `f64`) with its little-endian form and its value as a [`Scalar`];
//! [`elements`], [`decode`] and [`encode`] convert a whole tensor's bytes;
//! [`DataType::with_element`] is the one place where a datatype known only
//! at run time becomes a static type, running an [`ElementFn`] with it.
//! BYTES has no `Element`: its elements are length-prefixed strings
//! (`Tensor::bytes_elements`).

use std::convert::identity;
use std::fmt::Debug;

use half::{bf16, f16};

use super::DataType;

/// One element's value, wide enough for every fixed-size datatype: what
/// the wire formats (JSON numbers and booleans) and ranking work with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Scalar {
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
}

impl Scalar {
    /// As a float (integers converted with `as`); None for a boolean.
    fn as_float(self) -> Option<f64> {
        match self {
            Scalar::Bool(_) => None,
            Scalar::Int(i) => Some(i as f64),
            Scalar::Uint(u) => Some(u as f64),
            Scalar::Float(f) => Some(f),
        }
    }

    /// As f64, a boolean as 0 or 1.
    pub(crate) fn to_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => f64::from(u8::from(b)),
            other => other.as_float().unwrap_or_default(),
        }
    }
}

/// The Rust type of a fixed-size datatype.
pub(crate) trait Element: Copy + Debug + Send + Sync + 'static {
    /// The datatype whose elements these are.
    const DATATYPE: DataType;
    /// Bytes per element.
    const SIZE: usize = match Self::DATATYPE.size() {
        Some(size) => size,
        None => panic!("BYTES elements have no fixed size"),
    };

    /// Reads one element from exactly `SIZE` little-endian bytes (a BOOL
    /// byte is true when it is not 0).
    fn read_le(bytes: &[u8]) -> Self;

    /// Appends the element's `SIZE` little-endian bytes.
    fn write_le(self, out: &mut Vec<u8>);

    /// The element's value: integers exactly, FP16/BF16/FP32 widened to f64.
    fn to_scalar(self) -> Scalar;

    /// The element of this type with that value: integers when they fit
    /// (no float is an integer), floats from any number (rounded to the
    /// type), booleans from booleans only. None otherwise.
    fn from_scalar(value: Scalar) -> Option<Self>;
}

impl Element for bool {
    const DATATYPE: DataType = DataType::Bool;

    fn read_le(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }

    fn write_le(self, out: &mut Vec<u8>) {
        out.push(u8::from(self));
    }

    fn to_scalar(self) -> Scalar {
        Scalar::Bool(self)
    }

    fn from_scalar(value: Scalar) -> Option<Self> {
        match value {
            Scalar::Bool(b) => Some(b),
            _ => None,
        }
    }
}

/// The integer types: `Int` or `Uint` scalars, refused when out of range.
macro_rules! integer_elements {
    ($($t:ty => $datatype:ident, $scalar:ident as $wide:ty;)*) => {$(
        impl Element for $t {
            const DATATYPE: DataType = DataType::$datatype;

            fn read_le(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().expect("one element's bytes"))
            }

            fn write_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }

            fn to_scalar(self) -> Scalar {
                Scalar::$scalar(self as $wide)
            }

            fn from_scalar(value: Scalar) -> Option<Self> {
                match value {
                    Scalar::Int(i) => <$t>::try_from(i).ok(),
                    Scalar::Uint(u) => <$t>::try_from(u).ok(),
                    Scalar::Bool(_) | Scalar::Float(_) => None,
                }
            }
        }
    )*};
}

integer_elements! {
    u8 => Uint8, Uint as u64;
    u16 => Uint16, Uint as u64;
    u32 => Uint32, Uint as u64;
    u64 => Uint64, Uint as u64;
    i8 => Int8, Int as i64;
    i16 => Int16, Int as i64;
    i32 => Int32, Int as i64;
    i64 => Int64, Int as i64;
}

/// The float types: from any number through f64, to a `Float` scalar.
macro_rules! float_elements {
    ($($t:ty => $datatype:ident, from $from:expr, to $to:expr;)*) => {$(
        impl Element for $t {
            const DATATYPE: DataType = DataType::$datatype;

            fn read_le(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().expect("one element's bytes"))
            }

            fn write_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }

            fn to_scalar(self) -> Scalar {
                Scalar::Float($to(self))
            }

            fn from_scalar(value: Scalar) -> Option<Self> {
                value.as_float().map($from)
            }
        }
    )*};
}

float_elements! {
    f32 => Fp32, from |x: f64| x as f32, to f64::from;
    f64 => Fp64, from identity, to identity;
    f16 => Fp16, from f16::from_f64, to f16::to_f64;
    bf16 => Bf16, from bf16::from_f64, to bf16::to_f64;
}

/// The elements of little-endian tensor data (a trailing partial element
/// is ignored).
pub(crate) fn elements<T: Element>(data: &[u8]) -> impl ExactSizeIterator<Item = T> + '_ {
    data.chunks_exact(T::SIZE).map(T::read_le)
}

/// Little-endian tensor data → its elements.
#[cfg_attr(not(feature = "onnx"), allow(dead_code))] // the ONNX backend
pub(crate) fn decode<T: Element>(data: &[u8]) -> Vec<T> {
    elements(data).collect()
}

/// Elements → little-endian tensor data.
#[cfg_attr(not(feature = "onnx"), allow(dead_code))] // the ONNX backend
pub(crate) fn encode<'a, T: Element>(values: impl IntoIterator<Item = &'a T>) -> Vec<u8> {
    let values = values.into_iter();
    let mut out = Vec::with_capacity(values.size_hint().0 * T::SIZE);
    for v in values {
        v.write_le(&mut out);
    }
    out
}

/// A computation over elements of one static type, run for a datatype
/// known at run time by [`DataType::with_element`].
pub(crate) trait ElementFn {
    type Output;
    fn call<T: Element>(self) -> Self::Output;
}

impl DataType {
    /// Runs `f` with this datatype's [`Element`] type; None for BYTES.
    pub(crate) fn with_element<F: ElementFn>(self, f: F) -> Option<F::Output> {
        Some(match self {
            DataType::Bool => f.call::<bool>(),
            DataType::Uint8 => f.call::<u8>(),
            DataType::Uint16 => f.call::<u16>(),
            DataType::Uint32 => f.call::<u32>(),
            DataType::Uint64 => f.call::<u64>(),
            DataType::Int8 => f.call::<i8>(),
            DataType::Int16 => f.call::<i16>(),
            DataType::Int32 => f.call::<i32>(),
            DataType::Int64 => f.call::<i64>(),
            DataType::Fp16 => f.call::<f16>(),
            DataType::Fp32 => f.call::<f32>(),
            DataType::Fp64 => f.call::<f64>(),
            DataType::Bf16 => f.call::<bf16>(),
            DataType::Bytes => return None,
        })
    }
}

/// A numeric tensor's elements as f64, for ranking (the classification
/// extension); a BOOL element counts as its byte's value. None for BYTES.
pub(crate) fn to_f64s(datatype: DataType, data: &[u8]) -> Option<Vec<f64>> {
    struct ToF64<'a>(&'a [u8]);
    impl ElementFn for ToF64<'_> {
        type Output = Vec<f64>;
        fn call<T: Element>(self) -> Vec<f64> {
            elements::<T>(self.0)
                .map(|x| x.to_scalar().to_f64())
                .collect()
        }
    }
    if datatype == DataType::Bool {
        return Some(data.iter().map(|&b| f64::from(b)).collect());
    }
    datatype.with_element(ToF64(data))
}

/// Little-endian tensor data of one numeric type converted to another, as
/// a cast does: to a float by value (rounded), to an integer truncated and
/// saturated to its range, to BOOL as not-zero. None for BYTES.
#[cfg_attr(not(feature = "openvino"), allow(dead_code))] // the OpenVINO backend
pub(crate) fn cast(data: &[u8], from: DataType, to: DataType) -> Option<Vec<u8>> {
    struct Read<'a>(&'a [u8]);
    impl ElementFn for Read<'_> {
        type Output = Vec<Scalar>;
        fn call<T: Element>(self) -> Vec<Scalar> {
            elements::<T>(self.0).map(Element::to_scalar).collect()
        }
    }
    struct Write(Vec<Scalar>);
    impl ElementFn for Write {
        type Output = Option<Vec<u8>>;
        fn call<T: Element>(self) -> Option<Vec<u8>> {
            let mut out = Vec::with_capacity(self.0.len() * T::SIZE);
            for value in self.0 {
                T::from_scalar(convert(value, T::DATATYPE)?)?.write_le(&mut out);
            }
            Some(out)
        }
    }
    /// The value as one the target type takes exactly.
    fn convert(value: Scalar, to: DataType) -> Option<Scalar> {
        let wide: i128 = match value {
            Scalar::Bool(b) => i128::from(b),
            Scalar::Int(i) => i128::from(i),
            Scalar::Uint(u) => i128::from(u),
            // Truncated toward zero, saturated (NaN is 0), as `as` does.
            Scalar::Float(f) => f as i128,
        };
        let (lo, hi): (i128, i128) = match to {
            DataType::Bool => return Some(Scalar::Bool(value.to_f64() != 0.0)),
            DataType::Fp16 | DataType::Fp32 | DataType::Fp64 | DataType::Bf16 => {
                return Some(Scalar::Float(value.to_f64()))
            }
            DataType::Uint8 => (0, u8::MAX.into()),
            DataType::Uint16 => (0, u16::MAX.into()),
            DataType::Uint32 => (0, u32::MAX.into()),
            DataType::Uint64 => (0, u64::MAX.into()),
            DataType::Int8 => (i8::MIN.into(), i8::MAX.into()),
            DataType::Int16 => (i16::MIN.into(), i16::MAX.into()),
            DataType::Int32 => (i32::MIN.into(), i32::MAX.into()),
            DataType::Int64 => (i64::MIN.into(), i64::MAX.into()),
            DataType::Bytes => return None,
        };
        let v = wide.clamp(lo, hi);
        Some(if lo == 0 {
            Scalar::Uint(v as u64)
        } else {
            Scalar::Int(v as i64)
        })
    }
    let values = if from == DataType::Bool {
        data.iter().map(|&b| Scalar::Bool(b != 0)).collect()
    } else {
        from.with_element(Read(data))?
    };
    to.with_element(Write(values))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn casts_convert_by_value_truncate_and_saturate() {
        let f32s = encode(&[1.7f32, -2.5, 300.0, f32::NAN]);
        assert_eq!(
            cast(&f32s, DataType::Fp32, DataType::Uint8).unwrap(),
            [1, 0, 255, 0]
        );
        let i8s = cast(&f32s, DataType::Fp32, DataType::Int8).unwrap();
        assert_eq!(i8s, [1u8, (-2i8) as u8, 127, 0]);
        let halves = cast(&f32s[..8], DataType::Fp32, DataType::Fp16).unwrap();
        assert_eq!(
            decode::<f16>(&halves),
            [f16::from_f32(1.7), f16::from_f32(-2.5)]
        );
        let ints = encode(&[0i64, 5, -1]);
        assert_eq!(
            cast(&ints, DataType::Int64, DataType::Bool).unwrap(),
            [0, 1, 1]
        );
        assert_eq!(
            decode::<f64>(&cast(&ints, DataType::Int64, DataType::Fp64).unwrap()),
            [0.0, 5.0, -1.0]
        );
        assert!(cast(b"ab", DataType::Bytes, DataType::Int8).is_none());
    }

    /// The datatype and size `with_element` picks, checked against the type.
    struct Describe;
    impl ElementFn for Describe {
        type Output = (DataType, usize);
        fn call<T: Element>(self) -> (DataType, usize) {
            assert_eq!(T::SIZE, std::mem::size_of::<T>(), "{:?}", T::DATATYPE);
            (T::DATATYPE, T::SIZE)
        }
    }

    #[test]
    fn every_fixed_size_datatype_has_its_element_type() {
        for dt in DataType::ALL {
            match dt.with_element(Describe) {
                Some((datatype, size)) => {
                    assert_eq!(datatype, dt);
                    assert_eq!(Some(size), dt.size(), "{dt:?}");
                }
                None => assert_eq!(dt, DataType::Bytes),
            }
        }
    }

    #[test]
    fn little_endian_round_trips() {
        let ints = [-2i32, 0, 7, i32::MAX];
        let bytes = encode(&ints);
        assert_eq!(bytes[..4], (-2i32).to_le_bytes());
        assert_eq!(decode::<i32>(&bytes), ints);
        let halves = [f16::from_f32(1.5), f16::from_f32(-0.25)];
        assert_eq!(decode::<f16>(&encode(&halves)), halves);
        let bf = [bf16::from_f32(3.0)];
        assert_eq!(encode(&bf), 3.0f32.to_bits().to_le_bytes()[2..]);
        // A BOOL byte is true when not 0, and written as 0 or 1.
        assert_eq!(decode::<bool>(&[0, 1, 2]), [false, true, true]);
        assert_eq!(encode(&[true, false]), [1, 0]);
        // A trailing partial element is ignored.
        assert_eq!(decode::<u16>(&[1, 0, 9]), [1]);
    }

    #[test]
    fn scalars_convert_by_kind_and_range() {
        assert_eq!(u8::from_scalar(Scalar::Uint(255)), Some(255));
        assert_eq!(u8::from_scalar(Scalar::Uint(256)), None);
        assert_eq!(u8::from_scalar(Scalar::Int(-1)), None);
        assert_eq!(i8::from_scalar(Scalar::Int(-128)), Some(-128));
        assert_eq!(u64::from_scalar(Scalar::Uint(u64::MAX)), Some(u64::MAX));
        assert_eq!(i64::from_scalar(Scalar::Uint(u64::MAX)), None);
        assert_eq!(i32::from_scalar(Scalar::Float(1.0)), None);
        assert_eq!(i32::from_scalar(Scalar::Bool(true)), None);
        assert_eq!(bool::from_scalar(Scalar::Uint(1)), None);
        assert_eq!(bool::from_scalar(Scalar::Bool(true)), Some(true));
        assert_eq!(f32::from_scalar(Scalar::Int(-3)), Some(-3.0));
        assert_eq!(f32::from_scalar(Scalar::Bool(false)), None);
        assert_eq!(
            f16::from_scalar(Scalar::Float(0.1)),
            Some(f16::from_f64(0.1))
        );
        assert_eq!(0.1f32.to_scalar(), Scalar::Float(0.1f32 as f64));
        assert_eq!((-5i16).to_scalar(), Scalar::Int(-5));
        assert_eq!(7u32.to_scalar(), Scalar::Uint(7));
        assert_eq!(f16::from_f32(2.5).to_scalar(), Scalar::Float(2.5));
    }

    #[test]
    fn f64s_for_ranking() {
        assert_eq!(
            to_f64s(DataType::Int16, &encode(&[-3i16, 4])),
            Some(vec![-3.0, 4.0])
        );
        assert_eq!(
            to_f64s(DataType::Fp16, &encode(&[f16::from_f32(0.5)])),
            Some(vec![0.5])
        );
        assert_eq!(
            to_f64s(DataType::Bool, &[0, 1, 2]),
            Some(vec![0.0, 1.0, 2.0])
        );
        assert_eq!(to_f64s(DataType::Bytes, &[]), None);
    }
}
