use serde_json::json;

use super::*;
use crate::actor::{queue, Conn};

/// A context whose actor id is unique in the process (the database's VFS
/// is named after it).
fn context(name: &str) -> ActorContext {
    ActorContext::for_test(&unique(name), 1)
}

/// [`context`], for an actor type with `hooks`.
fn context_with(name: &str, hooks: std::sync::Arc<crate::actor::DynHooks>) -> ActorContext {
    ActorContext::for_test_with_hooks(&unique(name), 1, hooks)
}

fn unique(name: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("inspector-{name}-{n}")
}

fn decoded(bytes: &[u8]) -> Value {
    ciborium::from_reader(bytes).unwrap()
}

fn cbor_of(value: &Value) -> Vec<u8> {
    cbor(value)
}

#[test]
fn connection_details_carry_params_state_and_subscriptions() {
    let ctx = context("conns");
    let conn = Conn::new("c1".into(), cbor_of(&json!({ "user": "ann" })), None, None);
    conn.set_state(cbor_of(&json!({ "seen": 2 })));
    conn.subscribe("news");
    ctx.conns().insert(conn);
    ctx.conns().insert(Conn::new("c2".into(), b"not cbor \xff".to_vec(), None, None));
    let mut listed = connections(&ctx);
    listed.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(listed.len(), 2);
    assert_eq!(
        decoded(&listed[0].details),
        json!({
            "type": null, "params": { "user": "ann" }, "stateEnabled": true, "state": { "seen": 2 },
            "subscriptions": 1, "isHibernatable": false,
        })
    );
    let second = decoded(&listed[1].details);
    assert_eq!((&second["params"], &second["state"]), (&Value::Null, &Value::Null));
}

#[test]
fn the_state_is_shown_only_when_the_actor_keeps_one() {
    let ctx = context("state");
    let mut config = ActorConfig { has_state: true, ..ActorConfig::default() };
    assert_eq!(state(&ctx, &config), None, "nothing saved yet");
    ctx.set_state(vec![0xa0]);
    assert_eq!(state(&ctx, &config), Some(vec![0xa0]));
    config.has_state = false;
    assert_eq!(state(&ctx, &config), None);
}

#[tokio::test]
async fn the_queue_lists_its_first_messages_up_to_the_limit() {
    let ctx = context("queue");
    for name in ["a", "b", "c"] {
        queue::send(&ctx, name, vec![0xf6]).await.unwrap();
    }
    assert_eq!(*ctx.queue().subscribe_size().borrow(), 3, "the size is watched");
    let status = queue_status(&ctx, 2);
    assert_eq!((status.size, status.truncated), (3, true));
    let names: Vec<_> = status.messages.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    assert!(status.messages[0].id < status.messages[1].id);
    assert!(status.messages[0].created_at_ms > 0);
    assert!(!queue_status(&ctx, 10).truncated);
    assert_eq!(queue_status(&ctx, 0).messages.len(), 0);
}

#[tokio::test]
async fn a_dead_letter_is_listed_in_the_queue_under_its_new_name() {
    // docs/queues-cron.md, "Poison messages": each generation takes the
    // message and ends without a save; the receive after the last try
    // renames it in place and takes the one behind it instead.
    let mut ctx = context("dead");
    queue::send(&ctx, "jobs", vec![1]).await.unwrap();
    queue::send(&ctx, "jobs", vec![2]).await.unwrap();
    let take = queue::Receive { count: 1, timeout: Some(std::time::Duration::ZERO), ..Default::default() };
    let tries = ctx.queue().limits().max_deliveries;
    let mut taken = Vec::new();
    for generation in 2..=tries + 2 {
        let next = ActorContext::for_test_sharing(&ctx, generation);
        queue::load(&next).await.unwrap();
        taken.extend(queue::next_batch(&next, take.clone()).await.unwrap().iter().map(|m| m.id));
        ctx = next;
    }
    assert_eq!(taken.last(), Some(&2), "the last receive took the one behind it");
    // The one behind it is taken (not listed); the dead letter waits.
    let status = queue_status(&ctx, 10);
    let names: Vec<_> = status.messages.iter().map(|m| (m.name.as_str(), m.id)).collect();
    assert_eq!(names, [("$dead:jobs", 1)], "the dead letter, in its place");
}

#[tokio::test]
async fn schedules_list_events_and_jobs_soonest_first_and_delete_by_kind() {
    let ctx = context("schedules");
    let now = schedule::now_ms();
    let mut changes = ctx.schedule().subscribe_changes();
    let event = schedule::schedule_at(&ctx, now + 3_600_000, "later", vec![0x80]).await.unwrap();
    assert!(changes.has_changed().unwrap(), "a new event is a change");
    changes.borrow_and_update();
    cron::set(&ctx, "often", cron::Cadence::every(10_000).unwrap(), "tick", vec![0x80], 5).await.unwrap();
    let listed = schedules(&ctx);
    assert_eq!(listed.len(), 2);
    assert_eq!((listed[0].kind.as_str(), listed[0].id.as_str()), ("every", "often"));
    assert_eq!((listed[0].interval_ms, listed[0].max_history), (Some(10_000), Some(5)));
    assert_eq!(listed[0].name.as_deref(), Some("often"));
    assert_eq!((listed[1].kind.as_str(), listed[1].id.as_str()), ("at", event.as_str()));
    assert_eq!(listed[1].action, "later");

    assert!(schedule_history(&ctx, "often", 0).await.unwrap().is_empty());
    let err = schedule_delete(&ctx, "often", "weekly").await.unwrap_err();
    assert_eq!(RivetError::extract(&err).qualified_code(), "inspector.invalid_request");
    assert!(schedule_delete(&ctx, "often", "every").await.unwrap());
    assert!(changes.has_changed().unwrap(), "a new job and a deleted one are changes");
    assert!(schedule_delete(&ctx, &event, "at").await.unwrap());
    assert!(!schedule_delete(&ctx, &event, "at").await.unwrap());
    assert!(schedules(&ctx).is_empty());
}

