//! Metrics in the Prometheus text format, served over plain HTTP on the address the operator
//! asks for (off by default): image_garbage_collected_total, image_gc_duration_seconds,
//! image_pull_duration_seconds, image_records, store_healthy, store_reopens_total,
//! store_commit_duration_seconds.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tracing::warn;

use crate::cri::ImageRuntime;
use crate::gc::ImageGcManager;
use crate::pull::metrics::Histogram;
use crate::pull::{BackoffStore, ImageManager, PullRuntime};
use crate::store::Store;

/// kubelet's buckets for GC durations (prometheus.DefBuckets).
const GC_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Metrics the agent itself keeps.
#[derive(Debug)]
pub struct AgentMetrics {
    gc_durations: Mutex<Histogram>,
    /// Configuration reloads: [successes, failures].
    config_reloads: [std::sync::atomic::AtomicU64; 2],
}

impl Default for AgentMetrics {
    fn default() -> AgentMetrics {
        AgentMetrics {
            gc_durations: Mutex::new(Histogram::new(GC_BUCKETS)),
            config_reloads: Default::default(),
        }
    }
}

impl AgentMetrics {
    pub fn observe_gc(&self, took: Duration) {
        match self.gc_durations.lock() {
            Ok(mut h) => h.observe(took.as_secs_f64()),
            Err(p) => p.into_inner().observe(took.as_secs_f64()),
        }
    }

    pub fn record_reload(&self, success: bool) {
        self.config_reloads[usize::from(!success)]
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Renders every metric.
    pub fn render<R: ImageRuntime, P: PullRuntime, S: BackoffStore>(
        &self,
        gc: &ImageGcManager<R>,
        images: &ImageManager<P, S>,
        store: &Store,
    ) -> String {
        let mut out = String::new();
        out.push_str("# HELP image_garbage_collected_total Images removed by GC, by reason.\n");
        out.push_str("# TYPE image_garbage_collected_total counter\n");
        for (reason, n) in gc.metrics().collected() {
            let _ = writeln!(
                out,
                "image_garbage_collected_total{{reason=\"{reason}\"}} {n}"
            );
        }
        out.push_str("# HELP gc_victims_rescued_total Images GC chose but kept at its last look before removing them, by why.\n");
        out.push_str("# TYPE gc_victims_rescued_total counter\n");
        for (why, n) in gc.metrics().rescued() {
            let _ = writeln!(out, "gc_victims_rescued_total{{why=\"{why}\"}} {n}");
        }
        let progress = gc.metrics().progress();
        let _ = writeln!(
            out,
            "# HELP image_gc_progress_running Whether a GC cycle is running now.\n# TYPE image_gc_progress_running gauge\nimage_gc_progress_running {}",
            u8::from(progress.running)
        );
        let _ = writeln!(
            out,
            "# HELP image_gc_progress_removed Images removed by the running (else the last) GC cycle.\n# TYPE image_gc_progress_removed gauge\nimage_gc_progress_removed {}",
            progress.removed
        );
        let _ = writeln!(
            out,
            "# HELP image_gc_progress_freed_bytes Bytes freed by the running (else the last) GC cycle.\n# TYPE image_gc_progress_freed_bytes gauge\nimage_gc_progress_freed_bytes {}",
            progress.freed_bytes
        );
        out.push_str(
            "# HELP image_gc_remove_failures_total RemoveImage calls of GC that failed.\n",
        );
        out.push_str("# TYPE image_gc_remove_failures_total counter\n");
        let _ = writeln!(
            out,
            "image_gc_remove_failures_total {}",
            gc.metrics().remove_failures()
        );
        out.push_str("# HELP gc_future_stamps_clamped_total Image records whose first_detected or last_used lay in the future (beyond the tolerance) and that detect clamped to its time.\n");
        out.push_str("# TYPE gc_future_stamps_clamped_total counter\n");
        let _ = writeln!(
            out,
            "gc_future_stamps_clamped_total {}",
            gc.metrics().future_stamps_clamped()
        );
        out.push_str("# HELP gc_clock_went_back_total Detects that found the stored last_detect later than their own time (beyond the tolerance): the clock went back.\n");
        out.push_str("# TYPE gc_clock_went_back_total counter\n");
        let _ = writeln!(
            out,
            "gc_clock_went_back_total {}",
            gc.metrics().clock_went_back()
        );
        let gc_hist = match self.gc_durations.lock() {
            Ok(h) => h.clone(),
            Err(p) => p.into_inner().clone(),
        };
        histogram(
            &mut out,
            "image_gc_duration_seconds",
            "Duration of image GC cycles.",
            "",
            &gc_hist,
        );
        out.push_str(
            "# HELP image_pull_duration_seconds Duration of image pulls, by image size bucket.\n",
        );
        out.push_str("# TYPE image_pull_duration_seconds histogram\n");
        for (bucket, h) in images.metrics().snapshot() {
            histogram_body(
                &mut out,
                "image_pull_duration_seconds",
                &format!("image_size_in_bytes=\"{bucket}\""),
                &h,
            );
        }
        out.push_str("# HELP ensure_image_requests_total EnsureImageExists requests by pull policy, presence and whether a pull was required.\n");
        out.push_str("# TYPE ensure_image_requests_total counter\n");
        for ((policy, present, required), n) in images.metrics().ensure_requests() {
            let _ = writeln!(
                out,
                "ensure_image_requests_total{{pull_policy=\"{policy}\",present_locally=\"{present}\",pull_required=\"{required}\"}} {n}"
            );
        }
        // Before `image_records`, whose read of the store reopens it after an I/O failure: the
        // gauge is the state as the scrape found it.
        out.push_str("# HELP store_healthy Whether the record store is usable (1), or failed an I/O operation (a full disk) and has not reopened yet (0).\n");
        out.push_str("# TYPE store_healthy gauge\n");
        let _ = writeln!(out, "store_healthy {}", u8::from(store.is_healthy()));
        out.push_str("# HELP store_reopens_total Times the record store reopened its file after an I/O failure.\n");
        out.push_str("# TYPE store_reopens_total counter\n");
        let _ = writeln!(out, "store_reopens_total {}", store.reopens());
        out.push_str(
            "# HELP image_records Image records in the store.\n# TYPE image_records gauge\n",
        );
        match store.len() {
            Ok(n) => {
                let _ = writeln!(out, "image_records {n}");
            }
            Err(e) => warn!(error = %e, "metrics: cannot count records"),
        }
        out.push_str("# HELP store_commit_duration_seconds Durable commits of the record store.\n");
        out.push_str("# TYPE store_commit_duration_seconds summary\n");
        let _ = writeln!(
            out,
            "store_commit_duration_seconds_sum {}\nstore_commit_duration_seconds_count {}",
            store.commit_nanos_total() as f64 / 1e9,
            store.commits()
        );
        out.push_str("# HELP config_reloads_total Configuration reloads (SIGHUP), by result.\n# TYPE config_reloads_total counter\n");
        for (result, n) in ["success", "failure"].iter().zip(&self.config_reloads) {
            let n = n.load(std::sync::atomic::Ordering::Relaxed);
            let _ = writeln!(out, "config_reloads_total{{result=\"{result}\"}} {n}");
        }
        out
    }
}

fn histogram(out: &mut String, name: &str, help: &str, labels: &str, h: &Histogram) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    histogram_body(out, name, labels, h);
}

