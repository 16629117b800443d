//! `--plot` in a build without the `plot` cargo feature (plotters): the
//! flag is refused before anything runs, with the reason.

use super::load::Step;

/// Whether this build can draw the chart.
pub const AVAILABLE: bool = false;

/// The reason `--plot` is refused.
pub const UNAVAILABLE: &str =
    "--plot needs a trtis built with the `plot` cargo feature (on by default)";

pub fn write_svg(_path: &std::path::Path, _title: &str, _steps: &[Step]) -> Result<(), String> {
    Err(UNAVAILABLE.to_string())
}
