//! Property tests of what the WebSocket router reads from the client: the
//! upgrade path and raw frames. A text frame that is not UTF-8 must close
//! the socket (1007), never panic or reach the actor as text.

use std::sync::{Arc, Mutex};

use proptest::prelude::*;

use super::can_hibernate;
use crate::actor::websocket::{RawWebSocket, WebSocketData, WebSocketEvent, INVALID_UTF8_REASON};
use crate::protocol::proptests::{bytes, config, text};

proptest! {
    #![proptest_config(config(1000))]

    #[test]
    fn any_path_is_classified(path in prop_oneof!["/connect(\\?\\PC{0,8})?", "\\PC{0,16}", text()]) {
        let expected = path == "/connect" || path.starts_with("/connect?");
        prop_assert_eq!(can_hibernate(&path), expected);
    }

    #[test]
    fn raw_frames_are_delivered_or_close_1007(
        frames in proptest::collection::vec(
            (prop_oneof![bytes(24), "\\PC{0,12}".prop_map(String::into_bytes)], any::<bool>()),
            1..6,
        ),
    ) {
        let ws = RawWebSocket::new();
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = got.clone();
        ws.set_event_sink(Box::new(move |event| sink.lock().unwrap().push(event)));
        let mut expected = Vec::new();
        for (index, (data, binary)) in frames.into_iter().enumerate() {
            let index = index as u16;
            ws.on_client_message(data.clone(), binary, index);
            let data = if binary {
                WebSocketData::Binary(data)
            } else if let Ok(text) = String::from_utf8(data) {
                WebSocketData::Text(text)
            } else {
                let reason = INVALID_UTF8_REASON.to_owned();
                expected.push(WebSocketEvent::Close { code: 1007, reason, was_clean: false });
                break;
            };
            expected.push(WebSocketEvent::Message { data, message_index: Some(index) });
        }
        prop_assert_eq!(got.lock().unwrap().clone(), expected);
    }
}
