//! Property tests of what the WebSocket router reads from the client: the
//! upgrade path and raw frames. A text frame that is not UTF-8 must close
//! the socket (1007), never panic or reach the actor as text. Whether a
//! socket may hibernate follows its route and the actor's config, for any
//! path.

use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use proptest::test_runner::TestRunner;

use super::can_hibernate;
use crate::actor::websocket::{RawWebSocket, WebSocketData, WebSocketEvent, INVALID_UTF8_REASON};
use crate::actor::ActorConfig;
use crate::contract::RivetkitVersion;
use crate::dispatcher::tests::doubles::Harness;
use crate::protocol::proptests::{bytes, config, text};

/// Which config field decides for a route.
#[derive(Debug, Clone, Copy)]
enum Rule {
    /// `canHibernateConnect`, else the contract profile's default.
    Connect,
    /// `canHibernateWebsocket`.
    Raw,
    Never,
}

/// One started actor's hibernation settings.
#[derive(Debug, Clone, Copy)]
struct Settings {
    connect: Option<bool>,
    websocket: bool,
    contract: RivetkitVersion,
}

impl Settings {
    /// docs/versions.md: an explicit `canHibernateConnect` wins; else 2.3
    /// hibernates `/connect`, 3.0 follows `canHibernateWebsocket`.
    fn connect_expected(self) -> bool {
        match (self.connect, self.contract) {
            (Some(explicit), _) => explicit,
            (None, RivetkitVersion::V2_3) => true,
            (None, RivetkitVersion::V3_0) => self.websocket,
        }
    }
}

/// A started actor (id `actor`) for each `(canHibernateConnect,
/// canHibernateWebsocket, contract)`, and a dispatcher where `actor` has
/// no active generation.
async fn actors() -> (Vec<(Harness, Settings)>, Harness) {
    let mut started = Vec::new();
    for connect in [None, Some(false), Some(true)] {
        for websocket in [false, true] {
            for contract in [RivetkitVersion::V2_3, RivetkitVersion::V3_0] {
                let config = ActorConfig {
                    can_hibernate_connect: connect,
                    can_hibernate_websocket: websocket,
                    contract,
                    ..ActorConfig::default()
                };
                let h = Harness::with_config(config);
                h.start(1).await;
                started.push((h, Settings { connect, websocket, contract }));
            }
        }
    }
    (started, Harness::new())
}

/// Checks `path` against every actor of [`actors`]: `rule` decides for a
/// started one; no active generation (or another actor's id) never hibernates.
fn check(actors: &(Vec<(Harness, Settings)>, Harness), path: &str, rule: Rule) -> Result<(), TestCaseError> {
    let (started, idle) = actors;
    for (h, settings) in started {
        let expected = match rule {
            Rule::Connect => settings.connect_expected(),
            Rule::Raw => settings.websocket,
            Rule::Never => false,
        };
        let why = format!("{path:?}, {settings:?}");
        prop_assert_eq!(can_hibernate(&h.dispatcher, "actor", path), expected, "{}", why);
        prop_assert!(!can_hibernate(&h.dispatcher, "other", path), "another actor's id: {}", why);
    }
    prop_assert!(!can_hibernate(&idle.dispatcher, "actor", path), "no active generation: {path:?}");
    Ok(())
}

#[tokio::test]
async fn hibernation_follows_the_route_and_the_config() {
    let actors = actors().await;
    for (path, rule) in [
        ("/connect", Rule::Connect),
        ("/connect?x=1", Rule::Connect),
        ("/inspector/connect", Rule::Never),
        ("/inspector/connect?token=t", Rule::Never),
        ("/chat", Rule::Raw),
        ("/", Rule::Raw),
        ("", Rule::Raw),
        ("/connect/more", Rule::Raw),
        ("/connectx", Rule::Raw),
        ("/inspector", Rule::Raw),
        ("/inspector/connect/x", Rule::Raw),
    ] {
        check(&actors, path, rule).unwrap();
    }
}

/// docs/versions.md: with nothing set, RivetKit 2.3's `/connect` sockets
/// hibernate and 3.0's close on sleep unless `canHibernateWebsocket`.
#[tokio::test]
async fn connect_sockets_hibernate_by_the_contract_profile() {
    for (contract, websocket, expected) in [
        (RivetkitVersion::V2_3, false, true),
        (RivetkitVersion::V3_0, false, false),
        (RivetkitVersion::V3_0, true, true),
    ] {
        let h = Harness::with_config(ActorConfig {
            can_hibernate_websocket: websocket,
            contract,
            ..ActorConfig::default()
        });
        h.start(1).await;
        assert_eq!(can_hibernate(&h.dispatcher, "actor", "/connect"), expected, "{contract:?}, websocket {websocket}");
    }
}

#[tokio::test]
async fn any_path_is_classified() {
    let actors = actors().await;
    let paths = prop_oneof!["/connect(\\?\\PC{0,8})?", "/inspector/connect(\\?\\PC{0,8})?", "\\PC{0,16}", text()];
    TestRunner::new(config(1000))
        .run(&paths, |path| {
            let rule = match path.split('?').next().unwrap_or("") {
                "/connect" => Rule::Connect,
                "/inspector/connect" => Rule::Never,
                _ => Rule::Raw,
            };
            check(&actors, &path, rule)
        })
        .unwrap();
}

proptest! {
    #![proptest_config(config(1000))]

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
