//! The agent as the admin server's backend ([`AdminBackend`]): `ensure`, `gc`, `pin`,
//! `restore`, the runtime pins report and `prune --orphans`, each through the same GC manager, image manager and
//! store the loops use.
//!
//! Invariants: a pin request is checked here too (a caller in-process), so no name with
//! credentials reaches the database or the log; a dry run plans and writes nothing.

use tracing::info;

use crate::admin::{AdminBackend, EnsureImageError, EnsureRequest, GcOutcome};
use crate::gc::{GcTrigger, PinView, pin_view, pin_views, stored_images};
use crate::model::{ImagePin, PinKey, PullOrigin, RuntimeImage, UnixNanos};
use crate::pull::{PodRef, PullAuth, PullPolicy};
use crate::store::Batch;

use super::*;

impl<R: AgentRuntime> AdminBackend for Agent<R> {
    async fn ensure_image(&self, request: EnsureRequest) -> Result<String, EnsureImageError> {
        let policy = match request.pull_policy.as_str() {
            "" | "IfNotPresent" => PullPolicy::IfNotPresent,
            "Always" => PullPolicy::Always,
            "Never" => PullPolicy::Never,
            other => return Err(EnsureImageError::InvalidPullPolicy(other.to_owned())),
        };
        let pod = PodRef {
            uid: request.pod_uid,
            namespace: request.pod_namespace,
            name: request.pod_name,
            annotations: Default::default(),
            origin: PullOrigin::Pull,
        };
        let mut pull_secrets = Vec::with_capacity(request.pull_secrets.len());
        for (i, secret) in request.pull_secrets.iter().enumerate() {
            let what = format!("pull secret {}", i + 1);
            match crate::pull::credentials::parse_pull_secret(&what, secret) {
                Ok(config) => pull_secrets.push(config),
                Err(e) => return Err(EnsureImageError::InvalidPullSecret(e)),
            }
        }
        let image_ref = self
            .images
            .ensure_image_exists_with(
                &pod,
                &request.image,
                policy,
                PullAuth::Keyring(&pull_secrets),
                &request.runtime_handler,
            )
            .await
            .map_err(EnsureImageError::Pull)?;
        // A pulled image a keep names (a pinned tag that moved, a warm entry) carries its
        // runtime pin when the answer comes, not at the next detect: the kubelet's
        // DeleteUnusedImages may run before it.
        // (Undecided too: the first reconcile asks the runtime's Version and decides.)
        if !matches!(
            self.runtime_pins.state(),
            crate::gc::runtime_pins::PinsState::Off(_)
        ) {
            self.carry_keeps_now().await;
        }
        Ok(image_ref)
    }

    async fn garbage_collect(&self, dry_run: bool) -> GcOutcome {
        if dry_run {
            return self
                .with_warm_does_not_fit(GcOutcome::from_plan(
                    self.gc.plan(self.clock.now(), false).await,
                ))
                .await;
        }
        self.garbage_collect_cycle(GcTrigger::Unknown, &*self.clock)
            .await
    }

    async fn delete_unused(&self, dry_run: bool) -> GcOutcome {
        if dry_run {
            return self
                .with_warm_does_not_fit(GcOutcome::from_plan(
                    self.gc.plan(self.clock.now(), true).await,
                ))
                .await;
        }
        // An operator's prune, not an eviction manager's reclaim: trigger unknown (KEP-6053).
        let started = std::time::Instant::now();
        let report = self
            .gc
            .delete_unused_images_for(GcTrigger::Unknown, &*self.clock)
            .await;
        self.metrics.observe_gc(&report, started.elapsed());
        GcOutcome::from_report(report, false)
    }

    async fn restore(
        &self,
        options: crate::warm::RestoreOptions,
    ) -> Result<crate::warm::RestoreOutcome, String> {
        Agent::restore(self, options)
            .await
            .map_err(|e| e.to_string())
    }

