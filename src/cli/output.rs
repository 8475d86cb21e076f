//! How every command prints records, as kubectl and crictl do: `-o/--output
//! table|wide|json|kube-json|yaml|name`, `--no-headers`, `--no-trunc`. One format enum
//! ([`Format`]), one list wrapper ([`KubeList`]: `apiVersion`, `kind: List`, `items`, each
//! item with its own `apiVersion` and `kind`), one table writer over columns given as data
//! ([`Column`], [`write_table`]), so a printer adds a column by adding one entry.
//!
//! Contract: `json` is each command's JSON as documented before this module (unchanged byte
//! for byte; scripts rely on it). `kube-json` and `yaml` are the same Kubernetes-style List
//! document, with camelCase fields, RFC 3339 UTC times and sizes in bytes. `name` prints one
//! `kind/name` per line. Table cells have their terminal control characters escaped; JSON and
//! YAML strings are exact.

use std::io::{self, Write};

use clap::{Args, ValueEnum};
use imagekeeper::inspect::escape_control;
use serde_json::{Map, Value, json};

/// The `apiVersion` of every object imagekeeper prints.
pub const API_VERSION: &str = "imagekeeper.io/v1alpha1";

/// An output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned columns for people.
    Table,
    /// The table with more columns.
    Wide,
    /// The command's own JSON document (unchanged from earlier releases).
    Json,
    /// A Kubernetes-style List (apiVersion, kind, items) as JSON.
    KubeJson,
    /// The Kubernetes-style List as YAML.
    Yaml,
    /// One kind/name per line.
    Name,
}

/// The output flags every printing command takes.
#[derive(Args, Debug, Clone, Copy, Default)]
pub struct OutputArgs {
    /// Output format [default: table].
    #[arg(
        short = 'o',
        long = "output",
        global = true,
        value_enum,
        value_name = "FORMAT"
    )]
    pub output: Option<Format>,
    /// Tables without their header line.
    #[arg(long, global = true)]
    pub no_headers: bool,
    /// Full image ids and strings in tables (they are shortened by default).
    #[arg(long, global = true)]
    pub no_trunc: bool,
}

impl OutputArgs {
    pub fn format(&self) -> Format {
        self.output.unwrap_or(Format::Table)
    }

    /// The options a table is written with.
    pub fn table(&self) -> TableOptions {
        TableOptions {
            wide: self.format() == Format::Wide,
            no_headers: self.no_headers,
        }
    }
}

/// How a table is written.
#[derive(Clone, Copy, Debug, Default)]
pub struct TableOptions {
    pub wide: bool,
    pub no_headers: bool,
}

/// One column of a table: its header, whether only `wide` shows it, and its cell.
pub struct Column<'a, T> {
    pub header: &'static str,
    pub wide_only: bool,
    #[allow(clippy::type_complexity)]
    pub cell: Box<dyn Fn(&T) -> String + 'a>,
}

impl<'a, T> Column<'a, T> {
    pub fn new(header: &'static str, cell: impl Fn(&T) -> String + 'a) -> Column<'a, T> {
        Column {
            header,
            wide_only: false,
            cell: Box::new(cell),
        }
    }

    pub fn wide(header: &'static str, cell: impl Fn(&T) -> String + 'a) -> Column<'a, T> {
        Column {
            header,
            wide_only: true,
            cell: Box::new(cell),
        }
    }
}

/// Writes `rows` under `columns` (wide-only columns only when `options.wide`).
pub fn write_table<T>(
    w: &mut dyn Write,
    columns: &[Column<'_, T>],
    rows: &[T],
    options: TableOptions,
) -> io::Result<()> {
    let shown: Vec<&Column<'_, T>> = columns
        .iter()
        .filter(|c| options.wide || !c.wide_only)
        .collect();
    let headers: Vec<&str> = shown.iter().map(|c| c.header).collect();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| shown.iter().map(|c| (c.cell)(row)).collect())
        .collect();
    table(w, &headers, &cells, options.no_headers)
}

/// Columns separated by three spaces, each as wide as its widest cell; no trailing spaces.
/// Every cell has its control characters escaped.
pub fn table(
    w: &mut dyn Write,
    headers: &[&str],
    rows: &[Vec<String>],
    no_headers: bool,
) -> io::Result<()> {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|c| escape_control(c).into_owned()).collect())
        .collect();
    let mut widths: Vec<usize> = if no_headers {
        vec![0; headers.len()]
    } else {
        headers.iter().map(|h| h.chars().count()).collect()
    };
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(width) = widths.get_mut(i) {
                *width = (*width).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| -> String {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            out.push_str(cell);
            if i + 1 < cells.len() {
                let pad = widths[i].saturating_sub(cell.chars().count()) + 3;
                out.push_str(&" ".repeat(pad));
            }
        }
        out.trim_end().to_owned()
    };
    if !no_headers {
        writeln!(w, "{}", line(headers.to_vec()))?;
    }
    for row in &rows {
        writeln!(w, "{}", line(row.iter().map(String::as_str).collect()))?;
    }
    Ok(())
}

