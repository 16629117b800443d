//! Image preprocessing against the reference data shipped with the model
//! (tests/fixtures/images, copied from ../shared/models): the 224x224
//! centre crops PIL made from the example JPEGs must come out of
//! `resize_crop` within a few levels per pixel, and the NCHW INCEPTION
//! tensor of a crop must be exactly x/127.5 - 1.

use std::path::{Path, PathBuf};

use trtis::client::image::{decode, resize_crop, to_tensor, ImageInput, Layout, Scaling};
use trtis::core::types::DataType;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn input() -> ImageInput {
    ImageInput {
        name: "input".into(),
        datatype: DataType::Fp32,
        layout: Layout::Nchw,
        channels: 3,
        height: 224,
        width: 224,
        output: "output".into(),
        batching: true,
    }
}

#[test]
fn resize_and_crop_match_the_reference_crops() {
    for name in ["coffee", "chelsea", "rocket", "astronaut"] {
        let jpg = std::fs::read(root().join(format!("examples/images/{name}.jpg"))).unwrap();
        let ours = resize_crop(&decode(&jpg).unwrap(), 3, 224, 224);
        let png =
            std::fs::read(root().join(format!("tests/fixtures/images/224/{name}.png"))).unwrap();
        let reference = decode(&png).unwrap().to_rgb8().into_raw();
        assert_eq!(ours.len(), reference.len());
        let diffs: Vec<i32> = ours
            .iter()
            .zip(&reference)
            .map(|(&a, &b)| (a as i32 - b as i32).abs())
            .collect();
        let mean = diffs.iter().sum::<i32>() as f64 / diffs.len() as f64;
        let max = *diffs.iter().max().unwrap();
        eprintln!("{name}: mean abs diff {mean:.3}, max {max}");
        // Different JPEG decoders and resamplers: small per-pixel noise,
        // never a shifted or mis-scaled crop (which would give tens).
        assert!(
            mean < 1.0 && max <= 8,
            "{name}: mean abs diff {mean:.2} (max {max})"
        );
    }
}

#[test]
fn inception_scaling_of_a_crop_is_exact() {
    let png = std::fs::read(root().join("tests/fixtures/images/224/coffee.png")).unwrap();
    let hwc = decode(&png).unwrap().to_rgb8().into_raw();
    let t = to_tensor(&hwc, &input(), Scaling::Inception);
    assert_eq!(t.len(), 3 * 224 * 224 * 4);
    let at = |i: usize| f32::from_le_bytes(t[i * 4..i * 4 + 4].try_into().unwrap());
    // Channel 1 (G) of pixel (0, 5) in NCHW.
    let g = hwc[5 * 3 + 1] as f32;
    assert_eq!(at(224 * 224 + 5), g / 127.5 - 1.0);
}
