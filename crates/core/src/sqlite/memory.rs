//! An in-memory page store with the engine's two fences (generation and
//! head), for the core's unit tests: real SQLite runs on it through the page
//! store client, so open, commit, close and reopen are exercised without an
//! engine.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Result;
use async_trait::async_trait;
use depot_client::vfs::SqliteTransport;
use rivet_envoy_client::protocol;

#[derive(Default)]
struct Store {
    pages: BTreeMap<u32, Vec<u8>>,
    head: u64,
    /// The newest generation that reached the store: older ones are fenced.
    generation: u64,
    staged: BTreeMap<u32, Vec<u8>>,
}

/// Every actor's pages, by actor id.
#[derive(Default)]
pub struct MemoryPages {
    stores: Mutex<HashMap<String, Store>>,
    pub commits: AtomicUsize,
    pub refused: AtomicUsize,
    /// How many of the next messages are refused for overload, as engine
    /// 3.0 refuses them when its storage is behind.
    overloads: AtomicUsize,
}

fn error(group: &str, code: &str, message: &str) -> protocol::SqliteErrorResponse {
    protocol::SqliteErrorResponse { group: group.into(), code: code.into(), message: message.into() }
}

impl MemoryPages {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Engine 3.0's empty database: no pages yet, but its file already has
    /// head `head` (docs/sqlite.md, "The head of an empty database").
    pub fn start_empty_at(&self, actor_id: &str, head: u64) {
        let mut stores = self.stores.lock().unwrap();
        stores.entry(actor_id.to_string()).or_default().head = head;
    }

    /// Refuses the next `n` messages with `depot.overloaded`, asking for
    /// a wait of `retry_after_ms=1` (docs/sqlite.md, "Storage that is behind").
    pub fn overload_next(&self, n: usize) {
        self.overloads.store(n, Ordering::SeqCst);
    }

    fn overloaded(&self) -> Option<protocol::SqliteErrorResponse> {
        self.overloads
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .ok()
            .map(|_| error("depot", "overloaded", "volume write refused before dispatch (retry_after_ms=1)"))
    }

    /// What the engine does when a newer generation starts.
    pub fn advance_generation(&self, actor_id: &str, generation: u64) {
        let mut stores = self.stores.lock().unwrap();
        let store = stores.entry(actor_id.to_string()).or_default();
        store.generation = store.generation.max(generation);
    }

    /// The committed pages of an actor (empty if none).
    pub fn page_count(&self, actor_id: &str) -> usize {
        self.stores.lock().unwrap().get(actor_id).map_or(0, |s| s.pages.len())
    }

    fn with_store<T>(
        &self,
        actor_id: &str,
        generation: Option<u64>,
        f: impl FnOnce(&mut Store) -> Result<T, protocol::SqliteErrorResponse>,
    ) -> Result<T, protocol::SqliteErrorResponse> {
        if let Some(refusal) = self.overloaded() {
            return Err(refusal);
        }
        let mut stores = self.stores.lock().unwrap();
        let store = stores.entry(actor_id.to_string()).or_default();
        if let Some(generation) = generation {
            if generation < store.generation {
                self.refused.fetch_add(1, Ordering::SeqCst);
                return Err(error("actor", "generation_mismatch", "generation is stale"));
            }
            store.generation = generation;
        }
        f(store)
    }

    fn check_head(store: &Store, expected: Option<u64>) -> Result<(), protocol::SqliteErrorResponse> {
        match expected {
            Some(head) if head != store.head => Err(error(
                depot_client::types::HEAD_FENCE_MISMATCH_GROUP,
                depot_client::types::HEAD_FENCE_MISMATCH_CODE,
                "head moved",
            )),
            _ => Ok(()),
        }
    }

    fn apply(store: &mut Store, pages: impl IntoIterator<Item = (u32, Vec<u8>)>, db_size_pages: u32) -> u64 {
        store.pages.extend(pages);
        store.pages.retain(|pgno, _| *pgno <= db_size_pages);
        store.head += 1;
        store.head
    }
}

