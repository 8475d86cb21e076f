//! The cluster signals' API client: kube-rs's, with every answer's body read through a byte
//! cap ([`MAX_ANSWER_BYTES`]), so an API server (or something in its place) that answers
//! endlessly costs a bounded amount of memory: past the cap the read fails, the watch meets an
//! error, keeps its last set and starts again with kube-rs's backoff.
//!
//! Invariants: the cap is per answer, a list page (at most 500 pods, of this node only) or a
//! watch's stream: a watch that reaches it ends and is started again from its last
//! resourceVersion, which the watcher does for any stream error; an answer that never comes
//! ends at the configuration's read timeout (kube-rs's default, 295 s, past the watch's own
//! 290 s).

use kube::Client;

/// The most one answer of the API server may hold: a list page of 500 pods is a few MiB.
pub const MAX_ANSWER_BYTES: usize = 64 << 20;

/// A client for `config` whose answers are cut at `max_answer_bytes`.
pub fn capped_client(config: kube::Config, max_answer_bytes: usize) -> Result<Client, String> {
    Ok(kube::client::ClientBuilder::try_from(config)
        .map_err(|e| format!("cannot build a Kubernetes client: {e}"))?
        .with_layer(&tower::util::MapResponseLayer::new(
            move |response: ::http::Response<Box<kube::client::DynBody>>| {
                response.map(|body| ::http_body_util::Limited::new(body, max_answer_bytes))
            },
        ))
        .build())
}

/// What an API call's failure was, for a log line or a status: the API server's code, reason
/// and message, or that it could not be reached.
pub(super) fn api_failure(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => {
            format!("{} {}: {}", status.code, status.reason, status.message)
        }
        _ => "the API server is unreachable".to_owned(),
    }
}
