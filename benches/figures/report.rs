//! The figures of one run: each printed as `name: value unit`, with its target and verdict
//! (`ok` / `MISSED`) beside it when it has one; written to `target/bench/figures.txt`,
//! `targets.txt` and `summary.json`. And the statistics the figures are made of.

use std::fs;
use std::path::Path;

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
