//! The Lua scripts every master runs: each decision is one atomic step on
//! one master, and compares the lease's random value, never the key alone.

use redis::Script;

/// `KEYS[1]` the lease key; `ARGV[1]` our value, `ARGV[2]` the TTL in ms,
/// `ARGV[3]` the channel. Takes a free key (`SET NX PX`) and tells waiting
/// watchers; otherwise answers who holds it and for how much longer.
/// Returns `{1}` or `{0, holder value, pttl}`.
pub(crate) const ACQUIRE: &str = include_str!("lua/acquire.lua");

/// `KEYS[1]`, `ARGV[1]` our value, `ARGV[2]` the TTL in ms. Extends the
/// key only while it still holds our value: 1 extended, 0 not ours (gone
/// or someone else's). A key that is gone is never set again here: that
/// would be a new grant that nobody asked for.
pub(crate) const EXTEND: &str = include_str!("lua/extend.lua");

/// `KEYS[1]`, `ARGV[1]` our value, `ARGV[2]` the time left in ms. Only for
/// a holder whose renewal a majority just extended: lengthens the key to
/// that if it holds our value with less left, takes it if it is gone (a
/// master restarted empty, a grant or an extension that missed it), and
/// leaves someone else's alone. Taking it is safe while our majority
/// stands (majorities intersect), and it restores the spare a lease needs
/// to survive one more such loss.
///
/// It never shortens a key: commands on one master run in the order sent,
/// so a late repair of renewal k (with k's time left) can run after
/// renewal k+1's extension, which k+1 counted. `PEXPIRE … GT` would say
/// the same but needs Redis 7; the comparison here works from 2.6.12 on.
/// Returns 1 ours (lengthened or already longer), 2 taken, 0 someone
/// else's.
pub(crate) const REPAIR: &str = include_str!("lua/repair.lua");

/// `KEYS[1]`, `ARGV[1]` our value, `ARGV[2]` the channel. Deletes the key
/// only if it holds our value, and wakes the waiters with `vacant:<value>`
/// (the value released: a waiter that believed it held the key asks every
/// master again): 1 deleted, 0 it was not ours (already gone, or someone
/// else's now).
pub(crate) const RELEASE: &str = include_str!("lua/release.lua");

/// `KEYS[1]`. Who holds the key and for how much longer: `{value, pttl}`,
/// `{false, -2}` when free.
pub(crate) const LOOK: &str = include_str!("lua/look.lua");

/// The scripts, hashed once.
pub(crate) struct Scripts {
    pub acquire: Script,
    pub extend: Script,
    pub repair: Script,
    pub release: Script,
    pub look: Script,
}

impl Scripts {
    pub(crate) fn new() -> Scripts {
        Scripts {
            acquire: Script::new(ACQUIRE),
            extend: Script::new(EXTEND),
            repair: Script::new(REPAIR),
            release: Script::new(RELEASE),
            look: Script::new(LOOK),
        }
    }

    pub(crate) fn all(&self) -> [&'static str; 5] {
        [ACQUIRE, EXTEND, REPAIR, RELEASE, LOOK]
    }
}
