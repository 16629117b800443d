//! Image preprocessing for `trtis infer IMAGE...` (Triton's image_client):
//! decode JPEG/PNG, convert to the input's channels (RGB or grey), resize
//! so the shorter side is 256/224 of the input's size (bilinear, with
//! antialiasing) and centre-crop to the input's size, scale (`NONE`,
//! `INCEPTION`: x/127.5 - 1, `VGG`: minus 104/117/123 per channel, as
//! image_client does), lay out NCHW or NHWC and cast to the input's type.
//! Pure functions: bytes in, tensor bytes out.

use image::imageops::FilterType;
use image::DynamicImage;

use crate::core::config::pb::model_input::Format;
use crate::core::config::ModelConfig;
use crate::core::types::{DataType, ModelMetadata};

/// image_client's `-s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[value(rename_all = "UPPER")]
pub enum Scaling {
    None,
    Inception,
    Vgg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Nchw,
    Nhwc,
}

/// A model's image input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageInput {
    pub name: String,
    pub datatype: DataType,
    pub layout: Layout,
    pub channels: usize,
    pub height: usize,
    pub width: usize,
    /// The output to classify.
    pub output: String,
    pub batching: bool,
}

impl ImageInput {
    /// The dims of one image, in the input's layout.
    pub fn dims(&self) -> Vec<i64> {
        let (c, h, w) = (self.channels as i64, self.height as i64, self.width as i64);
        match self.layout {
            Layout::Nchw => vec![c, h, w],
            Layout::Nhwc => vec![h, w, c],
        }
    }
}

/// The image input of a model: one input of three dimensions, laid out by
/// its `format` or, without one, by where the 1 or 3 channels are; and one
/// output.
pub fn image_input(meta: &ModelMetadata, config: &ModelConfig) -> Result<ImageInput, String> {
    let model = &meta.name;
    let not_image = |why: String| format!("model '{model}' is not an image model: {why}");
    if meta.inputs.len() != 1 {
        return Err(not_image(format!(
            "it has {} inputs, image classification needs one",
            meta.inputs.len()
        )));
    }
    if meta.outputs.len() != 1 {
        return Err(not_image(format!(
            "it has {} outputs, image classification needs one",
            meta.outputs.len()
        )));
    }
    let input = &meta.inputs[0];
    let batching = config.max_batch_size > 0;
    let dims: Vec<i64> = if batching {
        input.shape.get(1..).unwrap_or_default().to_vec()
    } else {
        input.shape.clone()
    };
    if dims.len() != 3 {
        return Err(not_image(format!(
            "input '{}' has dims {dims:?}; an image input has 3 (CHW or HWC)",
            input.name
        )));
    }
    let format = config
        .input
        .iter()
        .find(|i| i.name == input.name)
        .map(|i| i.format)
        .unwrap_or(0);
    let layout = if format == Format::Nchw as i32 {
        Layout::Nchw
    } else if format == Format::Nhwc as i32 {
        Layout::Nhwc
    } else if matches!(dims[0], 1 | 3) {
        Layout::Nchw
    } else if matches!(dims[2], 1 | 3) {
        Layout::Nhwc
    } else {
        return Err(not_image(format!(
            "input '{}' has dims {dims:?}, with no 1 or 3 channels first or last and no format",
            input.name
        )));
    };
    let (c, h, w) = match layout {
        Layout::Nchw => (dims[0], dims[1], dims[2]),
        Layout::Nhwc => (dims[2], dims[0], dims[1]),
    };
    if h <= 0 || w <= 0 {
        return Err(format!(
            "model '{model}' input '{}' has a variable image size {dims:?}; trtis infer needs fixed height and width",
            input.name
        ));
    }
    if c != 1 && c != 3 {
        return Err(not_image(format!(
            "input '{}' has {c} channels; images have 1 (grey) or 3 (RGB)",
            input.name
        )));
    }
    let datatype = DataType::from_name(&input.datatype)
        .filter(|dt| dt.size().is_some())
        .ok_or_else(|| {
            not_image(format!(
                "input '{}' is {}, not a number type",
                input.name, input.datatype
            ))
        })?;
    Ok(ImageInput {
        name: input.name.clone(),
        datatype,
        layout,
        channels: c as usize,
        height: h as usize,
        width: w as usize,
        output: meta.outputs[0].name.clone(),
        batching,
    })
}

