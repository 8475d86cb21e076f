//! What happens at one instant of a simulation, on [`Sim`]: a workload's run starts (its
//! pull, the runs waiting for it, its container), the GC runs (the periodic GarbageCollect,
//! DeleteUnusedImages to make room for a pull, or the clairvoyant reference's removals), and a
//! restart. The driver in `mod.rs` orders these (events first, then the GC, then the
//! workload's lines) and owns the clock; these steps only act at the `now` they are given. A
//! starting container's marks wait in `Sim::pending` and are applied (`Sim::flush`) before a
//! GC or a restart reads the store.

use super::*;

impl<'a> Sim<'a> {
    pub(super) async fn start_run(
        &mut self,
        now: UnixNanos,
        image: &str,
        size: u64,
        for_s: f64,
    ) -> Result<(), SimulateError> {
        self.quiet = false;
        self.outcome.runs += 1;
        if let Some(feed) = &mut self.signals {
            // Its run starts: a pod bound ahead of it needs it no more (its container keeps it).
            feed.run_starts(image);
        }
        if let Some((_, passed)) = self.future.get_mut(image) {
            *passed += 1;
        }
        if self.listed(image) {
            if let Gc::Reference {
                online: Some(online),
                ..
            } = &mut self.gc
            {
                online.hit(image);
            }
            return self.start_container(now, image, for_s);
        }
        if let Some(pulling) = self.pulling.get_mut(image) {
            pulling.waiting.push(for_s);
            self.outcome.pull_wait_s += pulling.lands.since(now).as_secs_f64();
            return Ok(());
        }
        // The size an image had when first pulled stays its size (a later run giving another
        // size means a new version: a workload names it by another tag).
        let size = *self.sizes.entry(image.to_owned()).or_insert(size);
        let capacity = self.workload.node.capacity;
        if self.used().saturating_add(size) > capacity {
            self.make_room(now, self.used().saturating_add(size) - capacity)
                .await?;
            if self.used().saturating_add(size) > capacity {
                self.outcome.failed_runs += 1;
                return Ok(());
            }
        }
        let nanos = (u128::from(size) * 1_000_000_000
            / u128::from(self.workload.node.pull_bytes_per_s))
        .min(i64::MAX as u128 / 4) as i64;
        let lands = UnixNanos(now.0.saturating_add(nanos));
        self.pulling.insert(
            image.to_owned(),
            Pulling {
                size,
                lands,
                waiting: vec![for_s],
            },
        );
        self.schedule(
            lands,
            Event::PullDone {
                image: image.to_owned(),
            },
        );
        self.outcome.pulls += 1;
        self.outcome.pulled_bytes += size;
        if self.pulled_once.insert(image.to_owned()) {
            self.outcome.first_pulls += 1;
            self.outcome.first_pulled_bytes += size;
        } else {
            self.outcome.repulls += 1;
            self.outcome.repulled_bytes += size;
        }
        self.outcome.pull_wait_s += lands.since(now).as_secs_f64();
        self.outcome.peak_used_bytes = self.outcome.peak_used_bytes.max(self.used());
        self.sync_fs();
        Ok(())
    }

    pub(super) fn start_container(
        &mut self,
        now: UnixNanos,
        image: &str,
        for_s: f64,
    ) -> Result<(), SimulateError> {
        self.seq += 1;
        let id = format!("c{}", self.seq);
        self.runtime.state().containers.push(RuntimeContainer {
            id: id.clone(),
            pod_sandbox_id: format!("p{}", self.seq),
            image: image.to_owned(),
            image_id: self.id(image),
            state: ContainerState::Running,
            runtime_handler: String::new(),
        });
        if let Gc::Manager { .. } = &self.gc
            && self.policy != SimPolicy::Kubelet
        {
            // The container event's mark and use interval
            // (`ImageGcManager::mark_container_used`).
            let size = self.sizes.get(image).copied();
            let key = RuntimeImage {
                id: self.id(image),
                ..RuntimeImage::default()
            }
            .record_key();
            // (Applied with the next read: `Sim::flush`.)
            self.pending.mark_used(key.clone(), now, size);
            self.pending.open_use(key, now);
        }
        let end = UnixNanos(
            now.0
                .saturating_add(crate::workload::seconds(for_s).as_nanos() as i64),
        );
        self.schedule(end, Event::ContainerEnd { id });
        Ok(())
    }

    pub(super) fn count(&mut self, report: &GcReport) {
        self.outcome.evictions += report.removed.len() as u64;
    }

    pub(super) async fn periodic_gc(&mut self, now: UnixNanos) -> Result<(), SimulateError> {
        self.step(now)?;
        self.flush()?;
        self.sync_fs();
        self.stats.gc_cycles += 1;
        self.last_cycle = now;
        let evictions = self.outcome.evictions;
        match &self.gc {
            Gc::Manager { manager, .. } => {
                let report = manager.garbage_collect(now).await;
                // A cycle that could not free enough (InsufficientSpace) still counts its
                // removals; anything else is the simulation's failure.
                if let Some(e) = &report.error
                    && !matches!(e, GcError::InsufficientSpace { .. })
                {
                    return Err(report.error.expect("matched just above").into());
                }
                self.count(&report);
            }
            Gc::Reference { .. } => {
                let capacity = self.workload.node.capacity;
                let available = capacity - self.used().min(capacity);
                let need = SpaceNeed::compute(capacity, available, &self.workload.node.policy)?;
                if let Some(amount) = need.amount_to_free.filter(|a| *a > 0) {
                    self.reference_free(now, amount as u64);
                }
            }
        }
        // A cycle that removed nothing, even one that could not free enough, had nothing it
        // could remove: the next cycles find the same until `settled_until`'s bound.
        self.quiet = self.outcome.evictions == evictions;
        self.sync_fs();
        Ok(())
    }

