//! Warm entries as an operator writes them: the config file's `[[warm]]` tables and the YAML
//! or JSON files of `warmSetDir` (a mounted ConfigMap: its visible names are symlinks
//! through `..data` to a hidden timestamped directory, swapped at once on an update). Every
//! file is read through [`crate::operator_file`]; names starting with `.` (`..data`, the
//! timestamped directories) are skipped, and only `*.yaml`, `*.yml` and `*.json` are read, in
//! name order. A bad entry is an error naming the file (or field) and the entry.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::format::{parse_go_duration, parse_rfc3339_or_why};

use super::WarmEntry;

/// A bad warm entry, warm file or warm set directory: `origin` names the file and the entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WarmError {
    #[error("{origin}: {message}")]
    /// A bad warm entry.
    Invalid {
        /// The file and the entry.
        origin: String,
        /// What is wrong.
        message: String,
    },
    /// A warm set file (of `warmSetDir`).
    #[error("warm set file {path}: {message}")]
    File {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The warm set directory itself (missing, unreadable, too many files).
    #[error("warm set directory {path}: {message}")]
    Dir {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// One `[[warm]]` table, or one entry of a warm file's `warm:` list.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WarmEntrySpec {
    /// The image to keep present.
    pub image: String,
    /// How long the entry stays warm, Go syntax, from when the agent read it.
    #[serde(rename = "for")]
    pub for_: Option<String>,
    /// Until when the entry stays warm, RFC 3339.
    pub until: Option<String>,
    /// The runtime handler; `None` for the default.
    #[serde(rename = "runtimeHandler")]
    pub runtime_handler: Option<String>,
    /// The image's size, bytes or a quantity (`20Gi`, `15G`): used to judge whether it fits
    /// only when the node has no record or journal entry of it.
    pub size: Option<SizeSpec>,
}

/// A size: a number of bytes or a quantity string. A negative or fractional number is refused
/// saying so (not serde's "did not match any variant of untagged enum").
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SizeSpec {
    /// A number of bytes.
    Bytes(u64),
    /// A quantity string (`10Gi`).
    Text(String),
}

impl<'de> Deserialize<'de> for SizeSpec {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<SizeSpec, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = SizeSpec;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a size: whole bytes (1073741824) or a quantity string (\"1Gi\")")
            }

            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<SizeSpec, E> {
                Ok(SizeSpec::Bytes(v))
            }

            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<SizeSpec, E> {
                u64::try_from(v).map(SizeSpec::Bytes).map_err(|_| {
                    E::custom(format!(
                        "a size must not be negative (got {v}); give whole bytes or a quantity \
                         such as \"1Gi\""
                    ))
                })
            }

            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<SizeSpec, E> {
                Err(E::custom(format!(
                    "a size in bytes must be a whole number (got {v}); for a fraction give a \
                     quantity string such as \"1.5Gi\""
                )))
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<SizeSpec, E> {
                Ok(SizeSpec::Text(v.to_owned()))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// A warm file: `{"warm": [ {image: ...}, ... ]}` (YAML or JSON).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WarmFile {
    /// The warm set's entries.
    #[serde(default)]
    pub warm: Vec<WarmEntrySpec>,
}

/// Parses a size: bytes (`1048576`) or a Kubernetes quantity (`20Gi`, `1.5G`), with the one
/// quantity parser the byte budget uses ([`crate::format::parse_byte_quantity`]): a negative
/// size, a size over 64 bits or an unknown suffix is refused, saying why.
pub fn parse_size(text: &str) -> Result<u64, String> {
    crate::format::parse_byte_quantity(text.trim())
}

/// Resolves specs; `origin(i)` names the i-th entry in errors and in [`WarmEntry::origin`]. A
/// `for` stays a lifetime until [`super::WarmSet::stamped`].
pub fn resolve_specs(
    specs: &[WarmEntrySpec],
    origin: impl Fn(usize) -> String,
) -> Result<Vec<WarmEntry>, WarmError> {
    let mut out = Vec::with_capacity(specs.len());
    for (i, spec) in specs.iter().enumerate() {
        let origin = origin(i);
        let invalid = |field: &str, message: String| WarmError::Invalid {
            origin: format!("{origin}: {field}"),
            message,
        };
        let image = spec.image.trim();
        if image.is_empty() {
            return Err(invalid("image", "must not be empty".into()));
        }
        // A name with `user:password@` is refused shown redacted (on a reload, into the log).
        crate::reference::refuse_credentials(image).map_err(|e| invalid("image", e.to_string()))?;
        if let Err(e) = crate::reference::apply_default_image_tag(image) {
            return Err(invalid("image", format!("{image:?}: {e}")));
        }
        let (until, lifetime) = match (&spec.for_, &spec.until) {
            (Some(_), Some(_)) => {
                return Err(invalid("for", "give `for` or `until`, not both".into()));
            }
            (Some(d), None) => {
                let d = parse_go_duration(d).map_err(|e| invalid("for", e.to_string()))?;
                (None, Some(d))
            }
            (None, Some(t)) => (
                Some(parse_rfc3339_or_why(t).map_err(|why| {
                    invalid(
                        "until",
                        format!(
                            "{why}; leave out `until` for an entry kept while it is in the set"
                        ),
                    )
                })?),
                None,
            ),
            (None, None) => (None, None),
        };
        let size_hint = match &spec.size {
            None => None,
            Some(SizeSpec::Bytes(b)) => Some(*b),
            Some(SizeSpec::Text(t)) => Some(parse_size(t).map_err(|m| invalid("size", m))?),
        };
        out.push(WarmEntry {
            image: image.to_owned(),
            runtime_handler: spec.runtime_handler.clone().unwrap_or_default(),
            until,
            lifetime,
            size_hint,
            origin,
        });
    }
    Ok(out)
}

/// Whether a directory entry's name is a warm set file's: not hidden (a ConfigMap's `..data`
/// and timestamped directories are), and `*.yaml`, `*.yml` or `*.json`.
pub fn is_warm_file_name(name: &std::ffi::OsStr) -> bool {
    let name = name.to_str().unwrap_or("");
    !name.starts_with('.')
        && [".yaml", ".yml", ".json"]
            .iter()
            .any(|ext| name.ends_with(ext))
}

/// Reads every warm file of `dir` (see the module's doc), in name order; more than
/// [`super::MAX_WARM_FILES`] files is refused, naming the count, before any is read. Blocking
/// I/O: the agent calls it on the blocking pool (within a reload).
pub fn read_warm_dir(dir: &Path) -> Result<Vec<WarmEntry>, WarmError> {
    let dir_error = |message: String| WarmError::Dir {
        path: dir.to_owned(),
        message,
    };
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| dir_error(format!("cannot read it: {e}")))?
        .filter_map(|entry| entry.ok())
        .filter(|entry| is_warm_file_name(&entry.file_name()))
        .map(|entry| entry.path())
        .collect();
    if names.len() > super::MAX_WARM_FILES {
        return Err(dir_error(format!(
            "it holds {} warm set files (*.yaml, *.yml, *.json), more than the {} a warm set \
             directory may hold",
            names.len(),
            super::MAX_WARM_FILES
        )));
    }
    names.sort();
    // A name that resolves out of the directory is refused unread: a link to any file (one
    // to /etc/shadow had its first line quoted in the parse error, on a reload into the log).
    // A ConfigMap's links (`..data/...`) stay inside.
    let root = std::fs::canonicalize(dir)
        .map_err(|e| dir_error(format!("cannot read the warm set directory: {e}")))?;
    let mut out = Vec::new();
    for path in names {
        use crate::operator_file::{Follow, read_text};
        match std::fs::canonicalize(&path) {
            Ok(resolved) if resolved.starts_with(&root) => {}
            Ok(_) => {
                return Err(WarmError::File {
                    path: path.clone(),
                    message: "a symbolic link to a file outside the warm set directory; \
                              refused unread (a ConfigMap's links stay inside it)"
                        .to_owned(),
                });
            }
            Err(e) => {
                return Err(WarmError::File {
                    path: path.clone(),
                    message: format!("cannot resolve it: {e}"),
                });
            }
        }
        // A ConfigMap's names are symlinks into its `..data`: followed.
        let text = read_text(&path, Follow::Yes).map_err(|e| WarmError::File {
            path: path.clone(),
            message: {
                let full = e.to_string();
                let shown = format!("{}: ", e.path().display());
                full.strip_prefix(&shown).unwrap_or(&full).to_owned()
            },
        })?;
        // JSON is YAML: one parser for both (JSON only without feature `yaml`).
        let file: WarmFile = if text.trim().is_empty() {
            WarmFile::default()
        } else {
            crate::operator_file::parse_yaml_or_json(&text).map_err(|e| WarmError::File {
                path: path.clone(),
                message: e.message,
            })?
        };
        let shown = path.display().to_string();
        out.extend(resolve_specs(&file.warm, |i| {
            format!("{shown}: warm[{i}]")
        })?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::UnixNanos;

    #[test]
    fn sizes_are_bytes_or_quantities_and_bad_ones_say_why() {
        assert_eq!(parse_size("1048576"), Ok(1_048_576));
        assert_eq!(parse_size("20Gi"), Ok(20 * 1024 * 1024 * 1024));
        assert_eq!(parse_size("1.5G"), Ok(1_500_000_000));
        assert_eq!(parse_size("2Mi"), Ok(2 * 1024 * 1024));
        assert!(parse_size("3Gb").unwrap_err().contains("not a quantity"));
        assert!(parse_size("-1").unwrap_err().contains("negative"));
        assert!(parse_size("").unwrap_err().contains("not a quantity"));
    }

    #[test]
    fn specs_resolve_for_until_and_size_and_bad_fields_are_named() {
        let now = UnixNanos(1_000_000_000_000);
        let specs = vec![
            WarmEntrySpec {
                image: "vllm/vllm-openai:v0.6".into(),
                for_: Some("1h".into()),
                size: Some(SizeSpec::Text("20Gi".into())),
                ..WarmEntrySpec::default()
            },
            WarmEntrySpec {
                image: "busybox".into(),
                until: Some("2026-01-02T00:00:00Z".into()),
                runtime_handler: Some("nvidia".into()),
                ..WarmEntrySpec::default()
            },
        ];
        let got = resolve_specs(&specs, |i| format!("warm[{i}]")).expect("valid");
        assert_eq!(got[0].lifetime, Some(std::time::Duration::from_secs(3600)));
        assert_eq!(got[0].until, None);
        let stamped =
            super::super::WarmSet::new(got.clone()).stamped(now, &super::super::WarmSet::default());
        assert_eq!(
            stamped.entries[0].until,
            Some(UnixNanos(now.0 + 3_600_000_000_000))
        );
        // A reload an hour later keeps the first read's end: `for` is not extended.
        let later = UnixNanos(now.0 + 1_800_000_000_000);
        let again = super::super::WarmSet::new(got.clone()).stamped(later, &stamped);
        assert_eq!(again.entries[0].until, stamped.entries[0].until);
        assert_eq!(got[0].size_hint, Some(20 << 30));
        assert_eq!(got[1].runtime_handler, "nvidia");
        assert_eq!(
            got[1].until,
            crate::format::parse_rfc3339("2026-01-02T00:00:00Z")
        );
        assert_eq!(got[1].origin, "warm[1]");

        let bad = |spec: WarmEntrySpec| {
            resolve_specs(&[spec], |i| format!("warm[{i}] in x.toml"))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            bad(WarmEntrySpec::default()),
            "warm[0] in x.toml: image: must not be empty"
        );
        assert!(
            bad(WarmEntrySpec {
                image: "a".into(),
                for_: Some("1h".into()),
                until: Some("2026-01-02T00:00:00Z".into()),
                ..WarmEntrySpec::default()
            })
            .starts_with("warm[0] in x.toml: for: give `for` or `until`")
        );
        assert!(
            bad(WarmEntrySpec {
                image: "a".into(),
                until: Some("tomorrow".into()),
                ..WarmEntrySpec::default()
            })
            .starts_with("warm[0] in x.toml: until: \"tomorrow\" is not an RFC 3339 time")
        );
        assert!(
            bad(WarmEntrySpec {
                image: "Bad Name".into(),
                ..WarmEntrySpec::default()
            })
            .starts_with("warm[0] in x.toml: image: \"Bad Name\"")
        );
    }

    /// Issue 41: a warm file that is a symbolic link out of the directory (to any file the
    /// agent can read) is refused unread: nothing of that file is in the error.
    #[test]
    fn a_warm_file_linked_out_of_the_directory_is_refused_unread() {
        let outside = tempfile::tempdir().expect("tempdir");
        let secret = outside.path().join("shadow");
        std::fs::write(&secret, "root:$y$SECRETLINE:19000:0:99999:7:::\n").expect("write");
        let dir = tempfile::tempdir().expect("tempdir");
        std::os::unix::fs::symlink(&secret, dir.path().join("a.yaml")).expect("symlink");
        let err = read_warm_dir(dir.path()).expect_err("refused").to_string();
        assert!(err.contains("outside the warm set directory"), "{err}");
        assert!(!err.contains("SECRETLINE"), "{err}");
        // A link within the directory is followed.
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("real.txt"), "warm: []\n").expect("write");
        std::os::unix::fs::symlink("real.txt", dir.path().join("b.yaml")).expect("symlink");
        assert_eq!(read_warm_dir(dir.path()).expect("inside"), Vec::new());
    }

    /// A ConfigMap mount: `gpu.yaml -> ..data/gpu.yaml`, `..data -> ..2026_01_01`; the hidden
    /// names are skipped, the visible ones followed, YAML and JSON both read, in name order.
    #[test]
    fn a_configmap_mount_is_read_through_its_data_symlinks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stamped = dir.path().join("..2026_01_01_00_00_00.1");
        std::fs::create_dir(&stamped).expect("mkdir");
        std::fs::write(
            stamped.join("b-gpu.yaml"),
            "warm:\n  - image: vllm/vllm-openai:v0.6\n    size: 20Gi\n",
        )
        .expect("write");
        std::fs::write(
            stamped.join("a-base.json"),
            r#"{"warm": [{"image": "busybox:1.36", "for": "24h"}]}"#,
        )
        .expect("write");
        std::fs::write(stamped.join("notes.txt"), "not a warm file").expect("write");
        std::os::unix::fs::symlink("..2026_01_01_00_00_00.1", dir.path().join("..data"))
            .expect("symlink");
        for name in ["b-gpu.yaml", "a-base.json", "notes.txt"] {
            std::os::unix::fs::symlink(format!("..data/{name}"), dir.path().join(name))
                .expect("symlink");
        }
        let got = read_warm_dir(dir.path()).expect("valid");
        let images: Vec<&str> = got.iter().map(|e| e.image.as_str()).collect();
        assert_eq!(images, ["busybox:1.36", "vllm/vllm-openai:v0.6"]);
        assert!(
            got[1].origin.ends_with("b-gpu.yaml: warm[0]"),
            "{}",
            got[1].origin
        );

        std::fs::write(
            stamped.join("b-gpu.yaml"),
            "warm:\n  - image: x\n    colour: red\n",
        )
        .expect("write");
        let err = read_warm_dir(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("b-gpu.yaml") && err.contains("colour"),
            "{err}"
        );
    }

    #[test]
    fn a_fifo_in_the_directory_is_refused_not_waited_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("w.yaml");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("no NUL");
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = read_warm_dir(dir.path()).unwrap_err().to_string();
        assert!(err.contains("w.yaml"), "{err}");
    }
}
