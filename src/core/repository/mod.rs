//! The model repository: its layout on disk, checking the configurations in
//! it, and the lifecycle of the models loaded from it.

pub mod check;
pub mod layout;
pub mod lifecycle;
mod loader;
mod overrides;
mod table;
mod types;

pub use check::{
    check_completed, check_repositories, check_repository, CheckOptions, CheckedModel, Finding,
};
pub use lifecycle::{
    in_parallel, ControlMode, IndexEntry, ManagerOptions, ModelManager, ModelState,
};
pub use loader::LoadedModel;
pub use overrides::LoadOverride;
pub use types::ModelId;
