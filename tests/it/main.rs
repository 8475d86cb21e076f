//! The one integration test binary; a module per area.

mod inspect;
mod pull;
mod store;
