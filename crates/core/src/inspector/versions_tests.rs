use super::*;
use crate::inspector::wire::{encode_message, Init, Request};

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn code(err: &anyhow::Error) -> String {
    RivetError::extract(err).qualified_code()
}

#[test]
fn older_requests_are_read_as_version_6_requests() {
    // The same bytes from version 2 on for the first kinds.
    for version in 2..=6 {
        assert_eq!(decode_request_in(&[1, 5], version).unwrap(), Request::State { id: 5 }, "v{version}");
        assert_eq!(decode_request_in(&[6, 1, 9], version).unwrap(), Request::Queue { id: 1, limit: 9 });
    }
    // Version 1: RpcsList was kind 6; its event requests have no successor.
    assert_eq!(upgrade_request(&[6, 5], 1).unwrap(), [4, 5]);
    assert_eq!(upgrade_request(&[3, 1, 1, b'a', 0], 1).unwrap(), [3, 1, 1, b'a', 0]);
    assert_eq!(code(&upgrade_request(&[4, 5], 1).unwrap_err()), "inspector.invalid_message");
    assert!(upgrade_request(&[7, 5], 1).is_err());
    // Version 3: the database requests move past WorkflowReplay.
    assert_eq!(upgrade_request(&[8, 7], 3).unwrap(), [9, 7]);
    assert_eq!(
        decode_request_in(&[9, 7, 1, b't', 5, 0], 3).unwrap(),
        Request::DatabaseTableRows { id: 7, table: "t".into(), limit: 5, offset: 0 }
    );
    assert!(upgrade_request(&[8, 7], 2).is_err(), "no database in version 2");
    // Version 4 and 5: the same bytes; the schedules came in 6.
    assert_eq!(upgrade_request(&[8, 1, 0], 4).unwrap(), [8, 1, 0]);
    assert!(upgrade_request(&[11, 5], 5).is_err());
    assert_eq!(upgrade_request(&[11, 5], 6).unwrap(), [11, 5]);
    for version in [0, 7, u16::MAX] {
        assert_eq!(code(&upgrade_request(&[1, 5], version).unwrap_err()), "inspector.unsupported_version");
    }
    assert_eq!(code(&upgrade_request(&[1], 6).unwrap_err()), "inspector.invalid_message");
}

fn tag_in(message: &Message, version: u16) -> u8 {
    downgrade_message(&encode_message(message), version).unwrap()[0]
}

#[test]
fn messages_take_the_tags_of_the_target_version() {
    let error = Message::Error { message: "x".into() };
    let init = Message::Init(Box::default());
    let rpcs = Message::Rpcs { rid: 1, rpcs: vec![] };
    let action = Message::Action { rid: 1, output: vec![0] };
    let schema = Message::DatabaseSchema { rid: 1, schema: vec![0xa0] };
    let updated = Message::StateUpdated { state: vec![0xa0] };
    let expected: [(&Message, [u8; 6]); 6] = [
        (&error, [8, 11, 11, 12, 12, 16]),
        (&init, [9, 12, 12, 13, 13, 17]),
        (&rpcs, [4, 7, 7, 7, 7, 8]),
        (&action, [3, 2, 2, 2, 2, 2]),
        (&updated, [7, 5, 5, 5, 5, 5]),
        (&schema, [8, 11, 13, 14, 14, 18]),
    ];
    for (message, tags) in expected {
        for version in 1..=6u16 {
            assert_eq!(tag_in(message, version), tags[usize::from(version - 1)], "{message:?} in v{version}");
        }
    }
}

#[test]
fn what_an_older_version_lacks_becomes_an_error_naming_it() {
    let dropped = |message: Message, version: u16| {
        let bytes = downgrade_message(&encode_message(&message), version).unwrap();
        String::from_utf8(bytes[2..].to_vec()).unwrap()
    };
    let schedules = Message::Schedules { rid: 1, schedules: vec![] };
    assert_eq!(dropped(schedules.clone(), 5), "inspector.schedules_dropped");
    assert_eq!(dropped(schedules, 1), "inspector.schedules_dropped");
    let replay = Message::WorkflowReplay { rid: 1, history: None, is_workflow_enabled: true };
    assert_eq!(dropped(replay, 3), "inspector.workflow_history_dropped");
    assert_eq!(dropped(Message::DatabaseTableRows { rid: 1, result: vec![0x80] }, 2), "inspector.database_dropped");
    assert_eq!(dropped(Message::QueueUpdated { queue_size: 1 }, 1), "inspector.queue_dropped");
    assert_eq!(dropped(Message::TraceQuery { rid: 1, payload: vec![] }, 1), "inspector.trace_dropped");
    let history = Message::WorkflowHistory { rid: 1, history: None, is_workflow_enabled: false };
    assert_eq!(dropped(history, 1), "inspector.workflow_history_dropped");
}

#[test]
fn init_keeps_the_fields_of_each_version() {
    let init = Init {
        state: Some(vec![0xa0]),
        is_state_enabled: true,
        rpcs: vec!["a".into()],
        queue_size: 3,
        ..Init::default()
    };
    let v6 = encode_message(&Message::Init(Box::new(init)));
    // connections, state, isStateEnabled, rpcs, isDatabaseEnabled.
    let common: &[u8] = &[0, 1, 1, 0xa0, 1, 1, 1, b'a', 0];
    // queueSize, workflowHistory, isWorkflowEnabled.
    let v2: &[u8] = &[3, 0, 0];
    assert_eq!(v6[1..], cat(&[common, v2, &[0, 0]]));
    let at = |version| downgrade_message(&v6, version).unwrap()[1..].to_vec();
    assert_eq!(at(5), cat(&[common, v2, &[0]]), "tabs, no schedules");
    assert_eq!(at(4), cat(&[common, v2]));
    assert_eq!(at(2), at(4));
    assert_eq!(at(1), cat(&[&[0, 0], &common[1..]]), "an empty event list after the connections");
    assert_eq!(downgrade_message(&v6, 6).unwrap(), v6);
}

#[test]
fn undecodable_or_unknown_messages_are_refused() {
    assert_eq!(code(&downgrade_message(&[20], 6).unwrap_err()), "inspector.invalid_message");
    assert_eq!(code(&downgrade_message(&[17, 0], 5).unwrap_err()), "inspector.invalid_message");
    assert_eq!(code(&downgrade_message(&[16, 0], 0).unwrap_err()), "inspector.unsupported_version");
}

#[test]
fn the_legacy_framing_prefixes_frames_with_their_version() {
    let framing = Framing::Legacy;
    assert_eq!(framing.version(), 5);
    assert_eq!(framing.decode(&[6, 0, 1, 4]).unwrap(), Request::State { id: 4 });
    assert_eq!(framing.decode(&[1, 0, 6, 4]).unwrap(), Request::Rpcs { id: 4 }, "a version 1 frame");
    assert!(framing.decode(&[6]).is_err());
    let error = Message::Error { message: "x".into() };
    assert_eq!(framing.encode(error.clone()).unwrap(), [5, 0, 12, 1, b'x']);
    assert_eq!(Framing::Negotiated(1).encode(error).unwrap(), [8, 1, b'x']);
}
