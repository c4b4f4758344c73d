//! What the masters answer: the acquire script's reply, and the holder
//! inside a stored value.

use std::time::Duration;

use redis::Value;

use tenure_core::{CandidateId, LeaderInfo};

use crate::master::NodeError;

/// `{1}` → `None` (granted); `{0, holder, pttl}` → who holds it, for how long.
///
/// The time left is `None` for a key that never expires (set by hand
/// without `PX`, or `PERSIST`ed): held, with no known end.
#[allow(clippy::type_complexity)]
pub(crate) fn acquire_answer(
    value: Value,
) -> std::result::Result<Option<(String, Option<Duration>)>, NodeError> {
    let unexpected = |v: &Value| {
        NodeError::Redis(redis::RedisError::from((
            redis::ErrorKind::Parse,
            "unexpected answer to the acquire script",
            format!("{v:?}"),
        )))
    };
    let Value::Array(items) = &value else {
        return Err(unexpected(&value));
    };
    match items.as_slice() {
        [Value::Int(1)] => Ok(None),
        [Value::Int(0), holder, pttl] => {
            let holder = match holder {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                // Expired between SET and GET: free now.
                _ => return Ok(Some((String::new(), Some(Duration::ZERO)))),
            };
            let left = match pttl {
                Value::Int(ms) if *ms > 0 => Some(Duration::from_millis(*ms as u64)),
                Value::Int(-1) => None,
                _ => Some(Duration::ZERO),
            };
            Ok(Some((holder, left)))
        }
        _ => Err(unexpected(&value)),
    }
}

/// The identity inside a stored value (`<40 hex>:<identity>`); a value
/// that tenure did not write is shown whole.
pub(crate) fn holder_of(value: &str) -> LeaderInfo {
    let identity = match value.split_once(':') {
        Some((random, identity)) if random.len() == 40 && !identity.is_empty() => identity,
        _ => value,
    };
    LeaderInfo {
        identity: CandidateId::new(identity)
            .unwrap_or_else(|_| CandidateId::new("(unknown)").expect("a valid identity")),
        token: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_value_names_its_holder() {
        let v = format!("{}:replica-1", "a".repeat(40));
        assert_eq!(holder_of(&v).identity.as_str(), "replica-1");
        assert_eq!(
            holder_of("someone-elses-lock").identity.as_str(),
            "someone-elses-lock"
        );
        assert_eq!(holder_of("").identity.as_str(), "(unknown)");
    }

    #[test]
    fn acquire_answers_are_read() {
        assert!(matches!(
            acquire_answer(Value::Array(vec![Value::Int(1)])),
            Ok(None)
        ));
        let held = Value::Array(vec![
            Value::Int(0),
            Value::BulkString(b"x:y".to_vec()),
            Value::Int(250),
        ]);
        let (holder, left) = acquire_answer(held).unwrap().unwrap();
        assert_eq!(
            (holder.as_str(), left),
            ("x:y", Some(Duration::from_millis(250)))
        );
        let forever = Value::Array(vec![
            Value::Int(0),
            Value::BulkString(b"x:y".to_vec()),
            Value::Int(-1),
        ]);
        assert_eq!(acquire_answer(forever).unwrap().unwrap().1, None);
        assert!(acquire_answer(Value::Int(3)).is_err());
    }
}
