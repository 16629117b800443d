//! `trtis perf`: Triton's perf_client / perf_analyzer load generator.
//! `setup` turns the flags into a plan and prepared requests (with shared
//! memory regions and sequences); `load` is the measurement logic
//! (windows, stability, sweeps) as pure functions over a
//! [`load::Measure`]; `driver` is the real one (prepared requests from
//! async tasks); `report` prints and writes perf_analyzer's formats; `plot`
//! draws the SVG.

pub mod driver;
pub mod load;
#[cfg(feature = "plot")]
pub mod plot;
#[cfg(not(feature = "plot"))]
#[path = "plot_disabled.rs"]
pub mod plot;
pub mod report;
pub mod setup;
