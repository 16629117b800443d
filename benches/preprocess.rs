//! How long image preprocessing takes per image (what `trtis infer IMAGE`
//! does before sending): decode, resize and crop to 224x224, INCEPTION
//! scaling into an NCHW FP32 tensor, for each example image; against the
//! reference of merely reading the file, in the same run.
//!
//! Run: `cargo bench --bench preprocess` (or `scripts/bench.sh infer`, which
//! also times `trtis infer` end to end).

use std::time::{Duration, Instant};

use trtis::client::image::{decode, preprocess, resize_crop, ImageInput, Layout, Scaling};
use trtis::core::types::DataType;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let input = ImageInput {
        name: "input".into(),
        datatype: DataType::Fp32,
        layout: Layout::Nchw,
        channels: 3,
        height: 224,
        width: 224,
        output: "output".into(),
        batching: true,
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/images");
    println!("| image | size | read file | decode | resize + crop | whole preprocessing | ratio to read |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for name in ["coffee", "chelsea", "rocket", "astronaut"] {
        let path = dir.join(format!("{name}.jpg"));
        let bytes = std::fs::read(&path).unwrap();
        let img = decode(&bytes).unwrap();
        let runs = 30;
        let time = |f: &mut dyn FnMut()| {
            median(
                (0..runs)
                    .map(|_| {
                        let t = Instant::now();
                        f();
                        t.elapsed()
                    })
                    .collect(),
            )
        };
        let read = time(&mut || {
            std::hint::black_box(std::fs::read(&path).unwrap());
        });
        let dec = time(&mut || {
            std::hint::black_box(decode(&bytes).unwrap());
        });
        let resize = time(&mut || {
            std::hint::black_box(resize_crop(&img, 3, 224, 224));
        });
        let whole = time(&mut || {
            std::hint::black_box(
                preprocess(&std::fs::read(&path).unwrap(), &input, Scaling::Inception).unwrap(),
            );
        });
        println!(
            "| {name}.jpg | {}x{} | {:.3} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.0}x |",
            img.width(),
            img.height(),
            read.as_secs_f64() * 1e3,
            dec.as_secs_f64() * 1e3,
            resize.as_secs_f64() * 1e3,
            whole.as_secs_f64() * 1e3,
            whole.as_secs_f64() / read.as_secs_f64()
        );
    }
}
