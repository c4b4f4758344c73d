//! The `serde` feature: the public value types as JSON.
#![cfg(feature = "serde")]

use serde_json::{from_str, json, to_value};
use tenure_core::{
    CandidateId, ElectionKey, ElectorState, FencingToken, LeaderEvent, LeaderInfo, LossReason,
};

#[test]
fn a_token_is_a_number_and_every_u64_survives() {
    for raw in [0, 1, 1 << 53, (1 << 53) + 1, u64::MAX] {
        let token = FencingToken::new(raw);
        assert_eq!(to_value(token).unwrap(), json!(raw));
        assert_eq!(from_str::<FencingToken>(&raw.to_string()).unwrap(), token);
    }
    assert!(from_str::<FencingToken>("-1").is_err());
    assert!(from_str::<FencingToken>("\"7\"").is_err());
}

#[test]
fn keys_and_identities_are_strings_checked_on_the_way_in() {
    let key = ElectionKey::new("billing/job-7").unwrap();
    assert_eq!(to_value(&key).unwrap(), json!("billing/job-7"));
    assert_eq!(from_str::<ElectionKey>("\"billing/job-7\"").unwrap(), key);
    let identity = CandidateId::new("replica-1").unwrap();
    assert_eq!(to_value(&identity).unwrap(), json!("replica-1"));
    assert_eq!(from_str::<CandidateId>("\"replica-1\"").unwrap(), identity);

    let empty_key = from_str::<ElectionKey>("\"\"").unwrap_err().to_string();
    assert!(empty_key.contains("invalid key"), "{empty_key}");
    let padded = from_str::<ElectionKey>("\" a\"").unwrap_err().to_string();
    assert!(padded.contains("invalid key"), "{padded}");
    let control = from_str::<CandidateId>("\"a\\tb\"")
        .unwrap_err()
        .to_string();
    assert!(control.contains("invalid identity"), "{control}");
}

#[test]
fn leader_observations_round_trip() {
    let info = LeaderInfo {
        identity: CandidateId::new("replica-1").unwrap(),
        token: Some(FencingToken::new(42)),
    };
    let elected = LeaderEvent::Elected(info.clone());
    assert_eq!(
        to_value(&elected).unwrap(),
        json!({"elected": {"identity": "replica-1", "token": 42}})
    );
    for event in [elected, LeaderEvent::Vacant] {
        let text = serde_json::to_string(&event).unwrap();
        assert_eq!(from_str::<LeaderEvent>(&text).unwrap(), event);
    }
    assert_eq!(to_value(LeaderEvent::Vacant).unwrap(), json!("vacant"));
    let bad_identity = r#"{"elected": {"identity": "", "token": 1}}"#;
    assert!(from_str::<LeaderEvent>(bad_identity).is_err());
}

#[test]
fn elector_states_round_trip() {
    for state in [
        ElectorState::Follower,
        ElectorState::Leader { token: None },
        ElectorState::Leader {
            token: Some(FencingToken::new(9)),
        },
        ElectorState::Stopped,
    ] {
        let text = serde_json::to_string(&state).unwrap();
        assert_eq!(from_str::<ElectorState>(&text).unwrap(), state, "{text}");
    }
    assert_eq!(
        to_value(ElectorState::Leader {
            token: Some(FencingToken::new(9))
        })
        .unwrap(),
        json!({"leader": {"token": 9}})
    );
}

#[test]
fn loss_reasons_use_their_stable_spelling() {
    for reason in LossReason::ALL {
        assert_eq!(to_value(reason).unwrap(), json!(reason.as_str()));
        let text = serde_json::to_string(&reason).unwrap();
        assert_eq!(from_str::<LossReason>(&text).unwrap(), reason);
    }
    assert!(from_str::<LossReason>("\"Expired\"").is_err());
}