/// A Kubernetes-style List of items of one kind.
pub struct KubeList {
    kind: &'static str,
    items: Vec<(String, Map<String, Value>)>,
}

impl KubeList {
    /// An empty list of `kind` items (e.g. "ImageRecord").
    pub fn new(kind: &'static str) -> KubeList {
        KubeList {
            kind,
            items: Vec::new(),
        }
    }

    /// Adds one item named `name` (`metadata.name`) with `fields` (a JSON object).
    pub fn push(&mut self, name: impl Into<String>, fields: Value) {
        let fields = match fields {
            Value::Object(map) => map,
            other => {
                let mut map = Map::new();
                map.insert("value".into(), other);
                map
            }
        };
        self.items.push((name.into(), fields));
    }

    /// The List document.
    pub fn document(&self) -> Value {
        let items: Vec<Value> = self
            .items
            .iter()
            .map(|(name, fields)| {
                let mut item = Map::new();
                item.insert("apiVersion".into(), json!(API_VERSION));
                item.insert("kind".into(), json!(self.kind));
                item.insert("metadata".into(), json!({ "name": name }));
                item.extend(fields.clone());
                Value::Object(item)
            })
            .collect();
        json!({
            "apiVersion": API_VERSION,
            "kind": "List",
            "metadata": {},
            "items": items,
        })
    }

    /// Writes the list as `format` asks: `kube-json`, `yaml` or `name` (`kind/name` lines,
    /// the kind in lower case as kubectl prints it).
    pub fn write(&self, w: &mut dyn Write, format: Format) -> io::Result<()> {
        match format {
            Format::Yaml => {
                let text = serde_yaml_ng::to_string(&self.document()).map_err(io::Error::other)?;
                write!(w, "{text}")
            }
            Format::Name => {
                let kind = self.kind.to_lowercase();
                for (name, _) in &self.items {
                    // One name a line: a newline or an escape sequence in a name (a pin
                    // written before they were refused) is shown escaped, never acted on.
                    let name = imagekeeper::inspect::escape_control(name);
                    writeln!(w, "{kind}/{name}")?;
                }
                Ok(())
            }
            _ => {
                let text =
                    serde_json::to_string_pretty(&self.document()).map_err(io::Error::other)?;
                writeln!(w, "{text}")
            }
        }
    }
}

/// Whether `format` is one a [`KubeList`] writes.
pub fn is_list(format: Format) -> bool {
    matches!(format, Format::KubeJson | Format::Yaml | Format::Name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(list: &KubeList, format: Format) -> String {
        let mut out = Vec::new();
        list.write(&mut out, format).expect("write");
        String::from_utf8(out).expect("utf8")
    }

    #[test]
    fn a_list_has_api_version_kind_and_named_items_in_json_yaml_and_name() {
        let mut list = KubeList::new("ImageRecord");
        list.push("sha256:aaa", json!({"sizeBytes": 5}));
        let v: Value = serde_json::from_str(&render(&list, Format::KubeJson)).expect("json");
        assert_eq!(v["apiVersion"], API_VERSION);
        assert_eq!(v["kind"], "List");
        assert_eq!(v["items"][0]["kind"], "ImageRecord");
        assert_eq!(v["items"][0]["apiVersion"], API_VERSION);
        assert_eq!(v["items"][0]["metadata"]["name"], "sha256:aaa");
        assert_eq!(v["items"][0]["sizeBytes"], 5);
        let y: Value = serde_yaml_ng::from_str(&render(&list, Format::Yaml)).expect("yaml");
        assert_eq!(y, v, "YAML and JSON are one document");
        assert_eq!(render(&list, Format::Name), "imagerecord/sha256:aaa\n");
        let mut raw = KubeList::new("ImagePin");
        raw.push("x:1\n\u{1b}[2Jfake".to_owned(), json!({}));
        assert_eq!(
            render(&raw, Format::Name),
            "imagepin/x:1\\n\\u{1b}[2Jfake\n",
            "a control character in a name is escaped"
        );
        let empty: Value =
            serde_json::from_str(&render(&KubeList::new("X"), Format::KubeJson)).expect("json");
        assert_eq!(empty["items"], json!([]));
    }

    #[test]
    fn table_columns_wide_and_no_headers() {
        let rows = [("a", 1), ("bbbb", 22)];
        let columns = [
            Column::new("NAME", |r: &(&str, i32)| r.0.to_owned()),
            Column::wide("NUMBER", |r: &(&str, i32)| r.1.to_string()),
            Column::new("X", |_: &(&str, i32)| "\u{1b}".to_owned()),
        ];
        let render = |options: TableOptions| {
            let mut out = Vec::new();
            write_table(&mut out, &columns, &rows, options).expect("write");
            String::from_utf8(out).expect("utf8")
        };
        assert_eq!(
            render(TableOptions::default()),
            "NAME   X\na      \\u{1b}\nbbbb   \\u{1b}\n"
        );
        assert_eq!(
            render(TableOptions {
                wide: true,
                no_headers: true,
            }),
            "a      1    \\u{1b}\nbbbb   22   \\u{1b}\n"
        );
    }
}