/// Decodes an image file's bytes.
pub fn decode(bytes: &[u8]) -> Result<DynamicImage, String> {
    image::load_from_memory(bytes).map_err(|e| match e {
        image::ImageError::Unsupported(_) | image::ImageError::Decoding(_) => {
            format!("not an image trtis can read (JPEG or PNG): {e}")
        }
        other => other.to_string(),
    })
}

/// Resizes the shorter side to 256/224 of the target's shorter side
/// (bilinear with antialiasing) and centre-crops to `height` x `width`.
/// Returns HWC bytes with `channels` channels.
pub fn resize_crop(img: &DynamicImage, channels: usize, height: usize, width: usize) -> Vec<u8> {
    let img = if channels == 1 {
        DynamicImage::ImageLuma8(img.to_luma8())
    } else {
        DynamicImage::ImageRgb8(img.to_rgb8())
    };
    let (w0, h0) = (img.width() as f64, img.height() as f64);
    let short = (height.min(width) as f64) * 256.0 / 224.0;
    let s = short / w0.min(h0);
    let nw = ((w0 * s).round() as u32).max(width as u32);
    let nh = ((h0 * s).round() as u32).max(height as u32);
    if nw as u64 * nh as u64 > 16 * width as u64 * height as u64 {
        // An extreme aspect ratio: resizing the whole image would take
        // memory without bound, so crop the centre of the source to the
        // same region first, then resize just that.
        let cw = ((width as f64 / s).round() as u32).clamp(1, img.width());
        let ch = ((height as f64 / s).round() as u32).clamp(1, img.height());
        let region = img.crop_imm((img.width() - cw) / 2, (img.height() - ch) / 2, cw, ch);
        let out = region.resize_exact(width as u32, height as u32, FilterType::Triangle);
        return raw_pixels(&out, channels);
    }
    let resized = img.resize_exact(nw, nh, FilterType::Triangle);
    let left = (nw - width as u32) / 2;
    let top = (nh - height as u32) / 2;
    let crop = resized.crop_imm(left, top, width as u32, height as u32);
    raw_pixels(&crop, channels)
}

/// HWC bytes of an image, grey or RGB.
fn raw_pixels(img: &DynamicImage, channels: usize) -> Vec<u8> {
    if channels == 1 {
        img.to_luma8().into_raw()
    } else {
        img.to_rgb8().into_raw()
    }
}

/// HWC bytes → the input's layout, scaling and datatype (little-endian).
pub fn to_tensor(hwc: &[u8], input: &ImageInput, scaling: Scaling) -> Vec<u8> {
    let (c, h, w) = (input.channels, input.height, input.width);
    let scale = |v: u8, channel: usize| -> f32 {
        let x = v as f32;
        match scaling {
            Scaling::None => x,
            Scaling::Inception => x / 127.5 - 1.0,
            Scaling::Vgg => x - [104.0, 117.0, 123.0][channel.min(2)],
        }
    };
    let values: Vec<f32> = match input.layout {
        Layout::Nhwc => hwc
            .iter()
            .enumerate()
            .map(|(i, &v)| scale(v, i % c))
            .collect(),
        Layout::Nchw => {
            let mut out = Vec::with_capacity(c * h * w);
            for ch in 0..c {
                for p in 0..h * w {
                    out.push(scale(hwc[p * c + ch], ch));
                }
            }
            out
        }
    };
    cast(&values, input.datatype)
}

/// f32 values → bytes of `dt` (saturating for integer types).
fn cast(values: &[f32], dt: DataType) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * dt.size().unwrap_or(4));
    for &v in values {
        match dt {
            DataType::Fp32 => out.extend_from_slice(&v.to_le_bytes()),
            DataType::Fp64 => out.extend_from_slice(&(v as f64).to_le_bytes()),
            DataType::Fp16 => out.extend_from_slice(&half::f16::from_f32(v).to_le_bytes()),
            DataType::Bf16 => out.extend_from_slice(&half::bf16::from_f32(v).to_le_bytes()),
            DataType::Uint8 | DataType::Bool => out.push(v.round().clamp(0.0, 255.0) as u8),
            DataType::Int8 => out.push(v.round().clamp(-128.0, 127.0) as i8 as u8),
            DataType::Uint16 => {
                out.extend_from_slice(&(v.round().clamp(0.0, 65535.0) as u16).to_le_bytes())
            }
            DataType::Int16 => out.extend_from_slice(&(v.round() as i16).to_le_bytes()),
            DataType::Uint32 => out.extend_from_slice(&(v.round().max(0.0) as u32).to_le_bytes()),
            DataType::Int32 => out.extend_from_slice(&(v.round() as i32).to_le_bytes()),
            DataType::Uint64 => out.extend_from_slice(&(v.round().max(0.0) as u64).to_le_bytes()),
            DataType::Int64 => out.extend_from_slice(&(v.round() as i64).to_le_bytes()),
            DataType::Bytes => {}
        }
    }
    out
}

