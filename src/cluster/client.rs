//! The cluster signals' API client: kube-rs's stack (the cluster's address, the credentials'
//! layer, retries of 429/503/504, the configuration's headers and timeouts, rustls), built
//! here over a hyper client of our own so that two costs stay bounded:
//! - every answer's body is read through a byte cap ([`MAX_ANSWER_BYTES`]), so an API server
//!   (or something in its place) that answers endlessly costs a bounded amount of memory: past
//!   the cap the read fails, the watch meets an error, keeps its last set and starts again with
//!   kube-rs's backoff;
//! - each connection's read buffer grows to at most [`MAX_READ_BUFFER_BYTES`] (hyper's default
//!   is about 400 KiB). A list page grows the buffer of the connection it came on, and that
//!   connection, back in the pool, carries the next watch for its whole life: with hyper's
//!   default each watch held about 400 KiB it never needed again (the bench's signals figure).
//!
//! Invariants: the cap is per answer, a list page (at most 500 pods, of this node only) or a
//! watch's stream: a watch that reaches it ends and is started again from its last
//! resourceVersion, which the watcher does for any stream error; an answer that never comes
//! ends at the configuration's read timeout when it has one (kube-rs's default has none; a
//! watch ends at its own 290 s). A proxy in the configuration is refused, as kube-rs's stack
//! without its proxy features refuses it. What this stack leaves out of kube-rs's: its
//! tracing span per request and gzip (a feature the agent does not turn on).

use http_body_util::Limited;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::Client;
use kube::client::{Body, ConfigExt};
use tower::{BoxError, ServiceBuilder};

/// The most one answer of the API server may hold: a list page of 500 pods is a few MiB.
pub const MAX_ANSWER_BYTES: usize = 64 << 20;

/// The most a connection's read buffer grows to: a read of a long answer takes it in pieces
/// of this size, and an answer's head must fit in it (hyper's minimum is 8 KiB; its default
/// about 400 KiB; an API server's head is well under 1 KiB). Each of the four watches holds
/// one such buffer for its connection's life.
pub const MAX_READ_BUFFER_BYTES: usize = 16 << 10;

/// A client for `config` whose answers are cut at `max_answer_bytes`.
pub fn capped_client(config: kube::Config, max_answer_bytes: usize) -> Result<Client, String> {
    let fail = |e: kube::Error| format!("cannot build a Kubernetes client: {e}");
    if let Some(proxy) = &config.proxy_url {
        return Err(format!(
            "cannot build a Kubernetes client: the configuration names the proxy {proxy}, and \
             the agent talks to the API server directly"
        ));
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let https = config
        .rustls_https_connector_with_connector(http)
        .map_err(fail)?;
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let connections = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .http1_max_buf_size(MAX_READ_BUFFER_BYTES)
        .build::<_, Body>(connector);
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer().map_err(fail)?)
        .layer(config.extra_headers_layer().map_err(fail)?)
        .map_err(BoxError::from)
        .map_response(capped(max_answer_bytes))
        .service(connections);
    Ok(Client::new(service, config.default_namespace))
}

/// An answer whose body is read through a cap of `max_answer_bytes`.
fn capped<B>(
    max_answer_bytes: usize,
) -> impl Fn(http::Response<B>) -> http::Response<Limited<B>> + Clone {
    move |response| response.map(|body| Limited::new(body, max_answer_bytes))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> kube::Config {
        kube::Config::new("http://127.0.0.1:6443".parse().expect("a URL"))
    }

    #[tokio::test]
    async fn a_client_is_built_for_an_api_server_without_a_proxy() {
        assert!(capped_client(config(), MAX_ANSWER_BYTES).is_ok());
    }

    #[tokio::test]
    async fn a_configuration_naming_a_proxy_is_refused_with_the_reason() {
        let mut config = config();
        config.proxy_url = Some("http://127.0.0.1:3128".parse().expect("a URL"));
        let Err(error) = capped_client(config, MAX_ANSWER_BYTES) else {
            panic!("a configuration naming a proxy built a client");
        };
        assert!(error.contains("proxy http://127.0.0.1:3128"), "{error}");
    }
}