    fn now(&self) -> UnixNanos {
        self.clock.now()
    }

    async fn pin(&self, key: PinKey, until: UnixNanos, reason: String) -> Result<PinView, String> {
        let now = self.clock.now();
        // The admin server checked the request; a caller in-process is checked here too, so
        // no name with credentials reaches the database or the log.
        crate::gc::check_pin_request(&key, until, &reason, now).map_err(|e| e.to_string())?;
        let pin = ImagePin {
            created_at: now,
            until,
            reason,
        };
        let mut batch = Batch::new();
        batch.put_pin(key.clone(), pin.clone());
        let store = self.gc.store().clone();
        store.apply(&batch).map_err(|e| e.to_string())?;
        info!(
            image = key.image.as_str(),
            runtime_handler = key.runtime_handler.as_str(),
            until = %if until == UnixNanos::NEVER { "never".to_owned() } else { crate::format::format_rfc3339(until) },
            "Pinned an image"
        );
        // The pin reaches the runtime now (the next cycle may be minutes away while the
        // kubelet's DeleteUnusedImages runs every 10 s under pressure), and the answer says
        // what CRI ListImages then lists.
        self.carry_keeps_now().await;
        // The runtime's list now, read once: the view names the images it lists (an image
        // pulled since the image cache's last refresh included) and the answer's first look
        // at what the runtime carries is this list. The cache (or the records) when the
        // runtime does not answer.
        let listed = match self.events_client.list_images().await {
            Ok(listed) => Some(listed),
            Err(e) => {
                tracing::warn!(error = %e, "Failed to list images for the pin's answer");
                None
            }
        };
        let cached;
        let images = match &listed {
            Some(listed) => listed.as_slice(),
            None => {
                cached = self.pin_images().map_err(|e| e.to_string())?;
                cached.as_slice()
            }
        };
        let mut view = pin_view(key, pin, images, now);
        self.runtime_pins.annotate(&mut view);
        self.answer_from_the_runtime(&mut view, listed.as_deref())
            .await;
        Ok(view)
    }

    async fn unpin(&self, key: PinKey) -> Result<bool, String> {
        let store = self.gc.store().clone();
        let existed = store.pin(&key).map_err(|e| e.to_string())?.is_some();
        let mut batch = Batch::new();
        batch.remove_pin(key.clone());
        store.apply(&batch).map_err(|e| e.to_string())?;
        if existed {
            info!(
                image = crate::pull::redact_image_name(&key.image).as_str(),
                runtime_handler = key.runtime_handler.as_str(),
                "Unpinned an image"
            );
            // The runtime's pin goes as the pin does (unless something else still keeps it).
            self.carry_keeps_now().await;
        }
        Ok(existed)
    }

    async fn prune_orphans(
        &self,
        min_age: std::time::Duration,
        namespaces: Vec<String>,
        dry_run: bool,
    ) -> Result<(String, Vec<String>), String> {
        let request = super::PruneOrphans {
            min_age,
            namespaces,
            dry_run,
        };
        let image_fs = self
            .gc
            .runtime()
            .image_fs_stats()
            .await
            .map_err(|e| format!("ImageFsInfo: {e}"))?;
        let (report, warnings) = super::prune_orphans(
            &self.config().containerd_address,
            std::path::Path::new(&image_fs.mountpoint),
            super::disk::CALL_TIMEOUT,
            &*self.clock,
            Some(self.gc.store().as_ref()),
            &request,
        )
        .await?;
        if !dry_run {
            info!(
                removed = report.removals.len(),
                freed = report.freed_bytes,
                failed = report.failed,
                "prune --orphans through the admin socket"
            );
        }
        let json = serde_json::to_string(&report).map_err(|e| e.to_string())?;
        Ok((json, warnings))
    }

    async fn inspect_disk(&self) -> Result<String, String> {
        let report = self.account_disk().await?;
        serde_json::to_string(&report).map_err(|e| e.to_string())
    }

