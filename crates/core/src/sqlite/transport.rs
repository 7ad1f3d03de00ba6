//! The page store as one generation sees it.
//!
//! The engine fences every page message by the generation that sends it
//! (`expectedGeneration`, set by the page store client): once a newer
//! generation of the actor started, an older one's commits are refused
//! there. This wrapper adds the host's own fence in front of it: once the
//! generation can no longer write (it was declared lost, or it stopped),
//! its commits are refused before they leave the host, as its KV writes
//! are. Reads pass.

use std::sync::Arc;

use anyhow::Result;
use async_trait::async_trait;
use depot_client::vfs::{SqliteTransport, SqliteTransportHandle};
use rivet_envoy_client::protocol;
use tokio_util::sync::CancellationToken;

pub(crate) struct FencedPages {
    inner: SqliteTransportHandle,
    fence: CancellationToken,
}

impl FencedPages {
    pub(crate) fn handle(inner: SqliteTransportHandle, fence: CancellationToken) -> SqliteTransportHandle {
        Arc::new(Self { inner, fence })
    }

    fn check(&self) -> Result<()> {
        if self.fence.is_cancelled() {
            anyhow::bail!("this actor generation can no longer write; its SQLite commit was not sent");
        }
        Ok(())
    }
}

#[async_trait]
impl SqliteTransport for FencedPages {
    async fn get_pages(&self, request: protocol::SqliteGetPagesRequest) -> Result<protocol::SqliteGetPagesResponse> {
        self.inner.get_pages(request).await
    }

    async fn commit(&self, request: protocol::SqliteCommitRequest) -> Result<protocol::SqliteCommitResponse> {
        self.check()?;
        self.inner.commit(request).await
    }

    async fn commit_stage_begin(
        &self,
        request: protocol::SqliteCommitStageBeginRequest,
    ) -> Result<protocol::SqliteCommitStageBeginResponse> {
        self.check()?;
        self.inner.commit_stage_begin(request).await
    }

    async fn commit_stage_segment(
        &self,
        request: protocol::SqliteCommitStageSegmentRequest,
    ) -> Result<protocol::SqliteCommitStageSegmentResponse> {
        self.check()?;
        self.inner.commit_stage_segment(request).await
    }

    async fn commit_finalize(
        &self,
        request: protocol::SqliteCommitFinalizeRequest,
    ) -> Result<protocol::SqliteCommitFinalizeResponse> {
        self.check()?;
        self.inner.commit_finalize(request).await
    }
}
