//! The best published online cache orders, as reference policies beside the clairvoyant one
//! (issue 55 item 4), so `simulate`'s figures stand against them and not only against the
//! kubelet's: SIEVE (Zhang et al., "SIEVE is Simpler than LRU", NSDI 2024) and S3-FIFO (Yang et
//! al., "FIFO queues are all you need for cache eviction", SOSP 2023). Like the clairvoyant
//! reference they are run by the driver, not by the GC manager: they see each image land (a
//! miss, its insertion), each run of a listed image (a hit) and, when space is needed, choose
//! what goes, in their own order, until the bytes asked for are freed.
//!
//! What a node adds to the papers' caches, and how (the rules the tests hold):
//! - objects have sizes: an eviction pass removes until the bytes it is asked for are freed;
//! - some objects cannot go (an image in use, one younger than MinAge): the pass steps over
//!   them as if they had been hit once (SIEVE: the hand moves on; S3-FIFO: back to their queue's
//!   head), and gives up after two full rounds that removed nothing;
//! - a pass that removes nothing changes nothing (its state is put back), so a GC cycle that
//!   finds nothing to remove is the same whether or not it runs (the driver skips such cycles);
//! - S3-FIFO's small queue holds at most a tenth of the cached bytes (the paper's 10 % of the
//!   cache size, counted in bytes); its ghost queue remembers as many evicted names as the main
//!   queue holds images; frequencies count to 3.
//!
//! Invariants: an order holds exactly the names landed and not yet evicted or removed; it never
//! names an image `removable` refused.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

/// An online order's state over the images listed on the node.
#[derive(Clone, Debug)]
pub(super) enum OnlineOrder {
    Sieve(Sieve),
    S3Fifo(S3Fifo),
}

impl OnlineOrder {
    /// `name` (of `size` bytes) landed: a miss, inserted.
    pub(super) fn landed(&mut self, name: &str, size: u64) {
        match self {
            OnlineOrder::Sieve(s) => s.landed(name, size),
            OnlineOrder::S3Fifo(s) => s.landed(name, size),
        }
    }

    /// A run found `name` listed: a hit.
    pub(super) fn hit(&mut self, name: &str) {
        match self {
            OnlineOrder::Sieve(s) => s.hit(name),
            OnlineOrder::S3Fifo(s) => s.hit(name),
        }
    }

    /// The names to remove, in order, until at least `amount` bytes are freed or nothing more
    /// may go; each is forgotten. A pass that frees nothing leaves the state as it was.
    pub(super) fn evict(&mut self, amount: u64, removable: impl Fn(&str) -> bool) -> Vec<String> {
        let before = self.clone();
        let out = match self {
            OnlineOrder::Sieve(s) => s.evict(amount, &removable),
            OnlineOrder::S3Fifo(s) => s.evict(amount, &removable),
        };
        if out.is_empty() {
            *self = before;
        }
        out
    }
}

/// One cached image: its name, size and SIEVE's visited bit or S3-FIFO's frequency.
#[derive(Clone, Debug)]
struct Cached {
    name: String,
    size: u64,
    /// SIEVE: visited since the hand last passed; S3-FIFO: hits, at most 3.
    marks: u8,
}

/// SIEVE: one FIFO queue (insertion at the head), a visited bit per object and a hand that
/// moves from the tail towards the head, clearing visited bits, and evicts the first object
/// not visited; the hand stays where it stopped.
#[derive(Clone, Debug, Default)]
pub(super) struct Sieve {
    /// By insertion sequence: the tail is the smallest.
    queue: BTreeMap<u64, Cached>,
    seq_of: HashMap<String, u64>,
    next: u64,
    /// Where the hand points (a sequence at or after it, wrapping to the tail).
    hand: Option<u64>,
}

impl Sieve {
    fn landed(&mut self, name: &str, size: u64) {
        if let Some(seq) = self.seq_of.remove(name) {
            self.queue.remove(&seq);
        }
        self.next += 1;
        self.seq_of.insert(name.to_owned(), self.next);
        self.queue.insert(
            self.next,
            Cached {
                name: name.to_owned(),
                size,
                marks: 0,
            },
        );
    }

    fn hit(&mut self, name: &str) {
        if let Some(cached) = self.seq_of.get(name).and_then(|s| self.queue.get_mut(s)) {
            cached.marks = 1;
        }
    }

    /// The entry at or after `from`, wrapping to the tail.
    fn at_or_after(&self, from: Option<u64>) -> Option<u64> {
        from.and_then(|f| self.queue.range(f..).next().map(|(s, _)| *s))
            .or_else(|| self.queue.keys().next().copied())
    }

    fn evict(&mut self, amount: u64, removable: &dyn Fn(&str) -> bool) -> Vec<String> {
        let mut out = Vec::new();
        let mut freed = 0u64;
        let mut idle = 0usize;
        while freed < amount && idle <= 2 * self.queue.len() {
            let Some(at) = self.at_or_after(self.hand) else {
                break;
            };
            let after = self.queue.range(at + 1..).next().map(|(s, _)| *s);
            let cached = self
                .queue
                .get_mut(&at)
                .expect("the hand points at an entry");
            if cached.marks > 0 {
                cached.marks = 0;
                idle += 1;
            } else if removable(&cached.name) {
                let cached = self.queue.remove(&at).expect("the entry was just read");
                self.seq_of.remove(&cached.name);
                freed = freed.saturating_add(cached.size);
                out.push(cached.name);
                idle = 0;
            } else {
                idle += 1;
            }
            self.hand = after;
        }
        out
    }
}