fn histogram_body(out: &mut String, name: &str, labels: &str, h: &Histogram) {
    let sep = if labels.is_empty() { "" } else { "," };
    for (bound, count) in h.cumulative() {
        let le = if bound.is_infinite() {
            "+Inf".to_owned()
        } else {
            bound.to_string()
        };
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {count}");
    }
    let braces = if labels.is_empty() {
        String::new()
    } else {
        format!("{{{labels}}}")
    };
    let _ = writeln!(
        out,
        "{name}_sum{braces} {}\n{name}_count{braces} {}",
        h.sum(),
        h.count()
    );
}

/// Serves `GET /metrics` on `listener` until the task is dropped. `render` makes the body.
pub async fn serve_metrics(listener: TcpListener, render: Arc<dyn Fn() -> String + Send + Sync>) {
    loop {
        let Ok((mut conn, _)) = listener.accept().await else {
            continue;
        };
        let render = render.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 8192];
            let mut len = 0;
            // Read the request head (bounded), with a deadline.
            let read = tokio::time::timeout(Duration::from_secs(5), async {
                while len < buf.len() {
                    let n = conn.read(&mut buf[len..]).await?;
                    if n == 0 {
                        break;
                    }
                    len += n;
                    if buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                Ok::<_, std::io::Error>(())
            })
            .await;
            if !matches!(read, Ok(Ok(()))) {
                return;
            }
            let head = String::from_utf8_lossy(&buf[..len]);
            let ok = head.starts_with("GET /metrics ") || head.starts_with("GET / ");
            let (status, body) = if ok {
                ("200 OK", render())
            } else {
                ("404 Not Found", "not found: try GET /metrics\n".to_owned())
            };
            let response = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.write_all(response.as_bytes()).await;
        });
    }
}
