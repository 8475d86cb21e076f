//! Image garbage collection: kubelet's ImageGCManager with history in the store.
//!
//! `detect` turns the runtime's lists into record changes; `evict` holds the rules of the
//! eviction walk (shared with explain); `space` the space pass's arithmetic (usage, amount to
//! free, target: [`SpaceNeed`], shared with explain and the bench); `manager` runs detect, GarbageCollect and
//! DeleteUnusedImages against an [`crate::cri::ImageRuntime`] and the store. Everything takes
//! `now` as an argument; nothing here reads a clock or sleeps.

pub mod detect;
mod error;
pub mod evict;
pub mod explain;
pub mod format;
pub mod kubelet;
pub mod manager;
pub mod metrics;
mod pins;
pub mod plan;
mod policy;
mod space;

pub use error::{GcError, aggregate};
pub use kubelet::KubeletView;
pub use manager::{CycleTime, DetectReport, GcConfig, GcPlan, GcReport, ImageGcManager, Removal};
pub use metrics::{GcMetrics, GcProgress, RemovalReason, RescueReason};
pub use pins::PinPatterns;
pub use plan::{SpaceStep, SpaceWalk, plan_space_victims};
pub use policy::GcPolicy;
pub use space::SpaceNeed;
