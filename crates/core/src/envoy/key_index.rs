//! The engine's key index, asked over its HTTP API: `GET /actors` by name
//! and key (invariant I13, docs/generations.md). With several engine nodes
//! (docs/deploy.md) a node that cannot answer is skipped for the next one,
//! and the one that answered is asked first next time.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{bail, Context};
use serde::Deserialize;
use url::Url;

use crate::actor::link::KeyOwner;
use crate::engine::http;

/// One question takes at most this long; a slower engine is treated as
/// an engine that cannot answer (the start goes on, and says so).
const ASK_TIMEOUT: Duration = Duration::from_secs(3);
/// How often an overload answer (engine 3.0, `retry_after_ms`) is asked
/// again before it counts as a failure.
const OVERLOAD_RETRIES: usize = 5;

/// Where and as whom to ask.
#[derive(Debug)]
pub struct KeyIndex {
    /// Every engine node's API, in the configured order.
    endpoints: Vec<Url>,
    /// The node that answered last.
    current: AtomicUsize,
    namespace: String,
    token: Option<String>,
    /// The engine refused our token for this once (401/403): later starts
    /// do not ask again, so the log says it once, not once per actor.
    refused: AtomicBool,
}

#[derive(Deserialize)]
struct ActorList {
    #[serde(default)]
    actors: Vec<ListedActor>,
}

#[derive(Deserialize)]
struct ListedActor {
    actor_id: String,
    #[serde(default)]
    destroy_ts: Option<i64>,
}

impl KeyIndex {
    /// `None` when the built-in client can reach none of the endpoints
    /// (it speaks only `http`); the others are left out.
    pub fn new(endpoints: &[&str], namespace: &str, token: Option<&str>) -> Option<Self> {
        let endpoints: Vec<Url> = endpoints
            .iter()
            .filter_map(|e| Url::parse(e).ok().filter(|u| u.scheme() == "http"))
            .map(|mut endpoint| {
                if !endpoint.path().ends_with('/') {
                    endpoint.set_path(&format!("{}/", endpoint.path()));
                }
                endpoint
            })
            .collect();
        if endpoints.is_empty() {
            return None;
        }
        Some(Self {
            endpoints,
            current: AtomicUsize::new(0),
            namespace: namespace.to_owned(),
            token: token.map(str::to_owned),
            refused: AtomicBool::new(false),
        })
    }