    fn cluster_signals(&self) -> Option<crate::gc::BoundPodsSample> {
        self.gc
            .cluster_signals()
            .with_watches(self.gc.bound_pods().sample())
    }

    async fn runtime_pins(&self) -> Result<crate::admin::RuntimePinsReport, String> {
        let db = self.config().db;
        let note = self.runtime_pins.state_note();
        let keeps = match note {
            None => self.runtime_pins.carried_keeps().into_iter().collect(),
            // Off or undecided: nothing is carried, but the last detect's keeps are known.
            Some(_) => self
                .gc
                .last_keeps()
                .unwrap_or_default()
                .into_iter()
                .map(|k| {
                    let keep = crate::gc::runtime_pins::CarriedKeep {
                        why: k.why,
                        carried: false,
                        labelled: false,
                    };
                    (k.key, keep)
                })
                .collect(),
        };
        Ok(crate::admin::RuntimePinsReport {
            note: note.unwrap_or_default(),
            db: std::fs::canonicalize(&db).unwrap_or(db),
            keeps,
        })
    }

    async fn pins(&self) -> Result<Vec<PinView>, String> {
        let pins = self.gc.store().pins().map_err(|e| e.to_string())?;
        let images = self.pin_images().map_err(|e| e.to_string())?;
        let mut views = pin_views(pins, &images, self.clock.now());
        for view in &mut views {
            self.runtime_pins.annotate(view);
        }
        Ok(views)
    }
}

/// How long a pin's answer waits for CRI ListImages to list the pinned images `pinned: true`
/// after the label is written: containerd's CRI plugin applies a label change from its own
/// image event handler, a moment after the Update.
const PIN_CARRIED_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// How often that wait asks ListImages.
const PIN_CARRIED_POLL: std::time::Duration = std::time::Duration::from_millis(50);

impl<R: AgentRuntime> Agent<R> {
    /// With runtime pins on: waits (up to [`PIN_CARRIED_WAIT`]) until CRI ListImages, what the
    /// kubelet's image GC reads, lists every image the pin names `pinned: true`, and fills the
    /// view's runtime fields from that list (`runtime_pin_answer_listed`), so the answer says
    /// plainly when the runtime does not carry the pin. `listed`, when given, is the first
    /// look (a list read just before). Off or undecided: the view keeps what `annotate` said.
    async fn answer_from_the_runtime(&self, view: &mut PinView, listed: Option<&[RuntimeImage]>) {
        let state = self.runtime_pins.state();
        if state != crate::gc::runtime_pins::PinsState::On
            || !view.active
            || view.image_ids.is_empty()
        {
            return;
        }
        let answer = crate::gc::runtime_pins::runtime_pin_answer_listed;
        let deadline = tokio::time::Instant::now() + PIN_CARRIED_WAIT;
        let mut first = listed;
        loop {
            let (pinned, note) = match first.take() {
                Some(listed) => answer(&state, listed, view),
                None => match self.events_client.list_images().await {
                    Ok(listed) => answer(&state, &listed, view),
                    Err(e) => (
                        None,
                        format!("unknown: the runtime's ListImages failed: {e}"),
                    ),
                },
            };
            let done = pinned == Some(true) || tokio::time::Instant::now() >= deadline;
            view.runtime_pinned = pinned;
            view.runtime_pin_note = note;
            if done {
                return;
            }
            tokio::time::sleep(PIN_CARRIED_POLL).await;
        }
    }

    /// The images a pin is resolved against for the admin's answers: the image cache (the
    /// runtime's list), else, before the cache's first refresh, the store's records with their
    /// names.
    fn pin_images(&self) -> Result<Vec<RuntimeImage>, crate::store::StoreError> {
        let cached = self.gc.image_list();
        if cached.is_empty() {
            stored_images(self.gc.store())
        } else {
            Ok(cached)
        }
    }
}
