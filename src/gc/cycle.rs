//! One GC cycle's rules, written once: what keeps an image ([`Keeps`]), what each rule needs
//! at the cycle's reading and how the cycle ends ([`CycleNeeds`]), and how far the byte walk
//! goes ([`ByteWalk`]). Pure: everything takes the records' keys, the figures and `now` as
//! arguments. The live cycle (`manager/collect.rs`, `manager/walk.rs`) executes them against
//! the runtime, removing and measuring; `explain` (and so `gc --dry-run`, `inspect explain`)
//! walks the same functions over the records in memory, every removal assumed to succeed;
//! `simulate` and the simulator drive the live cycle against a scripted runtime.
//!
//! The MaxAge rule and the record's own keeps (pinned, used too recently, MinAge) are in
//! `evict.rs`, the arithmetic of each need in `space.rs`; this module decides which of them
//! apply and in what order.
//!
//! Invariants: a key kept by several rules is kept under the first in [`Keeps::kept_by`]'s
//! order (imagekeeper's protections, the kubelet pulling it, in use, the kubelet's fresh pull,
//! a pull in flight, the warm set), in the manager's skip counts and in explain alike; the
//! byte walk frees the larger of the space and budget needs under that rule's name (the space
//! rule's on a tie) and always removes its first eligible image, as the kubelet's does.
//!
//! Adding a GC rule: see ARCHITECTURE.md, "Adding a GC rule".

mod keeps;
mod needs;
mod walk;

pub use keeps::{KeepSets, Keeps};
pub use needs::{ByteGoal, ByteRule, CycleNeeds, SpaceRule};
pub use walk::ByteWalk;