    /// The live actor the index names for `name` and `key`; this actor
    /// first when the index lists it among others.
    pub async fn owner(&self, actor_id: &str, name: &str, key: &str) -> anyhow::Result<KeyOwner> {
        if self.refused.load(Ordering::Relaxed) {
            return Ok(KeyOwner::Unknown);
        }
        let first = self.current.load(Ordering::Relaxed);
        let mut last_error = None;
        for step in 0..self.endpoints.len() {
            let at = (first + step) % self.endpoints.len();
            match self.ask(&self.endpoints[at], actor_id, name, key).await {
                Ok(owner) => {
                    self.current.store(at, Ordering::Relaxed);
                    return Ok(owner);
                }
                // A refusal is the cluster's answer, not one node's.
                Err(error) if self.refused.load(Ordering::Relaxed) => return Err(error),
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error.unwrap_or_else(|| anyhow::anyhow!("no engine node to ask")))
    }

    async fn ask(&self, endpoint: &Url, actor_id: &str, name: &str, key: &str) -> anyhow::Result<KeyOwner> {
        let mut url = endpoint.join("actors").context("build the actors URL")?;
        url.query_pairs_mut()
            .append_pair("namespace", &self.namespace)
            .append_pair("name", name)
            .append_pair("key", key);
        let mut res = http::get(&url, self.token.as_deref(), ASK_TIMEOUT).await?;
        // Engine 3.0 sheds a read while its storage moves, saying when to
        // ask again (docs/engine.md): asked again a few times.
        for _ in 0..OVERLOAD_RETRIES {
            let Some(ms) = crate::engine::runner_config::retry_after_ms(&res.text()) else { break };
            tokio::time::sleep(std::time::Duration::from_millis(ms.clamp(10, 2_000))).await;
            res = http::get(&url, self.token.as_deref(), ASK_TIMEOUT).await?;
        }
        if matches!(res.status, 401 | 403) {
            self.refused.store(true, Ordering::Relaxed);
            bail!(
                "the engine refused this token the actor list ({}); no new actor asks again: {}",
                res.status,
                res.text().chars().take(300).collect::<String>()
            );
        }
        if !res.is_success() {
            bail!("the engine answered {}: {}", res.status, res.text().chars().take(300).collect::<String>());
        }
        let list: ActorList = res.json()?;
        let live: Vec<String> =
            list.actors.into_iter().filter(|a| a.destroy_ts.is_none()).map(|a| a.actor_id).collect();
        Ok(if live.iter().any(|id| id == actor_id) {
            KeyOwner::Actor(actor_id.to_owned())
        } else {
            live.into_iter().next().map_or(KeyOwner::Pending, KeyOwner::Actor)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::test_server::{json_response, FakeServer};

    async fn owner_for(answer: &'static str, status: u16, actor_id: &str) -> (anyhow::Result<KeyOwner>, String) {
        let server = FakeServer::start(move |_, _| json_response(status, answer)).await;
        let index = KeyIndex::new(&[server.url.as_str()], "ns", Some("tok")).expect("http endpoint");
        let owner = index.owner(actor_id, "counter", "a/b").await;
        let request = server.requests().pop().expect("one request");
        assert_eq!(request.header("authorization").as_deref(), Some("Bearer tok"));
        (owner, request.target)
    }

    #[tokio::test]
    async fn an_overload_answer_is_asked_again() {
        let server = FakeServer::start(|_, n| {
            if n == 0 {
                json_response(400, r#"{"group":"depot","code":"overloaded","message":"retry after 10 ms."}"#)
            } else {
                json_response(200, r#"{"actors":[{"actor_id":"a1","destroy_ts":null}]}"#)
            }
        })
        .await;
        let index = KeyIndex::new(&[server.url.as_str()], "ns", None).expect("http endpoint");
        let owner = index.owner("a1", "counter", "k").await.expect("answered on the second ask");
        assert_eq!(owner, KeyOwner::Actor("a1".into()));
        assert_eq!(server.requests().len(), 2);
    }

    #[tokio::test]
    async fn asks_by_namespace_name_and_key() {
        let (owner, target) = owner_for(r#"{"actors":[{"actor_id":"me","destroy_ts":null}]}"#, 200, "me").await;
        assert_eq!(owner.unwrap(), KeyOwner::Actor("me".into()));
        assert_eq!(target, "/actors?namespace=ns&name=counter&key=a%2Fb");
    }

    #[tokio::test]
    async fn another_live_actor_is_the_owner_and_destroyed_ones_do_not_count() {
        let listed = r#"{"actors":[{"actor_id":"gone","destroy_ts":5},{"actor_id":"winner"}]}"#;
        assert_eq!(owner_for(listed, 200, "me").await.0.unwrap(), KeyOwner::Actor("winner".into()));
        let only_destroyed = r#"{"actors":[{"actor_id":"gone","destroy_ts":5}]}"#;
        assert_eq!(owner_for(only_destroyed, 200, "me").await.0.unwrap(), KeyOwner::Pending);
        assert_eq!(owner_for(r#"{"actors":[]}"#, 200, "me").await.0.unwrap(), KeyOwner::Pending);
    }

    #[tokio::test]
    async fn a_refused_token_is_an_error_once_then_the_index_is_not_asked_again() {
        let server = FakeServer::start(|_, _| json_response(403, r#"{"group":"auth","code":"forbidden"}"#)).await;
        let index = KeyIndex::new(&[server.url.as_str()], "ns", None).unwrap();
        let first = index.owner("me", "counter", "k").await;
        assert!(format!("{:#}", first.unwrap_err()).contains("403"));
        assert_eq!(index.owner("me", "counter", "k").await.unwrap(), KeyOwner::Unknown);
        assert_eq!(server.requests().len(), 1);
    }

    #[tokio::test]
    async fn a_server_error_is_an_error_and_the_next_start_asks_again() {
        let server = FakeServer::start(|_, _| json_response(500, r#"{"group":"core","code":"internal_error"}"#)).await;
        let index = KeyIndex::new(&[server.url.as_str()], "ns", None).unwrap();
        assert!(index.owner("me", "counter", "k").await.is_err());
        assert!(index.owner("me", "counter", "k").await.is_err());
        assert_eq!(server.requests().len(), 2);
    }

    #[test]
    fn https_and_path_endpoints() {
        assert!(KeyIndex::new(&["https://engine.example"], "ns", None).is_none());
        let index = KeyIndex::new(&["http://host:1/api"], "ns", None).unwrap();
        assert_eq!(index.endpoints[0].join("actors").unwrap().as_str(), "http://host:1/api/actors");
        let index = KeyIndex::new(&["https://a.example", "http://b:2"], "ns", None).unwrap();
        assert_eq!(index.endpoints.len(), 1);
    }

    #[tokio::test]
    async fn a_node_that_cannot_answer_is_skipped_and_the_one_that_did_is_asked_first() {
        let server = FakeServer::start(move |_, _| json_response(200, r#"{"actors":[]}"#)).await;
        // Port 1 on loopback: nothing listens there, the connect is refused.
        let index = KeyIndex::new(&["http://127.0.0.1:1", server.url.as_str()], "ns", None).unwrap();
        assert!(matches!(index.owner("me", "counter", "k").await, Ok(KeyOwner::Pending)));
        assert!(matches!(index.owner("me", "counter", "k").await, Ok(KeyOwner::Pending)));
        assert_eq!(server.requests().len(), 2);
        assert_eq!(index.current.load(Ordering::Relaxed), 1);
    }
}
