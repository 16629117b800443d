//! `--plot FILE.svg`: throughput against p50 and p99 latency, one point per
//! step (plotters' SVG backend; no fonts or system libraries needed).

use plotters::prelude::*;

use super::load::{Load, Step};

/// Whether this build can draw the chart.
pub const AVAILABLE: bool = true;

/// The reason `--plot` would be refused (never, in this build).
pub const UNAVAILABLE: &str = "";

/// Writes the chart of the steps to `path`.
pub fn write_svg(path: &std::path::Path, title: &str, steps: &[Step]) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let points = |p: f64| -> Vec<(f64, f64)> {
        steps
            .iter()
            .map(|s| {
                (
                    s.result.throughput(),
                    s.result.percentile_us(p) as f64 / 1000.0,
                )
            })
            .collect()
    };
    let (p50, p99) = (points(50.0), points(99.0));
    let max_x = p50.iter().map(|p| p.0).fold(1.0, f64::max) * 1.1;
    let max_y = p99.iter().map(|p| p.1).fold(1.0, f64::max) * 1.1;
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..max_x, 0.0..max_y)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("throughput (infer/s)")
        .y_desc("latency (ms)")
        .draw()
        .map_err(|e| err(&e))?;
    for (series, color, label) in [(&p50, BLUE, "p50"), (&p99, RED, "p99")] {
        chart
            .draw_series(LineSeries::new(
                series.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart
            .draw_series(series.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(|e| err(&e))?;
    }
    // Each point's load next to the p99 marker.
    chart
        .draw_series(steps.iter().zip(&p99).map(|(s, &p)| {
            let label = match s.load {
                Load::Concurrency(n) => format!("c={n}"),
                Load::Rate(r) => format!("{r}/s"),
            };
            Text::new(label, p, ("sans-serif", 12))
        }))
        .map_err(|e| err(&e))?;
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}
