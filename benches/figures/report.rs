//! The figures of one run: each printed as `name: value unit`, with its target and verdict
//! (`ok` / `MISSED`) beside it when it has one; written to `target/bench/figures.txt`,
//! `targets.txt` and `summary.json`. And the statistics the figures are made of.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

struct Figure {
    name: String,
    value: f64,
    unit: &'static str,
    /// (">=" or "<=", bound)
    target: Option<(&'static str, f64)>,
    note: Option<String>,
}

impl Figure {
    fn met(&self) -> Option<bool> {
        self.target.map(|(op, bound)| {
            if op == ">=" {
                self.value >= bound
            } else {
                self.value <= bound
            }
        })
    }

    /// `name: value unit`, and `  (target OP BOUND: ok|MISSED)` when it has a target.
    fn line(&self) -> String {
        if let Some(note) = &self.note {
            return format!("{}: {note}", self.name);
        }
        let mut line = format!("{}: {} {}", self.name, show(self.value), self.unit);
        if let (Some((op, bound)), Some(met)) = (self.target, self.met()) {
            line.push_str(&format!(
                "  (target {op} {}: {})",
                show(bound),
                if met { "ok" } else { "MISSED" }
            ));
        }
        line
    }
}

#[derive(Default)]
pub struct Figures(Vec<Figure>);

impl Figures {
    pub fn add(&mut self, name: &str, value: f64, unit: &'static str) {
        self.push(name, value, unit, None);
    }

    pub fn target(
        &mut self,
        name: &str,
        value: f64,
        unit: &'static str,
        op: &'static str,
        bound: f64,
    ) {
        self.push(name, value, unit, Some((op, bound)));
    }

    fn push(
        &mut self,
        name: &str,
        value: f64,
        unit: &'static str,
        target: Option<(&'static str, f64)>,
    ) {
        let figure = Figure {
            name: name.to_owned(),
            value,
            unit,
            target,
            note: None,
        };
        println!("FIGURE {}", figure.line());
        self.0.push(figure);
    }

    pub fn skip(&mut self, name: &str, why: &str) {
        println!("FIGURE {name}: skipped ({why})");
        self.0.push(Figure {
            name: name.to_owned(),
            value: f64::NAN,
            unit: "",
            target: None,
            note: Some(format!("skipped ({why})")),
        });
    }

    pub fn write(&self, dir: &Path) {
        let mut lines = String::new();
        let mut targets = String::new();
        let mut summary = serde_json::Map::new();
        for f in &self.0 {
            lines.push_str(&f.line());
            lines.push('\n');
            let mut entry = serde_json::Map::new();
            if let Some(note) = &f.note {
                entry.insert("skipped".into(), json!(note));
            } else {
                entry.insert("value".into(), json!(round(f.value)));
                entry.insert("unit".into(), json!(f.unit));
                if let (Some((op, bound)), Some(met)) = (f.target, f.met()) {
                    entry.insert("target".into(), json!(format!("{op} {bound}")));
                    entry.insert("met".into(), json!(met));
                    entry.insert("verdict".into(), json!(if met { "ok" } else { "MISSED" }));
                    targets.push_str(&format!(
                        "{}: {} ({} {}, target {op} {})\n",
                        f.name,
                        if met { "ok" } else { "MISSED" },
                        show(f.value),
                        f.unit,
                        show(bound)
                    ));
                }
            }
            summary.insert(f.name.clone(), Value::Object(entry));
        }
        fs::write(dir.join("figures.txt"), lines).expect("write figures.txt");
        fs::write(dir.join("targets.txt"), targets).expect("write targets.txt");
        let text = serde_json::to_string_pretty(&Value::Object(summary)).expect("json");
        fs::write(dir.join("summary.json"), text + "\n").expect("write summary.json");
    }
}

/// Three significant digits, no exponent.
pub fn show(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn round(v: f64) -> f64 {
    show(v).parse().unwrap_or(v)
}

/// Criterion's median estimate (ns) of `group/function/parameter`.
pub fn criterion_median_ns(dir: &Path, id: &str) -> f64 {
    let path = dir.join(id).join("new/estimates.json");
    let text = fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("criterion estimates {}: {e}", path.display()));
    let v: Value = serde_json::from_str(&text).expect("estimates.json");
    v["median"]["point_estimate"]
        .as_f64()
        .expect("median point estimate")
}

pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The calling thread's CPU time so far (user and system), in ns:
/// `clock_gettime(CLOCK_THREAD_CPUTIME_ID)`. Time the thread spends waiting in the run queue
/// (a busy neighbour holding the CPU) or on I/O (`fdatasync`) does not count.
pub fn thread_cpu_ns() -> f64 {
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    thread_cpu_clock("clock_gettime", |ts| unsafe {
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, ts)
    })
}

/// `clock_getres(CLOCK_THREAD_CPUTIME_ID)`, in ns: the thread CPU clock's resolution.
pub fn thread_cpu_resolution_ns() -> f64 {
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    thread_cpu_clock("clock_getres", |ts| unsafe {
        libc::clock_getres(libc::CLOCK_THREAD_CPUTIME_ID, ts)
    })
}

/// Runs `call` (`name`, one of the clock calls on CLOCK_THREAD_CPUTIME_ID) on a zeroed
/// timespec and returns what it wrote, in ns; panics with the OS error if it failed.
fn thread_cpu_clock(name: &str, call: impl FnOnce(&mut libc::timespec) -> libc::c_int) -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let rc = call(&mut ts);
    assert_eq!(
        rc,
        0,
        "{name}(CLOCK_THREAD_CPUTIME_ID): {}",
        std::io::Error::last_os_error()
    );
    ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64
}

