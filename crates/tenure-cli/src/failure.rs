//! What tenure itself reports when it fails, and with which exit status.

use std::fmt;

/// Exit status when tenure itself fails: bad arguments, a backend that
/// cannot be reached or refuses, a campaign that cannot go on.
pub const EXIT_FAILURE: u8 = 2;

/// A failure of tenure itself: a message for standard error and an exit status.
#[derive(Debug)]
pub struct Failure {
    /// What went wrong, for a human.
    pub message: String,
    /// The exit status.
    pub code: u8,
}

impl Failure {
    /// A failure with [`EXIT_FAILURE`].
    pub fn new(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            code: EXIT_FAILURE,
        }
    }

    /// A failure with a status of its own.
    pub fn with_code(code: u8, message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            code,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<tenure::Error> for Failure {
    fn from(error: tenure::Error) -> Self {
        Failure::new(chain(&error))
    }
}

/// An error and the causes its own message does not already show.
pub fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_error_keeps_its_field() {
        let failure = Failure::from(tenure::Error::invalid("ttl", "too short"));
        assert_eq!(failure.message, "invalid ttl: too short");
        assert_eq!(failure.code, EXIT_FAILURE);
    }

    #[test]
    fn every_cause_is_shown_once() {
        #[derive(Debug)]
        struct Transport(std::io::Error);
        impl fmt::Display for Transport {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("transport error")
            }
        }
        impl std::error::Error for Transport {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let outer = tenure::Error::unavailable("etcd", Box::new(Transport(refused)));
        assert_eq!(chain(&outer), "etcd unavailable: transport error: refused");
    }
}
