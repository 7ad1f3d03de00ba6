//! The engine's SQLite page store through the envoy (protocol v8 page
//! messages), as the page store client's transport.

use anyhow::Result;
use async_trait::async_trait;
use depot_client::vfs::SqliteTransport;
use rivet_envoy_client::handle::EnvoyHandle;
use rivet_envoy_client::protocol;

pub struct EnvoyPages(pub EnvoyHandle);

#[async_trait]
impl SqliteTransport for EnvoyPages {
    async fn get_pages(&self, request: protocol::SqliteGetPagesRequest) -> Result<protocol::SqliteGetPagesResponse> {
        self.0.sqlite_get_pages(request).await
    }

    async fn commit(&self, request: protocol::SqliteCommitRequest) -> Result<protocol::SqliteCommitResponse> {
        self.0.sqlite_commit(request).await
    }

    async fn commit_stage_begin(
        &self,
        request: protocol::SqliteCommitStageBeginRequest,
    ) -> Result<protocol::SqliteCommitStageBeginResponse> {
        self.0.sqlite_commit_stage_begin(request).await
    }

    async fn commit_stage_segment(
        &self,
        request: protocol::SqliteCommitStageSegmentRequest,
    ) -> Result<protocol::SqliteCommitStageSegmentResponse> {
        self.0.sqlite_commit_stage_segment(request).await
    }

    async fn commit_finalize(
        &self,
        request: protocol::SqliteCommitFinalizeRequest,
    ) -> Result<protocol::SqliteCommitFinalizeResponse> {
        self.0.sqlite_commit_finalize(request).await
    }
}