/// S3-FIFO: a small FIFO queue for new objects, a main one for those hit again, and a ghost
/// queue of names recently evicted from the small one (a ghost that lands again goes to main).
#[derive(Clone, Debug, Default)]
pub(super) struct S3Fifo {
    small: BTreeMap<u64, Cached>,
    main: BTreeMap<u64, Cached>,
    /// Each cached name's queue (true: main) and sequence.
    place: HashMap<String, (bool, u64)>,
    small_bytes: u64,
    main_bytes: u64,
    ghost: VecDeque<String>,
    ghosts: HashSet<String>,
    next: u64,
}

/// S3-FIFO's frequency cap.
const MAX_FREQ: u8 = 3;

impl S3Fifo {
    fn landed(&mut self, name: &str, size: u64) {
        self.forget(name);
        let to_main = self.ghosts.remove(name);
        if to_main {
            self.ghost.retain(|g| g != name);
        }
        self.push(
            to_main,
            Cached {
                name: name.to_owned(),
                size,
                marks: 0,
            },
        );
    }

    fn hit(&mut self, name: &str) {
        if let Some(&(main, seq)) = self.place.get(name) {
            let queue = if main {
                &mut self.main
            } else {
                &mut self.small
            };
            if let Some(cached) = queue.get_mut(&seq) {
                cached.marks = (cached.marks + 1).min(MAX_FREQ);
            }
        }
    }

    /// Inserts at the head of main (`true`) or small.
    fn push(&mut self, main: bool, cached: Cached) {
        self.next += 1;
        self.place.insert(cached.name.clone(), (main, self.next));
        if main {
            self.main_bytes = self.main_bytes.saturating_add(cached.size);
            self.main.insert(self.next, cached);
        } else {
            self.small_bytes = self.small_bytes.saturating_add(cached.size);
            self.small.insert(self.next, cached);
        }
    }

    /// Takes the tail of main (`true`) or small out of its queue.
    fn pop_tail(&mut self, main: bool) -> Option<Cached> {
        let queue = if main {
            &mut self.main
        } else {
            &mut self.small
        };
        let (_, cached) = queue.pop_first()?;
        self.place.remove(&cached.name);
        if main {
            self.main_bytes = self.main_bytes.saturating_sub(cached.size);
        } else {
            self.small_bytes = self.small_bytes.saturating_sub(cached.size);
        }
        Some(cached)
    }

    /// Removes `name` wherever it is (a removal the order did not choose).
    fn forget(&mut self, name: &str) {
        if let Some((main, seq)) = self.place.remove(name) {
            let queue = if main {
                &mut self.main
            } else {
                &mut self.small
            };
            if let Some(cached) = queue.remove(&seq) {
                if main {
                    self.main_bytes = self.main_bytes.saturating_sub(cached.size);
                } else {
                    self.small_bytes = self.small_bytes.saturating_sub(cached.size);
                }
            }
        }
    }

    fn remember_ghost(&mut self, name: String) {
        if self.ghosts.insert(name.clone()) {
            self.ghost.push_back(name);
        }
        while self.ghost.len() > self.main.len().max(1) {
            if let Some(old) = self.ghost.pop_front() {
                self.ghosts.remove(&old);
            }
        }
    }

    fn evict(&mut self, amount: u64, removable: &dyn Fn(&str) -> bool) -> Vec<String> {
        let mut out = Vec::new();
        let mut freed = 0u64;
        let mut idle = 0usize;
        // Images of the small queue put back in a row (none may go): past its length, main's
        // tail is tried instead.
        let mut small_stuck = 0usize;
        // Main's frequencies fall by one a round: after MAX_FREQ + 1 rounds of both queues with
        // nothing removed, nothing removable is left.
        while freed < amount
            && idle <= (usize::from(MAX_FREQ) + 2) * (self.small.len() + self.main.len())
        {
            let total = self.small_bytes.saturating_add(self.main_bytes);
            let from_small = !self.small.is_empty()
                && (self.main.is_empty()
                    || (self.small_bytes.saturating_mul(10) >= total
                        && small_stuck < self.small.len()));
            let Some(cached) = self.pop_tail(!from_small) else {
                break;
            };
            if from_small {
                if cached.marks > 1 {
                    self.push(true, Cached { marks: 0, ..cached });
                    small_stuck = 0;
                    idle += 1;
                } else if removable(&cached.name) {
                    freed = freed.saturating_add(cached.size);
                    out.push(cached.name.clone());
                    self.remember_ghost(cached.name);
                    small_stuck = 0;
                    idle = 0;
                } else {
                    self.push(false, cached);
                    small_stuck += 1;
                    idle += 1;
                }
            } else if cached.marks > 0 {
                let marks = cached.marks - 1;
                self.push(true, Cached { marks, ..cached });
                idle += 1;
            } else if removable(&cached.name) {
                freed = freed.saturating_add(cached.size);
                out.push(cached.name);
                small_stuck = 0;
                idle = 0;
            } else {
                self.push(true, cached);
                idle += 1;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
