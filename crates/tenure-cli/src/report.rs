//! How `status` and `watch` print what they see: text for people, JSON for
//! programs. Times are when *this* command saw the state: no backend tells
//! when a term began.

use std::time::SystemTime;

use serde_json::{json, Value};
use tenure::{LeaderEvent, LeaderInfo};

/// `2025-06-01T12:00:00.123Z`.
pub fn timestamp(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

/// The token as text, or why there is none.
fn token_text(info: &LeaderInfo) -> String {
    match info.token {
        Some(token) => token.to_string(),
        None => "none (this backend does not fence)".to_owned(),
    }
}

/// `tenure status`, as text.
pub fn status_text(key: &str, leader: Option<&LeaderInfo>, seen: SystemTime) -> String {
    let seen = timestamp(seen);
    match leader {
        Some(info) => format!(
            "key:     {key}\nleader:  {}\ntoken:   {}\nseen at: {seen} (when this command looked; the backend does not say when the term began)\n",
            info.identity,
            token_text(info)
        ),
        None => format!("key:     {key}\nleader:  none (vacant)\nseen at: {seen}\n"),
    }
}

/// `tenure status --json`: one object.
pub fn status_json(key: &str, leader: Option<&LeaderInfo>, seen: SystemTime) -> Value {
    json!({
        "key": key,
        "leader": leader.map(|info| json!({
            "identity": info.identity.as_str(),
            "token": info.token.map(|t| t.get()),
        })),
        "seen_at": timestamp(seen),
    })
}

/// One `tenure watch` line, as text.
pub fn event_text(event: &LeaderEvent, seen: SystemTime) -> String {
    let seen = timestamp(seen);
    match event {
        LeaderEvent::Elected(info) => match info.token {
            Some(token) => format!("{seen} elected {} token={token}", info.identity),
            None => format!("{seen} elected {}", info.identity),
        },
        LeaderEvent::Vacant => format!("{seen} vacant"),
    }
}

/// One `tenure watch --json` line.
pub fn event_json(key: &str, event: &LeaderEvent, seen: SystemTime) -> Value {
    match event {
        LeaderEvent::Elected(info) => json!({
            "seen_at": timestamp(seen),
            "key": key,
            "event": "elected",
            "identity": info.identity.as_str(),
            "token": info.token.map(|t| t.get()),
        }),
        LeaderEvent::Vacant => json!({
            "seen_at": timestamp(seen),
            "key": key,
            "event": "vacant",
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use tenure::{CandidateId, FencingToken};

    use super::*;

    fn leader(token: Option<u64>) -> LeaderInfo {
        LeaderInfo {
            identity: CandidateId::new("host-1").unwrap(),
            token: token.map(FencingToken::new),
        }
    }

    fn at() -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(1_700_000_000_123)
    }

    #[test]
    fn status_names_leader_token_and_what_the_time_means() {
        let text = status_text("billing", Some(&leader(Some(42))), at());
        assert!(text.contains("leader:  host-1\n"), "{text}");
        assert!(text.contains("token:   42\n"), "{text}");
        assert!(
            text.contains("2023-11-14T22:13:20.123Z (when this command looked"),
            "{text}"
        );
        let text = status_text("billing", Some(&leader(None)), at());
        assert!(text.contains("does not fence"), "{text}");
        let text = status_text("billing", None, at());
        assert!(text.contains("vacant"), "{text}");
    }

    #[test]
    fn status_json_has_a_null_leader_when_vacant() {
        let value = status_json("billing", None, at());
        assert_eq!(value["leader"], Value::Null);
        let value = status_json("billing", Some(&leader(Some(7))), at());
        assert_eq!(value["leader"]["identity"], "host-1");
        assert_eq!(value["leader"]["token"], 7);
    }

    #[test]
    fn watch_lines_say_elected_or_vacant() {
        let elected = LeaderEvent::Elected(leader(Some(42)));
        assert_eq!(
            event_text(&elected, at()),
            "2023-11-14T22:13:20.123Z elected host-1 token=42"
        );
        assert_eq!(
            event_text(&LeaderEvent::Vacant, at()),
            "2023-11-14T22:13:20.123Z vacant"
        );
        let line = event_json("k", &elected, at()).to_string();
        let back: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back["event"], "elected");
        assert_eq!(back["token"], 42);
        assert_eq!(
            event_json("k", &LeaderEvent::Vacant, at())["event"],
            "vacant"
        );
    }
}
