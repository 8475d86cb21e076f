//! The one integration test binary; a module per area.

mod corrupt;
mod crash;
mod pull;
mod store;
