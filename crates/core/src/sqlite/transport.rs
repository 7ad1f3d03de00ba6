//! The page store as one generation sees it.
//!
//! The engine fences every page message by the generation that sends it
//! (`expectedGeneration`, set by the page store client): once a newer
//! generation of the actor started, an older one's commits are refused
//! there. This wrapper adds the host's own fence in front of it: once the
//! generation can no longer write (it was declared lost, or it stopped),
//! its commits are refused before they leave the host, as its KV writes
//! are. Reads pass.
//!
//! It also carries the head fence of a database that has no pages yet
//! (docs/sqlite.md, "The head of an empty database"): engine 2.3 answers
//! such a database with head 0, engine 3.0 with the head its file already
//! has, which can be above 0. The page store client we pin takes an
//! absent first page to mean head 0 and fences its next message with 0,
//! which engine 3.0 refuses. So the head the engine named with the absent
//! first page is remembered, and a message fenced with head 0 is sent with
//! that head instead. On engine 2.3 nothing is remembered.
//!
//! And a message engine 3.0 refused for overload is sent again after the
//! delay it asked for ([`super::overload`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::Result;
use async_trait::async_trait;
use depot_client::vfs::{SqliteTransport, SqliteTransportHandle};
use rivet_envoy_client::protocol;
use tokio_util::sync::CancellationToken;

use super::overload::resend;

pub(crate) struct FencedPages {
    inner: SqliteTransportHandle,
    fence: CancellationToken,
    /// The head the engine named with an absent first page; 0 while none
    /// was named (or it was 0, which needs nothing done).
    empty_head: AtomicU64,
}

impl FencedPages {
    pub(crate) fn handle(inner: SqliteTransportHandle, fence: CancellationToken) -> SqliteTransportHandle {
        Arc::new(Self { inner, fence, empty_head: AtomicU64::new(0) })
    }

    /// Remembers the head of an empty database from a page answer.
    fn observe(&self, response: &protocol::SqliteGetPagesResponse) {
        let protocol::SqliteGetPagesResponse::SqliteGetPagesOk(ok) = response else { return };
        let first_absent = ok.pages.iter().any(|page| page.pgno == 1 && page.bytes.is_none());
        if let (true, Some(head)) = (first_absent, ok.head_txid) {
            self.empty_head.store(head, Ordering::Relaxed);
        }
    }

    /// The head fence to send for the one the client set.
    fn head(&self, expected: Option<u64>) -> Option<u64> {
        match (expected, self.empty_head.load(Ordering::Relaxed)) {
            (Some(0), head) if head > 0 => Some(head),
            _ => expected,
        }
    }

    /// Whether this generation may still write.
    fn may_write(&self) -> bool {
        !self.fence.is_cancelled()
    }

    fn check(&self) -> Result<()> {
        if !self.may_write() {
            anyhow::bail!("this actor generation can no longer write; its SQLite commit was not sent");
        }
        Ok(())
    }
}

#[async_trait]
impl SqliteTransport for FencedPages {
    async fn get_pages(
        &self,
        mut request: protocol::SqliteGetPagesRequest,
    ) -> Result<protocol::SqliteGetPagesResponse> {
        request.expected_head_txid = self.head(request.expected_head_txid);
        let response = resend("get_pages", || self.inner.get_pages(request.clone()), || true).await?;
        self.observe(&response);
        Ok(response)
    }

    async fn commit(&self, mut request: protocol::SqliteCommitRequest) -> Result<protocol::SqliteCommitResponse> {
        self.check()?;
        request.expected_head_txid = self.head(request.expected_head_txid);
        resend("commit", || self.inner.commit(request.clone()), || self.may_write()).await
    }

    async fn commit_stage_begin(
        &self,
        mut request: protocol::SqliteCommitStageBeginRequest,
    ) -> Result<protocol::SqliteCommitStageBeginResponse> {
        self.check()?;
        request.expected_head_txid = self.head(request.expected_head_txid);
        resend("commit_stage_begin", || self.inner.commit_stage_begin(request.clone()), || self.may_write()).await
    }

    async fn commit_stage_segment(
        &self,
        request: protocol::SqliteCommitStageSegmentRequest,
    ) -> Result<protocol::SqliteCommitStageSegmentResponse> {
        self.check()?;
        resend("commit_stage_segment", || self.inner.commit_stage_segment(request.clone()), || self.may_write()).await
    }

