//! Host ports for published container ports.
//!
//! The harness picks each node's host port itself instead of letting docker
//! choose, so the port is known before the container exists (etcd must
//! advertise it) and stays the same across `docker stop`/`start` (docker
//! re-picks an unspecified port on every start). Ports are drawn below the
//! kernel's ephemeral range, so outgoing connections and `bind(0)` listeners
//! (such as the fault proxies) never take a node's port while it is down.

use std::collections::HashSet;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::Mutex;

use rand::Rng;

/// Ports handed out by this process, never handed out twice.
static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

const LOWEST: u16 = 20_000;

fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// A port on 127.0.0.1 that is free right now and was not given out before
/// by this process. Another process may still take it before docker binds
/// it; the caller retries with a new port when docker reports a conflict.
pub(crate) fn pick() -> std::io::Result<u16> {
    let high = ephemeral_low().max(LOWEST + 1_000);
    let mut rng = rand::rng();
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let given = given.get_or_insert_with(HashSet::new);
    for _ in 0..1_000 {
        let port = rng.random_range(LOWEST..high);
        if given.contains(&port) {
            continue;
        }
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            given.insert(port);
            return Ok(port);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        "no free port below the ephemeral range",
    ))
}

/// Whether a docker error says the host port was taken.
pub(crate) fn is_conflict(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("port is already allocated") || m.contains("address already in use")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picked_ports_are_distinct_free_and_below_the_ephemeral_range() {
        let a = pick().unwrap();
        let b = pick().unwrap();
        assert_ne!(a, b);
        assert!(a < ephemeral_low().max(LOWEST + 1_000));
        TcpListener::bind((Ipv4Addr::LOCALHOST, a)).expect("picked port is bindable");
    }
}
