//! The Lua scripts every master runs: each decision is one atomic step on
//! one master, and compares the lease's random value, never the key alone.

use redis::Script;

/// `KEYS[1]` the lease key; `ARGV[1]` our value, `ARGV[2]` the TTL in ms,
/// `ARGV[3]` the channel. Takes a free key (`SET NX PX`) and tells waiting
/// watchers; otherwise answers who holds it and for how much longer.
/// Returns `{1}` or `{0, holder value, pttl}`.
pub(crate) const ACQUIRE: &str = r#"
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('publish', ARGV[3], 'elected')
  return {1}
end
return {0, redis.call('get', KEYS[1]), redis.call('pttl', KEYS[1])}
"#;

/// `KEYS[1]`, `ARGV[1]` our value, `ARGV[2]` the TTL in ms. Extends the
/// key only while it still holds our value: 1 extended, 0 not ours (gone
/// or someone else's). A key that is gone is never set again here: that
/// would be a new grant that nobody asked for.
pub(crate) const EXTEND: &str = r#"
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"#;

/// `KEYS[1]`, `ARGV[1]` our value, `ARGV[2]` the TTL in ms. Only for a
/// holder whose renewal a majority just extended: extends the key if it
/// holds our value, takes it if it is gone (a master restarted empty, a
/// grant or an extension that missed it), and leaves someone else's alone.
/// Taking it is safe while our majority stands (majorities intersect), and
/// it restores the spare a lease needs to survive one more such loss.
/// Returns 1 extended, 2 taken, 0 someone else's.
pub(crate) const REPAIR: &str = r#"
local held = redis.call('get', KEYS[1])
if held == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
if not held and redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 2
end
return 0
"#;

/// `KEYS[1]`, `ARGV[1]` our value, `ARGV[2]` the channel. Deletes the key
/// only if it holds our value, and wakes the waiters: 1 deleted, 0 it was
/// not ours (already gone, or someone else's now).
pub(crate) const RELEASE: &str = r#"
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('del', KEYS[1])
  redis.call('publish', ARGV[2], 'vacant')
  return 1
end
return 0
"#;

/// `KEYS[1]`. Who holds the key and for how much longer: `{value, pttl}`,
/// `{false, -2}` when free.
pub(crate) const LOOK: &str = r#"
return {redis.call('get', KEYS[1]), redis.call('pttl', KEYS[1])}
"#;

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
