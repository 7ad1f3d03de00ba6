//! The queue's operations over the actor context: send, receive,
//! complete and reset, on the [`super::Queue`] the context holds.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::receipts::DEAD_LETTER_PREFIX;
use super::wait::{self, WaitGuard, Woken};
use super::{limits, store, Header, Queue, Receive};
use crate::actor::clock::now_ms;
use crate::actor::save::SaveOptions;
use crate::actor::ActorContext;

/// A received (or just sent) message.
#[derive(Debug, Clone)]
pub struct QueueMessage {
    pub id: u64,
    pub name: String,
    pub body: Vec<u8>,
    pub created_at: i64,
    /// The ray ID of the invocation that sent it, if it had one.
    pub ray_id: Option<String>,
    completion: Option<Completion>,
}

/// Loads the stored headers (at start, before any hook).
/// Messages the consumed list names are gone (their records are deleted
/// by the next receive); the others are queued again in their place, with
/// their tries.
pub(crate) async fn load(ctx: &ActorContext) -> anyhow::Result<()> {
    let loaded = store::load(ctx).await?;
    let last = loaded.headers.last().map_or(0, |h| h.id);
    let (consumed, queued): (Vec<Header>, Vec<Header>) =
        loaded.headers.into_iter().partition(|h| loaded.consumed.contains(&h.id));
    let redelivered = queued.iter().filter(|h| loaded.tries.contains_key(&h.id)).count();
    if redelivered > 0 {
        tracing::info!(messages = redelivered, "queue messages taken by an earlier generation are delivered again");
    }
    ctx.queue().state(|s| {
        s.next_id = loaded.next_id.max(last.saturating_add(1)).max(1);
        let tries = loaded.tries.into_iter().filter(|(id, _)| queued.iter().any(|h| h.id == *id)).collect();
        s.receipts.set_tries(tries);
        s.receipts.set_unswept(consumed.iter().map(|h| h.id).collect());
        s.index = queued.into_iter().map(|h| (h.id, h)).collect();
    });
    Ok(())
}

/// A receive begins (or a workflow flush): every message taken before it
/// and not waiting for `complete` counts as handled, and a save is asked
/// for to consume it. Synchronous, so that the napi layer calls it on the
/// JavaScript thread, in order with the state changes made before it.
pub fn mark_handled(ctx: &ActorContext) {
    if ctx.queue().state(|s| s.receipts.handle_all()) > 0 {
        ctx.request_save(SaveOptions::default());
    }
}

/// `queue.send(name, body)`: stored, then visible to receivers.
pub async fn send(ctx: &ActorContext, name: &str, body: Vec<u8>) -> anyhow::Result<QueueMessage> {
    send_from(ctx, name, body, None).await
}

/// [`send`] by an invocation with the ray ID `ray_id`, stored with the
/// message so that its receiver can carry it on.
pub async fn send_from(
    ctx: &ActorContext,
    name: &str,
    body: Vec<u8>,
    ray_id: Option<String>,
) -> anyhow::Result<QueueMessage> {
    enqueue(ctx, name, body, ray_id, None).await
}

/// `queue.enqueueAndWait`: sends, then waits for the consumer's
/// `complete(response)`. Not ended by the actor stopping (the caller's work
/// is tracked and bounded where it runs), only by `timeout` and `signal`.
pub async fn enqueue_and_wait(
    ctx: &ActorContext,
    name: &str,
    body: Vec<u8>,
    timeout: Option<Duration>,
    signal: Option<&CancellationToken>,
) -> anyhow::Result<Option<Vec<u8>>> {
    enqueue_and_wait_from(ctx, name, body, None, timeout, signal).await
}

/// [`enqueue_and_wait`] by an invocation with the ray ID `ray_id`.
pub async fn enqueue_and_wait_from(
    ctx: &ActorContext,
    name: &str,
    body: Vec<u8>,
    ray_id: Option<String>,
    timeout: Option<Duration>,
    signal: Option<&CancellationToken>,
) -> anyhow::Result<Option<Vec<u8>>> {
    let (tx, rx) = oneshot::channel();
    let message = enqueue(ctx, name, body, ray_id, Some(tx)).await?;
    // The waiter goes when the wait ends, also when the caller drops it.
    let _waiting = Waiting { queue: ctx.queue(), id: message.id };
    wait_for_completion(rx, timeout, signal).await
}

/// Removes an `enqueueAndWait` waiter when its wait ends.
struct Waiting<'a> {
    queue: &'a Queue,
    id: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.queue.completions(|c| c.remove(&self.id));
    }
}