/// A point in both clocks: the wall clock and the calling thread's CPU time.
pub struct Stamp {
    wall: Instant,
    cpu_ns: f64,
}

impl Stamp {
    pub fn now() -> Stamp {
        // CPU first, wall last, and in reverse order in `elapsed`: the wall span encloses
        // the CPU span.
        let cpu_ns = thread_cpu_ns();
        Stamp {
            wall: Instant::now(),
            cpu_ns,
        }
    }

    /// (thread CPU ns, wall ns) since this stamp, on the same thread.
    pub fn elapsed(&self) -> (f64, f64) {
        let wall = self.wall.elapsed().as_secs_f64() * 1e9;
        (thread_cpu_ns() - self.cpu_ns, wall)
    }
}

/// The two sides of a ratio, timed interleaved: pair after pair, one side then the other
/// (which goes first alternates), so a busy neighbour that slows the machine for a while
/// slows both sides of the pairs it overlaps. Each side is timed in the calling thread's CPU
/// time ([`thread_cpu_ns`]; both sides run on the calling thread), so a neighbour that takes
/// the CPU away does not count at all, however many scheduler slices a side spans (issue 40:
/// timed in wall time, a side needing tens of ms was stretched by the run queue while a 5 ms
/// side often ran inside one slice, and the ratio grew 3.3x with the load). The wall times
/// are kept beside them. For CPU-bound sides only: a side that waits on I/O would have its
/// wait left out. Each side of a pair is the mean of as many calls as take about
/// [`PAIR_SIDE`] of CPU (at least one), far above the clock's resolution.
pub struct Paired {
    /// Per pair, the first side's thread CPU time per call (ns).
    pub a_ns: Vec<f64>,
    /// Per pair, the second side's thread CPU time per call (ns).
    pub b_ns: Vec<f64>,
    /// Per pair, the first side's wall time per call (ns).
    pub a_wall_ns: Vec<f64>,
    /// Per pair, the second side's wall time per call (ns).
    pub b_wall_ns: Vec<f64>,
    /// The shortest timed side's CPU time (all its calls, ns): how far above the clock's
    /// resolution the figures are.
    pub shortest_side_ns: f64,
}

/// About how much CPU time each side of a pair runs (its calls repeated up to this).
pub const PAIR_SIDE: Duration = Duration::from_millis(5);

