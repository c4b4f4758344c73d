//! [`Tap`]s that count a protocol's messages at the fault proxies, for
//! servers whose own counters cannot single out what the suite's clients
//! did ([`BackendFactory::server_requests`](tenure_conformance::BackendFactory::server_requests)).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::proxy::{Observer, Tap};

/// ZooKeeper's wire protocol seen from the proxies of every client of a
/// factory: requests the clients sent, and notifications (watch events) the
/// servers pushed. Left out: each connection's handshake (the connect
/// request and its answer), pings (a session's heartbeat), and answers
/// (each answers a counted request). `mntr`'s packet counters cannot do
/// this: they count every session's pings, a hundred waiting sessions' too.
///
/// Frames are 4-byte big-endian lengths then the frame; a request starts
/// with its xid (pings use -2), a server's frame too (watch events use -1).
#[derive(Clone, Debug, Default)]
pub struct ZooKeeperMessages {
    counts: Arc<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    requests: AtomicU64,
    notifications: AtomicU64,
}

/// The xid of a ping.
const PING_XID: i32 = -2;
/// The xid of a watch event.
const NOTIFICATION_XID: i32 = -1;
/// A frame length no ZooKeeper message reaches (jute.maxbuffer is 1 MiB by
/// default): the stream is not ZooKeeper's, stop reading it.
const MAX_FRAME: usize = 64 << 20;

impl ZooKeeperMessages {
    /// A counter at zero.
    pub fn new() -> ZooKeeperMessages {
        ZooKeeperMessages::default()
    }

    /// Requests sent, pings and handshakes left out.
    pub fn requests(&self) -> u64 {
        self.counts.requests.load(Ordering::Relaxed)
    }

    /// Watch events the servers pushed.
    pub fn notifications(&self) -> u64 {
        self.counts.notifications.load(Ordering::Relaxed)
    }

    /// Requests and notifications.
    pub fn served(&self) -> u64 {
        self.requests() + self.notifications()
    }
}

impl Tap for ZooKeeperMessages {
    fn connection(&self) -> (Observer, Observer) {
        let (up, down) = (self.counts.clone(), self.counts.clone());
        let mut requests = Frames::default();
        let mut answers = Frames::default();
        (
            Box::new(move |bytes| {
                requests.feed(bytes, |xid| {
                    if xid != PING_XID {
                        up.requests.fetch_add(1, Ordering::Relaxed);
                    }
                })
            }),
            Box::new(move |bytes| {
                answers.feed(bytes, |xid| {
                    if xid == NOTIFICATION_XID {
                        down.notifications.fetch_add(1, Ordering::Relaxed);
                    }
                })
            }),
        )
    }
}

/// Splits one direction of a connection into frames.
#[derive(Default)]
struct Frames {
    pending: Vec<u8>,
    /// The handshake frame has gone by.
    connected: bool,
    /// Not a ZooKeeper stream after all.
    lost: bool,
}

impl Frames {
    /// Takes the next bytes; calls `frame` with the xid of every whole
    /// frame after the handshake.
    fn feed(&mut self, bytes: &[u8], mut frame: impl FnMut(i32)) {
        if self.lost {
            return;
        }
        self.pending.extend_from_slice(bytes);
        let mut at = 0;
        while let Some(header) = self.pending.get(at..at + 4) {
            let len = u32::from_be_bytes(header.try_into().expect("4 bytes")) as usize;
            if len > MAX_FRAME {
                self.lost = true;
                self.pending.clear();
                return;
            }
            let Some(body) = self.pending.get(at + 4..at + 4 + len) else {
                break;
            };
            if !self.connected {
                self.connected = true;
            } else if let Some(xid) = body.get(..4) {
                frame(i32::from_be_bytes(xid.try_into().expect("4 bytes")));
            }
            at += 4 + len;
        }
        self.pending.drain(..at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(xid: i32, rest: &[u8]) -> Vec<u8> {
        let mut body = xid.to_be_bytes().to_vec();
        body.extend_from_slice(rest);
        let mut out = (body.len() as u32).to_be_bytes().to_vec();
        out.extend(body);
        out
    }

    #[test]
    fn requests_leave_out_the_handshake_and_pings_and_survive_any_split() {
        let messages = ZooKeeperMessages::new();
        let (mut up, mut down) = messages.connection();
        let mut stream = frame(0, &[0; 40]); // the connect request
        stream.extend(frame(1, &[0, 0, 0, 8, 1, 2])); // getChildren
        stream.extend(frame(PING_XID, &[0, 0, 0, 11]));
        stream.extend(frame(2, &[0, 0, 0, 2, 9])); // delete
                                                   // Byte by byte, then the rest at once: frames split anywhere.
        for b in &stream[..7] {
            up(std::slice::from_ref(b));
        }
        up(&stream[7..]);
        assert_eq!(messages.requests(), 2);
        let mut answers = frame(0, &[0; 30]); // the connect answer
        answers.extend(frame(1, &[0; 16])); // an answer
        answers.extend(frame(NOTIFICATION_XID, &[0; 20]));
        answers.extend(frame(PING_XID, &[0; 16])); // a ping's answer
        down(&answers);
        assert_eq!(messages.notifications(), 1);
        assert_eq!(messages.served(), 3);
    }

    #[test]
    fn a_stream_that_is_not_zookeepers_is_left_alone() {
        let messages = ZooKeeperMessages::new();
        let (mut up, _) = messages.connection();
        up(b"GET / HTTP/1.1\r\n\r\n");
        up(&frame(1, &[0; 8]));
        assert_eq!(messages.requests(), 0);
    }
}
