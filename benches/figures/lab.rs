//! `e2e_gc_lab`: DeleteUnusedImages of the lab's images against the real containerd, with the
//! time split between RemoveImage, the other CRI calls and imagekeeper itself.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use imagekeeper::clock::{Clock, SystemClock};
use imagekeeper::cri::{CriClient, CriConfig, CriError, ImageRuntime};
use imagekeeper::gc::images_in_use;
use imagekeeper::gc::{GcConfig, GcPolicy, ImageGcManager};
use imagekeeper::store::Store;

use crate::report::Figures;
use imagekeeper::forward_image_runtime;
use imagekeeper::runtime::forward::Forward;

/// A runtime that times the calls it passes on.
struct Timed<R> {
    inner: R,
    remove_nanos: AtomicU64,
    other_nanos: AtomicU64,
    removes: AtomicU64,
}

impl<R> Timed<R> {
    fn new(inner: R) -> Timed<R> {
        Timed {
            inner,
            remove_nanos: AtomicU64::new(0),
            other_nanos: AtomicU64::new(0),
            removes: AtomicU64::new(0),
        }
    }

    async fn time<T>(counter: &AtomicU64, call: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let out = call.await;
        counter.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        out
    }
}

/// Every call timed: RemoveImage (counted too) into `remove_nanos`, the others into
/// `other_nanos`.
impl<R: ImageRuntime> Forward for Timed<R> {
    type Inner = R;

    fn inner(&self) -> &R {
        &self.inner
    }

    async fn around<T, Fut>(
        &self,
        method: &'static str,
        _arg: &str,
        call: impl FnOnce() -> Fut + Send,
    ) -> Result<T, CriError>
    where
        T: Send,
        Fut: Future<Output = Result<T, CriError>> + Send,
    {
        if method == "RemoveImage" {
            self.removes.fetch_add(1, Ordering::Relaxed);
            Self::time(&self.remove_nanos, call()).await
        } else {
            Self::time(&self.other_nanos, call()).await
        }
    }
}

forward_image_runtime!(impl[R: ImageRuntime] for Timed<R>);

/// One GC round's times in ms: total, in RemoveImage, in other CRI calls; and images removed.
struct Round {
    total_ms: f64,
    remove_ms: f64,
    other_cri_ms: f64,
    removed: usize,
}

/// Pulls every lab image, then DeleteUnusedImages through the real containerd with a fresh
/// store, three times; reports the round with the median total.
pub fn e2e_gc_lab(env_file: &Path, work: &Path, figures: &mut Figures) {
    let env: BTreeMap<String, String> = fs::read_to_string(env_file)
        .expect("read lab.env")
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let endpoint = env.get("CRI_ENDPOINT").expect("lab.env has CRI_ENDPOINT");
    let tsv = env
        .get("CRI_LAB_IMAGES_TSV")
        .expect("lab.env has CRI_LAB_IMAGES_TSV");
    let references: Vec<String> = fs::read_to_string(tsv)
        .expect("read images.tsv")
        .lines()
        .filter_map(|l| l.split('\t').next())
        .filter(|r| !r.is_empty())
        .map(str::to_owned)
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio");
    let mut rounds: Vec<Round> = Vec::new();
    for round in 0..3 {
        let result = rt.block_on(async {
            let client = CriClient::connect(CriConfig {
                runtime_endpoint: endpoint.clone(),
                ..CriConfig::default()
            })
            .await
            .expect("connect");
            let containers = client.list_containers().await.expect("list containers");
            for reference in &references {
                client
                    .pull_image(reference, "", None)
                    .await
                    .unwrap_or_else(|e| panic!("pull {reference}: {e}"));
            }
            let listed = client.list_images().await.expect("list images");
            let in_use = images_in_use(&listed, &containers, &[], None);
            let expected = listed
                .iter()
                .filter(|i| !in_use.contains(&i.record_key()) && !i.pinned)
                .count();
            let db = work.join(format!("e2e-{round}.redb"));
            let now = SystemClock.now();
            let store = Arc::new(Store::open(&db, now).expect("store"));
            let config = GcConfig {
                policy: GcPolicy {
                    min_age: Duration::ZERO,
                    ..GcPolicy::default()
                },
                ..GcConfig::default()
            };
            let manager = ImageGcManager::new(Timed::new(client), store, config).expect("manager");
            let started = Instant::now();
            let report = manager.delete_unused_images(now).await;
            let total = started.elapsed();
            assert!(report.error.is_none(), "GC failed: {:?}", report.error);
            assert_eq!(report.removed.len(), expected, "removed every unused image");
            let timed = manager.runtime();
            assert_eq!(timed.removes.load(Ordering::Relaxed), expected as u64);
            Round {
                total_ms: total.as_secs_f64() * 1e3,
                remove_ms: timed.remove_nanos.load(Ordering::Relaxed) as f64 / 1e6,
                other_cri_ms: timed.other_nanos.load(Ordering::Relaxed) as f64 / 1e6,
                removed: report.removed.len(),
            }
        });
        println!(
            "e2e round {round}: {} images, total {:.1} ms, RemoveImage {:.1} ms, other CRI {:.1} ms",
            result.removed, result.total_ms, result.remove_ms, result.other_cri_ms
        );
        rounds.push(result);
    }
    rounds.sort_by(|a, b| a.total_ms.total_cmp(&b.total_ms));
    let r = &rounds[rounds.len() / 2];
    let inside = r.total_ms - r.remove_ms - r.other_cri_ms;
    figures.add("e2e_gc_lab_images", r.removed as f64, "images");
    figures.add("e2e_gc_lab_total_ms", r.total_ms, "ms");
    figures.add("e2e_gc_lab_remove_image_ms", r.remove_ms, "ms");
    figures.add("e2e_gc_lab_other_cri_ms", r.other_cri_ms, "ms");
    figures.add("e2e_gc_lab_imagekeeper_ms", inside, "ms");
    figures.add(
        "e2e_gc_lab_imagekeeper_share",
        100.0 * inside / r.total_ms,
        "%",
    );
}
