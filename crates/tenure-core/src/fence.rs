//! The downstream half of fencing: refuse writes from deposed leaders.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::{Error, FencingToken, Result};

/// Keeps the highest fencing token seen per resource and refuses lower ones.
///
/// Embed one in the service that stores what leaders write. Check-and-advance
/// is atomic, and [`Fence::write`] runs the write itself under the same lock,
/// so a write that passed the check cannot be overtaken by a newer leader's.
///
/// ```
/// use tenure_core::{Fence, FencingToken};
///
/// let fence = Fence::new();
/// fence.check("invoices", FencingToken::new(7)).unwrap();
/// fence.check("invoices", FencingToken::new(7)).unwrap(); // same term, more writes
/// assert!(fence.check("invoices", FencingToken::new(6)).is_err()); // deposed leader
/// ```
#[derive(Debug, Default)]
pub struct Fence {
    highest: Mutex<HashMap<String, FencingToken>>,
}

impl Fence {
    /// An empty fence.
    pub fn new() -> Self {
        Self::default()
    }

    /// Accepts `token` for `resource` if it is at least the highest seen, and
    /// remembers it; refuses a lower one with [`Error::StaleToken`].
    pub fn check(&self, resource: &str, token: FencingToken) -> Result<()> {
        self.write(resource, token, || ())
    }

    /// Runs `write` only if `token` is accepted for `resource`, atomically with the check.
    pub fn write<R>(
        &self,
        resource: &str,
        token: FencingToken,
        write: impl FnOnce() -> R,
    ) -> Result<R> {
        let mut highest = self.highest.lock().unwrap_or_else(|e| e.into_inner());
        match highest.get(resource) {
            Some(&seen) if token < seen => {
                tracing::debug!(resource, presented = %token, highest = %seen, "stale token refused");
                Err(Error::StaleToken {
                    resource: resource.to_owned(),
                    presented: token,
                    highest: seen,
                })
            }
            _ => {
                let out = write();
                highest.insert(resource.to_owned(), token);
                Ok(out)
            }
        }
    }

    /// The highest token accepted for `resource`.
    pub fn highest(&self, resource: &str) -> Option<FencingToken> {
        self.highest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(resource)
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fence_refuses_stale_token_and_keeps_the_write_out() {
        let fence = Fence::new();
        let mut log = Vec::new();
        fence
            .write("r", FencingToken::new(5), || log.push(5))
            .unwrap();
        let err = fence
            .write("r", FencingToken::new(4), || log.push(4))
            .unwrap_err();
        assert!(matches!(
            err,
            Error::StaleToken { presented, highest, .. } if presented.get() == 4 && highest.get() == 5
        ));
        fence
            .write("r", FencingToken::new(9), || log.push(9))
            .unwrap();
        assert_eq!(log, [5, 9]);
        assert_eq!(fence.highest("r"), Some(FencingToken::new(9)));
        // Resources are independent.
        fence.check("other", FencingToken::new(1)).unwrap();
    }

    #[test]
    fn fence_check_and_advance_is_atomic_across_threads() {
        let fence = std::sync::Arc::new(Fence::new());
        let accepted = std::sync::Arc::new(Mutex::new(Vec::new()));
        let threads: Vec<_> = (1..=8u64)
            .map(|t| {
                let (fence, accepted) = (fence.clone(), accepted.clone());
                std::thread::spawn(move || {
                    for i in 0..200 {
                        let tok = FencingToken::new(t * 1000 + i);
                        let _ = fence.write("r", tok, || accepted.lock().unwrap().push(tok));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let accepted = accepted.lock().unwrap();
        assert!(
            accepted.windows(2).all(|w| w[0] <= w[1]),
            "writes applied out of token order"
        );
    }
}