#[async_trait]
impl SqliteTransport for MemoryPages {
    async fn get_pages(&self, request: protocol::SqliteGetPagesRequest) -> Result<protocol::SqliteGetPagesResponse> {
        let result = self.with_store(&request.actor_id, request.expected_generation, |store| {
            Ok(protocol::SqliteGetPagesOk {
                pages: request
                    .pgnos
                    .iter()
                    .map(|pgno| protocol::SqliteFetchedPage { pgno: *pgno, bytes: store.pages.get(pgno).cloned() })
                    .collect(),
                head_txid: Some(store.head),
            })
        });
        Ok(match result {
            Ok(ok) => protocol::SqliteGetPagesResponse::SqliteGetPagesOk(ok),
            Err(e) => protocol::SqliteGetPagesResponse::SqliteErrorResponse(e),
        })
    }

    async fn commit(&self, request: protocol::SqliteCommitRequest) -> Result<protocol::SqliteCommitResponse> {
        let result = self.with_store(&request.actor_id, request.expected_generation, |store| {
            Self::check_head(store, request.expected_head_txid)?;
            let pages = request.dirty_pages.into_iter().map(|p| (p.pgno, p.bytes));
            Ok(Self::apply(store, pages, request.db_size_pages))
        });
        Ok(match result {
            Ok(head) => {
                self.commits.fetch_add(1, Ordering::SeqCst);
                protocol::SqliteCommitResponse::SqliteCommitOk(protocol::SqliteCommitOk { head_txid: Some(head) })
            }
            Err(e) => protocol::SqliteCommitResponse::SqliteErrorResponse(e),
        })
    }

    async fn commit_stage_begin(
        &self,
        request: protocol::SqliteCommitStageBeginRequest,
    ) -> Result<protocol::SqliteCommitStageBeginResponse> {
        let result = self.with_store(&request.actor_id, request.expected_generation, |store| {
            Self::check_head(store, request.expected_head_txid)?;
            store.staged.clear();
            Ok(store.head + 1)
        });
        Ok(match result {
            Ok(txid) => {
                protocol::SqliteCommitStageBeginResponse::SqliteCommitStageBeginOk(protocol::SqliteCommitStageBeginOk {
                    txid,
                })
            }
            Err(e) => protocol::SqliteCommitStageBeginResponse::SqliteErrorResponse(e),
        })
    }

    async fn commit_stage_segment(
        &self,
        request: protocol::SqliteCommitStageSegmentRequest,
    ) -> Result<protocol::SqliteCommitStageSegmentResponse> {
        let result = self.with_store(&request.actor_id, request.expected_generation, |store| {
            let bytes: u64 = request.dirty_pages.iter().map(|p| p.bytes.len() as u64).sum();
            store.staged.extend(request.dirty_pages.into_iter().map(|p| (p.pgno, p.bytes)));
            Ok(bytes)
        });
        Ok(match result {
            Ok(staged_bytes) => protocol::SqliteCommitStageSegmentResponse::SqliteCommitStageSegmentOk(
                protocol::SqliteCommitStageSegmentOk { staged_bytes },
            ),
            Err(e) => protocol::SqliteCommitStageSegmentResponse::SqliteErrorResponse(e),
        })
    }

    async fn commit_finalize(
        &self,
        request: protocol::SqliteCommitFinalizeRequest,
    ) -> Result<protocol::SqliteCommitFinalizeResponse> {
        let result = self.with_store(&request.actor_id, request.expected_generation, |store| {
            Self::check_head(store, Some(request.txid - 1))?;
            let staged = std::mem::take(&mut store.staged);
            Ok(Self::apply(store, staged, request.new_db_size_pages))
        });
        Ok(match result {
            Ok(head) => {
                self.commits.fetch_add(1, Ordering::SeqCst);
                protocol::SqliteCommitFinalizeResponse::SqliteCommitFinalizeOk(protocol::SqliteCommitFinalizeOk {
                    head_txid: Some(head),
                })
            }
            Err(e) => protocol::SqliteCommitFinalizeResponse::SqliteErrorResponse(e),
        })
    }
}