/// A host whose workflow history is `[1, 2]` and whose replay returns the
/// entry id; or, `hang`ing, never answers.
struct Workflow {
    hang: bool,
}

type History = futures::future::BoxFuture<'static, anyhow::Result<Option<Vec<u8>>>>;

impl crate::actor::ActorHooks for Workflow {
    type Ctx = ActorContext;

    fn workflow_history(&self, _ctx: &ActorContext) -> Option<History> {
        let hang = self.hang;
        Some(Box::pin(async move {
            if hang {
                futures::future::pending::<()>().await;
            }
            Ok(Some(vec![1, 2]))
        }))
    }

    fn replay_workflow(&self, _ctx: &ActorContext, entry_id: Option<String>) -> Option<History> {
        Some(Box::pin(async move { Ok(entry_id.map(String::into_bytes)) }))
    }
}

#[tokio::test]
async fn the_workflow_history_and_its_replays_come_from_the_host() {
    let ctx = context_with("replay", std::sync::Arc::new(Workflow { hang: false }));
    assert_eq!(workflow_history(&ctx, Duration::from_secs(5)).await.unwrap(), (true, Some(vec![1, 2])));
    let replays = ctx.inspector().subscribe_workflow();
    let replayed = workflow_replay(&ctx, Some("e1".into()), Duration::from_secs(5)).await.unwrap();
    assert_eq!(replayed, (true, Some(b"e1".to_vec())));
    assert!(replays.has_changed().unwrap(), "a replay is pushed to the sockets");

    let hung = context_with("hung", std::sync::Arc::new(Workflow { hang: true }));
    let err = workflow_history(&hung, Duration::from_millis(20)).await.unwrap_err();
    assert_eq!(RivetError::extract(&err).qualified_code(), "inspector.workflow_timed_out");
}

#[tokio::test]
async fn without_a_workflow_hook_there_is_no_workflow() {
    let ctx = context("workflow");
    assert_eq!(workflow_history(&ctx, Duration::from_secs(1)).await.unwrap(), (false, None));
    assert_eq!(workflow_replay(&ctx, None, Duration::from_secs(1)).await.unwrap(), (false, None));
}

#[tokio::test]
async fn the_database_schema_and_rows_are_read_from_the_actors_database() {
    let ctx = context("db");
    let config = ActorConfig { has_database: true, ..ActorConfig::default() };
    let db = ctx.sqlite();
    db.exec("CREATE TABLE owners (id INTEGER PRIMARY KEY, name TEXT NOT NULL)".into()).await.unwrap();
    db.exec(
        "CREATE TABLE \"pet \"\"s\" (id INTEGER PRIMARY KEY, owner INTEGER REFERENCES owners(id), photo BLOB)".into(),
    )
    .await
    .unwrap();
    db.exec("INSERT INTO owners (name) VALUES ('ann'), ('bob'), ('cy')".into()).await.unwrap();
    db.exec("INSERT INTO \"pet \"\"s\" (owner, photo) VALUES (1, x'00ff')".into()).await.unwrap();

    let schema = decoded(&database_schema(&ctx, &config).await.unwrap());
    let tables = schema["tables"].as_array().unwrap();
    let names: Vec<_> = tables.iter().map(|t| t["table"]["name"].clone()).collect();
    // Our workflow table too, as the reference lists its `_rivet_*` tables.
    assert_eq!(names, [json!("_rivet_wf_kv"), json!("owners"), json!("pet \"s")]);
    assert_eq!(tables[1]["table"], json!({ "schema": "main", "name": "owners", "type": "table" }));
    assert_eq!(tables[1]["records"], 3);
    let columns: Vec<_> = tables[1]["columns"].as_array().unwrap().iter().map(|c| c["name"].clone()).collect();
    assert_eq!(columns, [json!("id"), json!("name")]);
    assert_eq!(tables[2]["foreignKeys"][0]["table"], "owners");

    let rows = decoded(&database_rows(&ctx, &config, "owners", 2, 1).await.unwrap());
    assert_eq!(rows, json!([{ "id": 2, "name": "bob" }, { "id": 3, "name": "cy" }]));
    let pets = decoded(&database_rows(&ctx, &config, "pet \"s", 10, 0).await.unwrap());
    assert_eq!(pets, json!([{ "id": 1, "owner": 1, "photo": [0, 255] }]));
    assert!(database_rows(&ctx, &config, "missing", 10, 0).await.is_err());
    // Read-only: a name is an identifier, never a statement.
    assert!(database_rows(&ctx, &config, "owners; DROP TABLE owners", 10, 0).await.is_err());
    assert_eq!(decoded(&database_rows(&ctx, &config, "owners", 10, 0).await.unwrap()).as_array().unwrap().len(), 3);
    ctx.close_sqlite().await;
}

#[tokio::test]
async fn an_actor_without_a_database_shows_none_and_opens_none() {
    let ctx = context("nodb");
    let config = ActorConfig::default();
    assert_eq!(decoded(&database_schema(&ctx, &config).await.unwrap()), json!({ "tables": [] }));
    assert_eq!(decoded(&database_rows(&ctx, &config, "t", 10, 0).await.unwrap()), json!([]));
    assert_eq!(ctx.sqlite().open_count(), 0);
}

#[test]
fn identifiers_are_quoted() {
    assert_eq!(quote_identifier("a\"b"), "\"a\"\"b\"");
}
