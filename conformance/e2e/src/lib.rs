//! Nothing but tests: `tests/` holds the facade's end-to-end tests that need
//! real servers in containers (see this crate's Cargo.toml for why they are
//! not in the root package).