    /// A pull that does not fit: DeleteUnusedImages (the clairvoyant reference frees only the
    /// `need`ed bytes, farthest next use first).
    pub(super) async fn make_room(
        &mut self,
        now: UnixNanos,
        need: u64,
    ) -> Result<(), SimulateError> {
        self.quiet = false;
        self.flush()?;
        self.sync_fs();
        match &self.gc {
            Gc::Manager { manager, .. } => {
                let report = manager.delete_unused_images(now).await;
                if let Some(e) = report.error {
                    return Err(e.into());
                }
                self.count(&report);
            }
            Gc::Reference { .. } => self.reference_free(now, need),
        }
        self.sync_fs();
        Ok(())
    }

    /// A reference's walk over the listed images no container uses, first listed at least
    /// MinAge ago, until `amount` bytes are freed: an online order's own (`online_orders.rs`),
    /// or the clairvoyant one: never used again first, then farthest next use first; ties
    /// larger first, then by name.
    pub(super) fn reference_free(&mut self, now: UnixNanos, amount: u64) {
        let Gc::Reference { landed, online } = &mut self.gc else {
            return;
        };
        let min_age = self.workload.node.policy.min_age;
        let mut state = self.runtime.state();
        if let Some(online) = online {
            // By name, as the order holds them (a container's image is its run's name): no id
            // is computed at each step of the order's walk.
            let in_use: BTreeSet<&str> =
                state.containers.iter().map(|c| c.image.as_str()).collect();
            let removable = |name: &str| {
                !in_use.contains(name)
                    && now.since(landed.get(name).copied().unwrap_or(now)) >= min_age
            };
            let out = online.evict(amount, removable);
            drop(in_use);
            for name in out {
                let id = image_id(&name);
                state.images.retain(|i| i.id != id);
                landed.remove(&name);
                self.outcome.evictions += 1;
            }
            return;
        }
        let in_use: BTreeSet<ImageId> = state
            .containers
            .iter()
            .map(|c| c.image_id.clone())
            .collect();
        let mut candidates: Vec<(std::cmp::Reverse<i64>, std::cmp::Reverse<u64>, String)> = state
            .images
            .iter()
            .filter(|i| !in_use.contains(&i.id))
            .filter_map(|i| {
                let name = i.repo_tags.first()?.clone();
                let landed_at = landed.get(&name).copied().unwrap_or(now);
                if now.since(landed_at) < min_age {
                    return None;
                }
                let next = self
                    .future
                    .get(&name)
                    .and_then(|(times, passed)| times.get(*passed))
                    .map_or(i64::MAX, |t| t.0);
                Some((std::cmp::Reverse(next), std::cmp::Reverse(i.size), name))
            })
            .collect();
        candidates.sort();
        let mut freed = 0u64;
        for (_, std::cmp::Reverse(size), name) in candidates {
            if freed >= amount {
                break;
            }
            let id = image_id(&name);
            state.images.retain(|i| i.id != id);
            landed.remove(&name);
            freed += size;
            self.outcome.evictions += 1;
        }
    }

    /// The agent restarts: the kubelet's history is lost (a new store), imagekeeper's kept
    /// (the same file opened again); either way a detect runs at once.
    pub(super) async fn restart(&mut self, now: UnixNanos) -> Result<(), SimulateError> {
        self.quiet = false;
        self.flush()?;
        self.sync_fs();
        let kubelet = self.policy == SimPolicy::Kubelet;
        let placeholder = Gc::Reference {
            landed: BTreeMap::new(),
            online: None,
        };
        match std::mem::replace(&mut self.gc, placeholder) {
            reference @ Gc::Reference { .. } => self.gc = reference,
            Gc::Manager { manager, restarts } => {
                let restarts = restarts + 1;
                let store = if kubelet {
                    // The kubelet keeps its image records in memory only: every listed image
                    // is detected anew with no last use. Its MaxAge waits for uptime above
                    // MaxAge ("Wait until the MaxAge has passed since the Kubelet has
                    // started", freeOldImages in pkg/kubelet/images/image_gc_manager.go);
                    // with a new store an image's unused time counts from its first
                    // detection at the earliest, which is at or after the restart.
                    Arc::new(scratch_store(self.policy, restarts, now)?)
                } else {
                    // The same database, under a new manager (whose memory starts empty).
                    manager.store().clone()
                };
                drop(manager);
                let mut manager =
                    ImageGcManager::new(self.runtime.clone(), store, self.config.clone())?;
                if let Some(feed) = &self.signals {
                    // The cluster's knowledge outlives the agent (its watches list it again).
                    manager = feed.fed(manager);
                }
                manager.detect(now).await?;
                self.gc = Gc::Manager {
                    manager: Box::new(manager),
                    restarts,
                };
            }
        }
        Ok(())
    }
}
