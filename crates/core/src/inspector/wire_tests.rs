use super::*;

fn schedule() -> Schedule {
    Schedule {
        id: "daily".into(),
        name: Some("daily".into()),
        kind: "cron".into(),
        action: "tick".into(),
        args: vec![0x80],
        next_run_at: 1_700_000_000_000,
        last_run_at: None,
        expression: Some("0 0 * * *".into()),
        timezone: Some("UTC".into()),
        interval_ms: None,
        max_history: Some(100),
    }
}

/// One message of every kind.
fn every_message() -> Vec<Message> {
    let connection = Connection { id: "c1".into(), details: vec![0xa0] };
    vec![
        Message::State { rid: 1, state: Some(vec![0xa0]), is_state_enabled: true },
        Message::Connections { rid: 2, connections: vec![connection.clone()] },
        Message::Action { rid: 3, output: vec![0x07] },
        Message::ConnectionsUpdated { connections: vec![connection.clone()] },
        Message::QueueUpdated { queue_size: 4 },
        Message::StateUpdated { state: vec![0xa0] },
        Message::WorkflowHistoryUpdated { history: vec![1, 2] },
        Message::SchedulesUpdated { schedules: vec![schedule()] },
        Message::Rpcs { rid: 5, rpcs: vec!["a".into(), "b".into()] },
        Message::TraceQuery { rid: 6, payload: vec![] },
        Message::Queue {
            rid: 7,
            status: QueueStatus {
                size: 3,
                max_size: 1000,
                messages: vec![QueueMessageSummary { id: 1, name: "jobs".into(), created_at_ms: 5 }],
                truncated: true,
            },
        },
        Message::WorkflowHistory { rid: 8, history: Some(vec![9]), is_workflow_enabled: true },
        Message::WorkflowReplay { rid: 9, history: None, is_workflow_enabled: false },
        Message::Schedules { rid: 10, schedules: vec![schedule()] },
        Message::ScheduleHistory {
            rid: 11,
            schedule_id: "daily".into(),
            history: vec![ScheduleFire {
                action: "tick".into(),
                scheduled_at: 1,
                fired_at: 2,
                finished_at: Some(3),
                result: "error".into(),
                error: Some(ScheduleError {
                    group: "user".into(),
                    code: "boom".into(),
                    message: "it broke".into(),
                    metadata: None,
                }),
            }],
        },
        Message::ScheduleDelete { rid: 12, schedule_id: "daily".into(), deleted: true },
        Message::Error { message: "x".into() },
        Message::Init(Box::new(Init {
            connections: vec![connection],
            state: Some(vec![0xa0]),
            is_state_enabled: true,
            rpcs: vec!["increment".into()],
            is_database_enabled: true,
            queue_size: 2,
            workflow_history: None,
            is_workflow_enabled: false,
            tab_config: vec![TabConfigEntry { id: "logs".into(), label: None, icon: None, hidden: true }],
            schedules: vec![schedule()],
        })),
        Message::DatabaseSchema { rid: 13, schema: vec![0xa0] },
        Message::DatabaseTableRows { rid: 14, result: vec![0x80] },
    ]
}

#[test]
fn every_message_reads_back_as_written_with_its_tag() {
    for (tag, message) in every_message().into_iter().enumerate() {
        let bytes = encode_message(&message);
        assert_eq!(u64::from(bytes[0]), tag as u64, "{message:?}");
        assert_eq!(decode_message(&bytes).unwrap(), message);
        assert!(decode_message(&bytes[..bytes.len() - 1]).is_err(), "truncated {message:?}");
        assert!(decode_message(&[bytes.clone(), vec![0]].concat()).is_err(), "trailing byte after {message:?}");
    }
    assert!(decode_message(&[20]).is_err());
}

#[test]
fn messages_encode_as_the_schema_lays_them_out() {
    let state = Message::State { rid: 1, state: Some(vec![0xa0]), is_state_enabled: true };
    assert_eq!(encode_message(&state), [0, 1, 1, 1, 0xa0, 1]);
    assert_eq!(encode_message(&Message::StateUpdated { state: vec![0xa0] }), [5, 1, 0xa0]);
    assert_eq!(encode_message(&Message::Init(Box::default())), [17, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(encode_message(&Message::Error { message: "x".into() }), [16, 1, b'x']);
    let queue = Message::Queue {
        rid: 2,
        status: QueueStatus {
            size: 1,
            max_size: 300,
            messages: vec![QueueMessageSummary { id: 1, name: "q".into(), created_at_ms: 0 }],
            truncated: false,
        },
    };
    assert_eq!(encode_message(&queue), [10, 2, 1, 0xac, 0x02, 1, 1, 1, b'q', 0, 0]);
}

#[test]
fn requests_decode() {
    assert_eq!(decode_request(&[1, 0xac, 0x02]).unwrap(), Request::State { id: 300 });
    assert_eq!(
        decode_request(&[3, 7, 3, b'i', b'n', b'c', 2, 0x81, 2]).unwrap(),
        Request::Action { id: 7, name: "inc".into(), args: vec![0x81, 2] }
    );
    assert_eq!(decode_request(&[6, 1, 50]).unwrap(), Request::Queue { id: 1, limit: 50 });
    assert_eq!(decode_request(&[8, 1, 0]).unwrap(), Request::WorkflowReplay { id: 1, entry_id: None });
    assert_eq!(
        decode_request(&[10, 4, 1, b't', 10, 0]).unwrap(),
        Request::DatabaseTableRows { id: 4, table: "t".into(), limit: 10, offset: 0 }
    );
    assert_eq!(
        decode_request(&[13, 2, 1, b'a', 2, b'a', b't']).unwrap(),
        Request::ScheduleDelete { id: 2, schedule_id: "a".into(), kind: "at".into() }
    );
    assert!(decode_request(&[3, 7, 9, b'x']).is_err(), "truncated name");
    assert!(decode_request(&[14, 1]).is_err(), "unknown kind");
    assert!(decode_request(&[1, 1, 1]).is_err(), "trailing byte");
    assert!(decode_request(&[]).is_err());
}