async fn wait_for_completion(
    rx: oneshot::Receiver<Option<Vec<u8>>>,
    timeout: Option<Duration>,
    signal: Option<&CancellationToken>,
) -> anyhow::Result<Option<Vec<u8>>> {
    if signal.is_some_and(CancellationToken::is_cancelled) {
        return Err(wait::aborted());
    }
    let signalled = async {
        match signal {
            Some(signal) => signal.cancelled().await,
            None => std::future::pending().await,
        }
    };
    let timer = async {
        match timeout {
            Some(timeout) => tokio::time::sleep(timeout).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        answer = rx => answer.map_err(|_| limits::completion_waiter_dropped().into_anyhow()),
        _ = signalled => Err(wait::aborted()),
        _ = timer => Err(limits::timed_out(timeout.map_or(0, duration_ms)).into_anyhow()),
    }
}

async fn enqueue(
    ctx: &ActorContext,
    name: &str,
    body: Vec<u8>,
    ray_id: Option<String>,
    waiter: Option<oneshot::Sender<Option<Vec<u8>>>>,
) -> anyhow::Result<QueueMessage> {
    let queue = ctx.queue();
    // The ray ID does not count: the limit is the contract's.
    let size = store::header_len(name, None) + body.len();
    if size > queue.limits.max_message_size {
        return Err(limits::message_too_large(size, queue.limits.max_message_size).into_anyhow());
    }
    let _sending = queue.sending.lock().await;
    ctx.check_writable()?;
    let id = queue.state(|s| {
        if s.index.len() >= queue.limits.max_size {
            return Err(limits::full(queue.limits.max_size).into_anyhow());
        }
        Ok(s.next_id.max(1))
    })?;
    let header = Header { id, name: name.to_string(), created_at: now_ms(), ray_id };
    store::put(ctx, &header, &body, id.saturating_add(1)).await?;
    if let Some(waiter) = waiter {
        queue.completions(|c| c.insert(id, waiter));
    }
    queue.state(|s| {
        s.next_id = id.saturating_add(1);
        s.index.insert(id, header.clone());
    });
    queue.arrived.notify_waiters();
    Ok(QueueMessage {
        id,
        name: header.name,
        body,
        created_at: header.created_at,
        ray_id: header.ray_id,
        completion: None,
    })
}

/// `queue.nextBatch`: up to `count` messages, waiting for a first one up to
/// `timeout`; an empty batch when it passes.
pub async fn next_batch(ctx: &ActorContext, receive: Receive) -> anyhow::Result<Vec<QueueMessage>> {
    let names = receive.names.as_ref();
    match receive_waiting(ctx, &receive, || take(ctx, names, receive.count, receive.completable)).await? {
        Some(messages) => Ok(messages),
        None => Ok(Vec::new()),
    }
}

/// `queue.waitForNames`: the first message with one of `names`; a timeout
/// is `queue.timed_out`.
pub async fn wait_for_names(ctx: &ActorContext, receive: Receive) -> anyhow::Result<QueueMessage> {
    let names = receive.names.as_ref();
    let found = receive_waiting(ctx, &receive, || take(ctx, names, 1, receive.completable)).await?;
    match found.and_then(|mut m| m.pop()) {
        Some(message) => Ok(message),
        None => Err(limits::timed_out(receive.timeout.map_or(0, duration_ms)).into_anyhow()),
    }
}

/// `queue.waitForNamesAvailable`: resolves once a message with one of
/// `names` is queued, taking nothing; a timeout is `queue.timed_out`.
pub async fn wait_for_names_available(ctx: &ActorContext, receive: Receive) -> anyhow::Result<()> {
    let names = receive.names.as_ref();
    let found = receive_waiting(ctx, &receive, || {
        let any = ctx.queue().state(|s| s.index.values().any(|h| matches(names, h)));
        async move { Ok(if any { vec![()] } else { Vec::new() }) }
    })
    .await?;
    match found {
        Some(_) => Ok(()),
        None => Err(limits::timed_out(receive.timeout.map_or(0, duration_ms)).into_anyhow()),
    }
}

/// `queue.tryNextBatch`: what is queued now, without waiting.
pub async fn try_next_batch(
    ctx: &ActorContext,
    names: Option<BTreeSet<String>>,
    count: usize,
    completable: bool,
) -> anyhow::Result<Vec<QueueMessage>> {
    take(ctx, names.as_ref(), count, completable).await
}

/// Looks with `look` until it finds something, waiting for arrivals in
/// between; `None` once the timeout passed. A timeout of zero looks once.
async fn receive_waiting<T, F, Fut>(
    ctx: &ActorContext,
    receive: &Receive,
    mut look: F,
) -> anyhow::Result<Option<Vec<T>>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Vec<T>>>,
{
    let queue = ctx.queue();
    let deadline = receive.timeout.map(|t| tokio::time::Instant::now() + t);
    loop {
        let arrived = queue.arrived.notified();
        tokio::pin!(arrived);
        arrived.as_mut().enable();
        let found = look().await?;
        if !found.is_empty() {
            return Ok(Some(found));
        }
        let remaining = wait::remaining(deadline);
        if remaining.is_some_and(|r| r.is_zero()) {
            return Ok(None);
        }
        let _blocked = WaitGuard::new(&queue.waits);
        match wait::wait(arrived, remaining, ctx.abort_token(), receive.signal.as_ref()).await {
            Woken::Arrived => continue,
            Woken::TimedOut => return Ok(None),
            Woken::Aborted => return Err(wait::aborted()),
        }
    }
}

/// Whether a receive for `names` takes `header`: a dead letter only when
/// named.
fn matches(names: Option<&BTreeSet<String>>, header: &Header) -> bool {
    match names {
        None => !header.name.starts_with(DEAD_LETTER_PREFIX),
        Some(names) => names.contains(&header.name),
    }
}

/// Takes up to `count` matching messages, in order. Nothing is deleted:
/// each message's try is stored first (a generation it kills is counted),
/// then it is handed out, taken by this generation until a save consumes
/// it (docs/queues-cron.md). A message that already had its tries is
/// renamed a dead letter instead, and the ones behind it are taken. A
/// message whose body is missing from storage is dropped with a warning.
async fn take(
    ctx: &ActorContext,
    names: Option<&BTreeSet<String>>,
    count: usize,
    completable: bool,
) -> anyhow::Result<Vec<QueueMessage>> {
    let queue = ctx.queue();
    let _receiving = queue.receiving.lock().await;
    mark_handled(ctx);
    let max_deliveries = queue.limits.max_deliveries;
    loop {
        let (selected, dead) = queue.state(|s| {
            let mut selected = Vec::new();
            let mut dead = Vec::new();
            for h in s.index.values().filter(|h| matches(names, h)) {
                if selected.len() >= count.max(1) {
                    break;
                }
                let fresh = !h.name.starts_with(DEAD_LETTER_PREFIX) && !s.receipts.counted(h.id);
                if fresh && s.receipts.tries(h.id) >= max_deliveries {
                    dead.push(Header { name: format!("{DEAD_LETTER_PREFIX}{}", h.name), ..h.clone() });
                } else {
                    selected.push((h.clone(), fresh.then(|| s.receipts.tries(h.id))));
                }
            }
            (selected, dead)
        });
        if selected.is_empty() && dead.is_empty() {
            return Ok(Vec::new());
        }
        ctx.check_writable()?;
        let mut marks: Vec<_> = dead.iter().map(store::header_entry).collect();
        marks.extend(selected.iter().filter_map(|(h, tries)| tries.map(|t| store::tries_entry(h.id, t + 1))));
        let ids: Vec<u64> = selected.iter().map(|(h, _)| h.id).collect();
        let sweep = queue.state(|s| s.receipts.unswept(crate::actor::kv_limits::ENGINE_MAX_KEYS / 3));
        // The marks, the bodies and the sweep of consumed records go out
        // together: one round trip.
        let (marked, bodies, swept) = tokio::join!(
            store::put_marks(ctx, marks),
            async {
                if ids.is_empty() {
                    Ok(Vec::new())
                } else {
                    store::bodies(ctx, &ids).await
                }
            },
            async {
                if sweep.is_empty() {
                    Ok(())
                } else {
                    store::delete(ctx, &sweep).await
                }
            },
        );
        marked?;
        let bodies = bodies?;
        match swept {
            Ok(()) => queue.state(|s| s.receipts.swept(&sweep)),
            Err(err) => {
                tracing::debug!(error = %format!("{err:#}"), "deleting consumed queue messages failed; tried again later")
            }
        }
        for header in &dead {
            tracing::warn!(
                id = header.id,
                name = %header.name,
                tries = max_deliveries,
                "a queue message ended its generation too often; it is a dead letter now"
            );
        }
        queue.state(|s| dead.iter().for_each(|h| drop(s.index.insert(h.id, h.clone()))));
        let mut messages = Vec::with_capacity(selected.len());
        let mut gone = Vec::new();
        for ((header, _), body) in selected.into_iter().zip(bodies) {
            match body {
                Some(body) => {
                    queue.state(|s| {
                        if !completable {
                            s.index.remove(&header.id);
                        }
                        s.receipts.take(header.clone(), completable);
                    });
                    let completion = completable.then(|| Completion::new(ctx.clone(), header.id));
                    messages.push(QueueMessage {
                        id: header.id,
                        name: header.name,
                        body,
                        created_at: header.created_at,
                        ray_id: header.ray_id,
                        completion,
                    });
                }
                // Completed meanwhile (completion does not wait for receives).
                None if !queue.state(|s| s.index.contains_key(&header.id)) => {}
                None => {
                    tracing::warn!(id = header.id, name = %header.name, "dropping a queue message whose body is missing");
                    gone.push(header.id);
                }
            }
        }
        if !gone.is_empty() {
            store::delete(ctx, &gone).await?;
            queue.state(|s| gone.iter().for_each(|id| drop(s.index.remove(id))));
        }
        if !messages.is_empty() || dead.is_empty() {
            return Ok(messages);
        }
    }
}

/// Completes message `id`: it counts as handled, is consumed by the next
/// save, and its `enqueueAndWait` caller is answered once that save is
/// acknowledged. `queued`: the message's header when it was not taken in
/// this generation.
fn complete_by_id(ctx: &ActorContext, id: u64, response: Option<Vec<u8>>) -> anyhow::Result<bool> {
    ctx.check_writable()?;
    let queue = ctx.queue();
    let completed = queue.state(|s| {
        let queued = if s.receipts.holds(id) { None } else { s.index.get(&id).cloned() };
        let done = s.receipts.complete(id, queued, response).is_ok();
        if done {
            s.index.remove(&id);
        }
        done
    });
    if completed {
        ctx.request_save(SaveOptions { immediate: true, max_wait: None });
    }
    Ok(completed)
}

/// `queue.completePersisted(id, name, response)`: completes the queued
/// message `id` if it is still queued under `name`; whether it was.
/// Synchronous, like [`mark_handled`]: the handling is recorded where the
/// JavaScript thread calls it.
pub fn complete_persisted(
    ctx: &ActorContext,
    id: u64,
    expected_name: &str,
    response: Option<Vec<u8>>,
) -> anyhow::Result<bool> {
    let queued = ctx.queue().state(|s| s.index.get(&id).is_some_and(|h| h.name == expected_name));
    if !queued {
        return Ok(false);
    }
    complete_by_id(ctx, id, response)
}

/// `queue.reset()`: every message removed; waiting senders are answered
/// with `queue.completion_waiter_dropped`.
pub async fn reset(ctx: &ActorContext) -> anyhow::Result<()> {
    let queue = ctx.queue();
    let _sending = queue.sending.lock().await;
    let _receiving = queue.receiving.lock().await;
    store::delete_all(ctx).await?;
    queue.state(|s| {
        s.index.clear();
        s.receipts.clear();
    });
    queue.completions(|c| c.clear());
    Ok(())
}

impl QueueMessage {
    pub fn is_completable(&self) -> bool {
        self.completion.is_some()
    }

    /// `message.complete(response)`: the message counts as handled; the
    /// next save consumes it and then its sender is answered. Twice is
    /// `queue.already_completed`; a message received without `completable`
    /// is `queue.complete_not_configured`. Synchronous (see
    /// [`mark_handled`]).
    pub fn complete(&self, response: Option<Vec<u8>>) -> anyhow::Result<()> {
        let Some(completion) = &self.completion else {
            return Err(limits::complete_not_configured(&self.name).into_anyhow());
        };
        completion.complete(response)
    }
}

/// The right to complete one received message, once.
#[derive(Clone)]
struct Completion(Arc<CompletionInner>);

struct CompletionInner {
    ctx: ActorContext,
    id: u64,
    done: AtomicBool,
}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completion").field("id", &self.0.id).field("done", &self.0.done).finish()
    }
}

impl Completion {
    fn new(ctx: ActorContext, id: u64) -> Self {
        Self(Arc::new(CompletionInner { ctx, id, done: AtomicBool::new(false) }))
    }

    fn complete(&self, response: Option<Vec<u8>>) -> anyhow::Result<()> {
        if self.0.done.swap(true, Ordering::AcqRel) {
            return Err(limits::already_completed().into_anyhow());
        }
        match complete_by_id(&self.0.ctx, self.0.id, response) {
            Ok(true) => Ok(()),
            // Completed by id meanwhile, or reset.
            Ok(false) => Err(limits::already_completed().into_anyhow()),
            Err(err) => {
                self.0.done.store(false, Ordering::Release);
                Err(err)
            }
        }
    }
}

fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
