//! The agent's admin service (`proto/imagekeeper/v1/admin.proto`) on a unix socket: the server
//! side over an [`AdminBackend`] (the agent) and a client for the CLI. This module and `cri/`
//! are the only ones that import tonic and generated code; conversions live here.
//!
//! Invariants: the socket is created 0600 (in a directory created 0700); it serves only local
//! processes; nothing it returns carries pull credentials (the admin EnsureImage takes none).

mod client;
mod server;

use std::future::Future;
use std::path::PathBuf;

use crate::gc::{GcError, GcPlan, GcReport, Removal};
use crate::store::StoredRecord;

pub use client::AdminClient;
pub use server::serve;

#[allow(clippy::all, clippy::pedantic, missing_docs, unreachable_pub)]
mod proto {
    tonic::include_proto!("imagekeeper.v1");
}

/// An EnsureImage request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnsureRequest {
    pub image: String,
    pub pull_policy: String,
    pub pod_uid: String,
    pub pod_namespace: String,
    pub pod_name: String,
    pub runtime_handler: String,
}

/// What a GC or delete-unused call did, or with `dry_run` would do.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct GcOutcome {
    pub removed: Vec<Removal>,
    pub freed: u64,
    pub error: Option<String>,
    pub dry_run: bool,
}

impl GcOutcome {
    pub fn from_report(report: GcReport, dry_run: bool) -> GcOutcome {
        GcOutcome {
            removed: report.removed,
            freed: report.freed,
            error: report.error.map(|e| e.to_string()),
            dry_run,
        }
    }

    pub fn from_plan(plan: Result<GcPlan, GcError>) -> GcOutcome {
        match plan {
            Ok(plan) => GcOutcome {
                freed: plan.removals.iter().map(|r| r.size).sum(),
                removed: plan.removals,
                error: None,
                dry_run: true,
            },
            Err(e) => GcOutcome {
                error: Some(e.to_string()),
                dry_run: true,
                ..GcOutcome::default()
            },
        }
    }
}

/// What the admin service calls into (the agent).
pub trait AdminBackend: Send + Sync + 'static {
    /// The image ref, or "<reason>: <message>".
    fn ensure_image(
        &self,
        request: EnsureRequest,
    ) -> impl Future<Output = Result<String, String>> + Send;
    fn list_records(&self) -> impl Future<Output = Result<Vec<StoredRecord>, String>> + Send;
    /// The explanation as JSON.
    fn explain(&self) -> impl Future<Output = Result<String, String>> + Send;
    fn garbage_collect(&self, dry_run: bool) -> impl Future<Output = GcOutcome> + Send;
    fn delete_unused(&self, dry_run: bool) -> impl Future<Output = GcOutcome> + Send;
}

/// Admin socket failures.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("admin socket {path}: {source}")]
    Bind {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("admin socket {path}: {source}")]
    Connect {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("admin call {method}: {message}")]
    Call {
        method: &'static str,
        message: String,
    },
}