/// A file's bytes → the input tensor data of one image.
pub fn preprocess(bytes: &[u8], input: &ImageInput, scaling: Scaling) -> Result<Vec<u8>, String> {
    let img = decode(bytes)?;
    let hwc = resize_crop(&img, input.channels, input.height, input.width);
    Ok(to_tensor(&hwc, input, scaling))
}

/// One classification-extension result, `value:index[:label]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Class {
    pub score: f64,
    pub index: i64,
    pub label: String,
}

pub fn parse_class(s: &str) -> Option<Class> {
    let mut parts = s.splitn(3, ':');
    let score = parts.next()?.parse().ok()?;
    let index = parts.next()?.parse().ok()?;
    Some(Class {
        score,
        index,
        label: parts.next().unwrap_or("").to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(layout: Layout, dt: DataType) -> ImageInput {
        ImageInput {
            name: "x".into(),
            datatype: dt,
            layout,
            channels: 3,
            height: 2,
            width: 2,
            output: "y".into(),
            batching: true,
        }
    }

    #[test]
    fn layouts_and_scalings() {
        // 2x2 RGB, pixel p has (10p, 10p+1, 10p+2).
        let hwc: Vec<u8> = (0..4u8)
            .flat_map(|p| [10 * p, 10 * p + 1, 10 * p + 2])
            .collect();
        let f = |b: Vec<u8>| -> Vec<f32> {
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        };
        let nchw = f(to_tensor(
            &hwc,
            &input(Layout::Nchw, DataType::Fp32),
            Scaling::None,
        ));
        assert_eq!(
            nchw,
            [0., 10., 20., 30., 1., 11., 21., 31., 2., 12., 22., 32.]
        );
        let nhwc = f(to_tensor(
            &hwc,
            &input(Layout::Nhwc, DataType::Fp32),
            Scaling::None,
        ));
        assert_eq!(nhwc[..3], [0., 1., 2.]);
        let inc = f(to_tensor(
            &[255, 0, 127],
            &ImageInput {
                height: 1,
                width: 1,
                ..input(Layout::Nhwc, DataType::Fp32)
            },
            Scaling::Inception,
        ));
        assert_eq!(inc[0], 1.0);
        assert_eq!(inc[1], -1.0);
        let vgg = f(to_tensor(
            &[104, 117, 123],
            &ImageInput {
                height: 1,
                width: 1,
                ..input(Layout::Nhwc, DataType::Fp32)
            },
            Scaling::Vgg,
        ));
        assert_eq!(vgg, [0.0, 0.0, 0.0]);
        let u8s = to_tensor(&hwc, &input(Layout::Nhwc, DataType::Uint8), Scaling::None);
        assert_eq!(u8s, hwc);
    }

    #[test]
    fn extreme_aspect_ratios_are_cropped_before_resizing() {
        // 1 x 20000: resizing it whole to a 256-pixel short side would
        // make a 256 x 5.1 M image (3.9 GB); cropped first it is instant.
        let img =
            DynamicImage::ImageRgb8(image::RgbImage::from_pixel(1, 20000, image::Rgb([9, 8, 7])));
        let out = resize_crop(&img, 3, 224, 224);
        assert_eq!(out.len(), 224 * 224 * 3);
        assert_eq!(&out[..3], &[9, 8, 7]);
    }

    #[test]
    fn classes_parse() {
        assert_eq!(
            parse_class("11.489:967:espresso"),
            Some(Class {
                score: 11.489,
                index: 967,
                label: "espresso".into()
            })
        );
        assert_eq!(parse_class("0.5:3").unwrap().label, "");
        assert_eq!(parse_class("x"), None);
    }

    #[test]
    fn not_images_are_refused_clearly() {
        let e = decode(b"hello, world").unwrap_err();
        assert!(e.contains("not an image"), "{e}");
    }
}