impl Paired {
    /// Runs `pairs` timed pairs of `a` and `b` after two untimed ones.
    pub fn measure(pairs: usize, mut a: impl FnMut(), mut b: impl FnMut()) -> Paired {
        // One warm call, then one timed in CPU time: how many calls make PAIR_SIDE.
        let reps = |f: &mut dyn FnMut()| -> usize {
            f();
            let started = Stamp::now();
            f();
            let once = started.elapsed().0.max(1.0);
            ((PAIR_SIDE.as_secs_f64() * 1e9 / once).ceil() as usize).max(1)
        };
        let (reps_a, reps_b) = (reps(&mut a), reps(&mut b));
        // (CPU ns per call, wall ns per call, CPU ns of the side)
        let time = |f: &mut dyn FnMut(), reps: usize| -> (f64, f64, f64) {
            let started = Stamp::now();
            for _ in 0..reps {
                f();
            }
            let (cpu, wall) = started.elapsed();
            (cpu / reps as f64, wall / reps as f64, cpu)
        };
        let mut out = Paired {
            a_ns: Vec::with_capacity(pairs),
            b_ns: Vec::with_capacity(pairs),
            a_wall_ns: Vec::with_capacity(pairs),
            b_wall_ns: Vec::with_capacity(pairs),
            shortest_side_ns: f64::INFINITY,
        };
        for pair in 0..pairs + 2 {
            let (ta, tb) = if pair % 2 == 0 {
                let ta = time(&mut a, reps_a);
                (ta, time(&mut b, reps_b))
            } else {
                let tb = time(&mut b, reps_b);
                (time(&mut a, reps_a), tb)
            };
            if pair >= 2 {
                out.a_ns.push(ta.0);
                out.b_ns.push(tb.0);
                out.a_wall_ns.push(ta.1);
                out.b_wall_ns.push(tb.1);
                out.shortest_side_ns = out.shortest_side_ns.min(ta.2).min(tb.2);
            }
        }
        out
    }

    /// The median of the pairs' ratios b / a, in thread CPU time.
    pub fn median_ratio_b_over_a(&self) -> f64 {
        median_ratio(&self.b_ns, &self.a_ns)
    }

    /// The median of the pairs' ratios b / a, in wall time.
    pub fn median_wall_ratio_b_over_a(&self) -> f64 {
        median_ratio(&self.b_wall_ns, &self.a_wall_ns)
    }

    /// The median of each side's thread CPU times (ns).
    pub fn medians_ns(&self) -> (f64, f64) {
        (
            median(&mut self.a_ns.clone()),
            median(&mut self.b_ns.clone()),
        )
    }

    /// The median of each side's wall times (ns).
    pub fn wall_medians_ns(&self) -> (f64, f64) {
        (
            median(&mut self.a_wall_ns.clone()),
            median(&mut self.b_wall_ns.clone()),
        )
    }
}

/// The median of `num[i] / den[i]` over the pairs.
pub fn median_ratio(num: &[f64], den: &[f64]) -> f64 {
    assert_eq!(num.len(), den.len(), "paired samples");
    let mut ratios: Vec<f64> = num.iter().zip(den).map(|(n, d)| n / d).collect();
    median(&mut ratios)
}

/// The one line that says which clock each timed ratio with a target uses, with the thread
/// CPU clock's resolution: printed once per run, by the first of the plan and detect figures.
pub fn print_clocks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| println!(
        "clocks: the gc_plan_ours/kubelet/speedup figures and detect_overhead_*, detect_store_*_us, detect_in_memory_*_us are thread CPU time (CLOCK_THREAD_CPUTIME_ID, resolution {} ns by clock_getres; each plan side runs >= {} ms of CPU; detect's store side leaves out its wait on fdatasync), the *_wall* figures beside them wall time; commit_over_redb_floor (store_figures) is wall time (its cost is fsync, I/O not CPU)",
        show(thread_cpu_resolution_ns()),
        PAIR_SIDE.as_millis()
    ));
}
