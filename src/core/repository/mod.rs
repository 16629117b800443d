//! The model repository: its layout on disk and checking the configurations
//! in it. (Loading and serving models arrives with `trtis serve`.)

pub mod check;
pub mod layout;

pub use check::{check_model_dir, check_repository, CheckOptions, CheckedModel, Finding};
