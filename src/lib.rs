#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub use tenure_core::*;

/// The etcd backend (feature `etcd`).
#[cfg(feature = "etcd")]
pub use tenure_etcd as etcd;