    async fn commit_finalize(
        &self,
        request: protocol::SqliteCommitFinalizeRequest,
    ) -> Result<protocol::SqliteCommitFinalizeResponse> {
        self.check()?;
        resend("commit_finalize", || self.inner.commit_finalize(request.clone()), || self.may_write()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlite::memory::MemoryPages;

    fn commit(head: Option<u64>) -> protocol::SqliteCommitRequest {
        protocol::SqliteCommitRequest {
            actor_id: "a".into(),
            dirty_pages: vec![protocol::SqliteDirtyPage { pgno: 1, bytes: vec![0; 4096] }],
            db_size_pages: 1,
            now_ms: 0,
            expected_generation: Some(0),
            expected_head_txid: head,
        }
    }

    fn read() -> protocol::SqliteGetPagesRequest {
        protocol::SqliteGetPagesRequest {
            actor_id: "a".into(),
            pgnos: vec![1],
            expected_generation: Some(0),
            expected_head_txid: None,
        }
    }

    fn committed(response: protocol::SqliteCommitResponse) -> bool {
        matches!(response, protocol::SqliteCommitResponse::SqliteCommitOk(_))
    }

    /// Engine 3.0: the first page is absent and the head is 7; the page
    /// store client then fences its first commit with 0, which goes out
    /// with 7.
    #[tokio::test]
    async fn a_commit_fenced_with_head_0_carries_the_head_of_the_empty_database() {
        let store = MemoryPages::new();
        store.start_empty_at("a", 7);
        let pages = FencedPages::handle(store.clone(), CancellationToken::new());
        pages.get_pages(read()).await.unwrap();
        assert!(committed(pages.commit(commit(Some(0))).await.unwrap()));
        // Later fences are the client's own: the head it was told.
        assert!(committed(pages.commit(commit(Some(8))).await.unwrap()));
        assert!(!committed(pages.commit(commit(Some(0))).await.unwrap()), "a stale head 0 is still refused");
    }

    /// Engine 2.3: an empty database has head 0; nothing changes.
    #[tokio::test]
    async fn at_head_0_fences_pass_unchanged() {
        let store = MemoryPages::new();
        let pages = FencedPages::handle(store.clone(), CancellationToken::new());
        pages.get_pages(read()).await.unwrap();
        assert!(committed(pages.commit(commit(Some(0))).await.unwrap()));
        assert!(!committed(pages.commit(commit(Some(0))).await.unwrap()), "head 0 is stale after a commit");
    }

    /// Engine 3.0 refuses messages for overload while its storage is
    /// behind; they are sent again and the commit lands once.
    #[tokio::test]
    async fn a_message_refused_for_overload_is_sent_again() {
        let store = MemoryPages::new();
        let pages = FencedPages::handle(store.clone(), CancellationToken::new());
        store.overload_next(3);
        assert!(committed(pages.commit(commit(Some(0))).await.unwrap()));
        assert_eq!(store.commits.load(std::sync::atomic::Ordering::SeqCst), 1);
        store.overload_next(2);
        let read = pages.get_pages(read()).await.unwrap();
        assert!(matches!(read, protocol::SqliteGetPagesResponse::SqliteGetPagesOk(_)));
    }

    /// The budget ends the resends: the client gets the refusal as it came.
    #[tokio::test(start_paused = true)]
    async fn refusals_past_the_budget_reach_the_client() {
        let store = MemoryPages::new();
        let pages = FencedPages::handle(store.clone(), CancellationToken::new());
        store.overload_next(usize::MAX);
        let started = tokio::time::Instant::now();
        let answer = pages.commit(commit(Some(0))).await.unwrap();
        assert!(!committed(answer));
        assert!(started.elapsed() <= crate::sqlite::overload::BUDGET);
        assert_eq!(store.commits.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    /// A generation that can no longer write stops sending at once.
    #[tokio::test]
    async fn a_fenced_generation_stops_sending() {
        let store = MemoryPages::new();
        let fence = CancellationToken::new();
        let pages = FencedPages::handle(store.clone(), fence.clone());
        store.overload_next(usize::MAX);
        fence.cancel();
        assert!(pages.commit(commit(Some(0))).await.is_err(), "not even sent");
    }
}
