//! Reading an operator document that the kubelet accepts as YAML or JSON (a pull secret, a
//! credential provider config, a warm-set file) into a serde type. With feature `yaml` (on in
//! the binary) the YAML parser reads both, as YAML 1.2 is a superset of JSON; without it, the
//! lean library reads JSON only and says so in the error, so a YAML file is refused with a
//! clear message instead of being misread.
//!
//! Invariants: the same input gives the same value under both builds whenever it is JSON; the
//! error keeps the parser's position (1-based line and column, 0 when the parser gave none).

use serde::de::DeserializeOwned;

/// The formats [`parse_yaml_or_json`] reads, as the errors name them: "YAML or JSON" with
/// feature `yaml`, else JSON only, naming the feature that adds YAML.
#[cfg(feature = "yaml")]
pub const YAML_OR_JSON: &str = "YAML or JSON";
/// The formats [`parse_yaml_or_json`] reads, as the errors name them: "YAML or JSON" with
/// feature `yaml`, else JSON only, naming the feature that adds YAML.
#[cfg(not(feature = "yaml"))]
pub const YAML_OR_JSON: &str = "JSON (this build has no YAML parser: feature `yaml`)";

/// Where and why a document did not parse into its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentError {
    /// The 1-based line of the error, 0 when the parser gave no position.
    pub line: usize,
    /// The 1-based column of the error, 0 when the parser gave no position.
    pub column: usize,
    /// The parser's message (it may quote the input: callers reading secrets drop it).
    pub message: String,
}

/// Parses `text` as YAML or JSON (feature `yaml`), or as JSON only (without it).
pub fn parse_yaml_or_json<T: DeserializeOwned>(text: &str) -> Result<T, DocumentError> {
    #[cfg(feature = "yaml")]
    {
        serde_yaml_ng::from_str(text).map_err(|e| {
            let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
            DocumentError {
                line,
                column,
                message: e.to_string(),
            }
        })
    }
    #[cfg(not(feature = "yaml"))]
    {
        serde_json::from_str(text).map_err(|e| DocumentError {
            line: e.line(),
            column: e.column(),
            message: format!("{e} (read as {YAML_OR_JSON})"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_parses_and_an_error_keeps_its_position() {
        let v: serde_json::Value = parse_yaml_or_json(r#"{"a": [1, 2]}"#).expect("valid JSON");
        assert_eq!(v, serde_json::json!({"a": [1, 2]}));
        let e = parse_yaml_or_json::<serde_json::Value>("{\"a\": [1,\n 2,,]}").unwrap_err();
        assert_eq!(e.line, 2, "{e:?}");
        assert!(e.column > 0, "{e:?}");
    }

    #[test]
    fn yaml_is_read_only_with_the_yaml_feature() {
        let parsed = parse_yaml_or_json::<serde_json::Value>("a:\n  - 1\n");
        if cfg!(feature = "yaml") {
            assert_eq!(parsed, Ok(serde_json::json!({"a": [1]})));
        } else {
            let e = parsed.unwrap_err();
            assert!(e.message.contains("feature `yaml`"), "{e:?}");
        }
    }
}
