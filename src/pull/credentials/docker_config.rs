//! Reading docker configs (`pkg/credentialprovider/config.go`) and pull secrets
//! (`pkg/credentialprovider/secrets/secrets.go`): the legacy `.dockercfg` form (location to
//! entry), the `config.json` form (`{"auths": {...}}`), and Secret manifests of type
//! `kubernetes.io/dockerconfigjson` (key `.dockerconfigjson`) or `kubernetes.io/dockercfg`
//! (key `.dockercfg`), in YAML or JSON, with `data` (base64) or `stringData`.
//!
//! Invariant: errors name the input and the key or position, never a value.

use std::collections::BTreeMap;

use base64::Engine;
use serde_json::Value;

use super::{CredentialsError, DockerConfig, DockerConfigEntry};

const DOCKER_CONFIG_JSON_TYPE: &str = "kubernetes.io/dockerconfigjson";
const DOCKER_CONFIG_JSON_KEY: &str = ".dockerconfigjson";
const DOCKERCFG_TYPE: &str = "kubernetes.io/dockercfg";
const DOCKERCFG_KEY: &str = ".dockercfg";

fn invalid(what: &str, reason: impl Into<String>) -> CredentialsError {
    CredentialsError::Invalid {
        what: what.to_owned(),
        reason: reason.into(),
    }
}

fn json(what: &str, bytes: &[u8]) -> Result<Value, CredentialsError> {
    serde_json::from_slice(bytes).map_err(|e| CredentialsError::Syntax {
        what: what.to_owned(),
        format: "JSON",
        line: e.line(),
        column: e.column(),
    })
}

/// A `.dockercfg` document: an object of location to entry (`readDockerConfigFileFromBytes`).
pub fn parse_dockercfg(what: &str, bytes: &[u8]) -> Result<DockerConfig, CredentialsError> {
    dockercfg_from_value(what, &json(what, bytes)?)
}

/// A `config.json` document: its `auths` (missing: no credentials), as
/// `readDockerConfigJSONFileFromBytes`.
pub fn parse_config_json(what: &str, bytes: &[u8]) -> Result<DockerConfig, CredentialsError> {
    config_json_from_value(what, &json(what, bytes)?)
}

fn config_json_from_value(what: &str, value: &Value) -> Result<DockerConfig, CredentialsError> {
    let Value::Object(top) = value else {
        return Err(invalid(what, "a docker config.json must be a JSON object"));
    };
    match get_ci(top, "auths") {
        None | Some(Value::Null) => Ok(DockerConfig::default()),
        Some(auths) => dockercfg_from_value(what, auths),
    }
}

fn dockercfg_from_value(what: &str, value: &Value) -> Result<DockerConfig, CredentialsError> {
    let Value::Object(map) = value else {
        return Err(invalid(
            what,
            "docker config auths must be an object of registry to credentials",
        ));
    };
    let mut config = BTreeMap::new();
    for (location, entry) in map {
        config.insert(location.clone(), entry_from_value(what, location, entry)?);
    }
    Ok(DockerConfig(config))
}

/// Go's encoding/json matches field names case-insensitively (exact match first).
fn get_ci<'a>(map: &'a serde_json::Map<String, Value>, field: &str) -> Option<&'a Value> {
    map.get(field).or_else(|| {
        map.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(field))
            .map(|(_, v)| v)
    })
}

/// `DockerConfigEntry.UnmarshalJSON`: `username`, `password`, `email`, and `auth`
/// (base64 of `user:password`), which wins over the first two when set.
fn entry_from_value(
    what: &str,
    location: &str,
    value: &Value,
) -> Result<DockerConfigEntry, CredentialsError> {
    let at = format!("{what}: entry {location:?}");
    let Value::Object(map) = value else {
        return Err(invalid(&at, "must be an object"));
    };
    let text = |field: &str| -> Result<String, CredentialsError> {
        match get_ci(map, field) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(invalid(&at, format!("field {field} must be a string"))),
        }
    };
    let mut entry = DockerConfigEntry {
        username: text("username")?,
        password: text("password")?,
        email: text("email")?,
    };
    let auth = text("auth")?;
    if !auth.is_empty() {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.as_bytes())
            .map_err(|_| invalid(&at, "field auth is not valid base64"))?;
        let decoded = String::from_utf8(decoded)
            .map_err(|_| invalid(&at, "field auth is not valid UTF-8 once decoded"))?;
        let (user, password) = decoded.split_once(':').ok_or_else(|| {
            invalid(
                &at,
                "unable to parse auth field, must be formatted as base64(username:password)",
            )
        })?;
        entry.username = user.to_owned();
        entry.password = password.to_owned();
    }
    Ok(entry)
}

/// A `--pull-secret` file: a Secret manifest (YAML or JSON) of type
/// `kubernetes.io/dockerconfigjson` or `kubernetes.io/dockercfg`, or a bare docker
/// `config.json`. Anything else is an error naming what was found.
pub fn parse_pull_secret(what: &str, bytes: &[u8]) -> Result<DockerConfig, CredentialsError> {
    let text = std::str::from_utf8(bytes).map_err(|_| invalid(what, "not UTF-8 text"))?;
    // A secret from the admin socket is not a file: bound its nesting here too.
    crate::operator_file::check_nesting(text).map_err(|e| invalid(what, e.to_string()))?;
    // YAML 1.2 reads JSON too (JSON only without feature `yaml`); the value is kept only as
    // serde_json's tree, and the parser's message (it may quote a secret) is dropped.
    let value: Value =
        crate::operator_file::parse_yaml_or_json(text).map_err(|e| CredentialsError::Syntax {
            what: what.to_owned(),
            format: crate::operator_file::YAML_OR_JSON,
            line: e.line,
            column: e.column,
        })?;
    let Value::Object(top) = &value else {
        return Err(invalid(
            what,
            "expected a Secret manifest or a docker config.json object",
        ));
    };
    match top.get("kind").and_then(Value::as_str) {
        Some("Secret") => secret(what, top),
        Some(other) => Err(invalid(
            what,
            format!("kind {other:?} is not a Secret or a docker config.json"),
        )),
        None if top.contains_key("auths") => config_json_from_value(what, &value),
        None => Err(invalid(
            what,
            "neither a Secret manifest (kind: Secret) nor a docker config.json (auths)",
        )),
    }
}

/// `MakeDockerKeyring`'s reading of one secret, strict: a secret of another type, or
/// without its key, is an error here (the kubelet skips it silently; a file given on
/// purpose deserves a message).
fn secret(
    what: &str,
    top: &serde_json::Map<String, Value>,
) -> Result<DockerConfig, CredentialsError> {
    let secret_type = top.get("type").and_then(Value::as_str).unwrap_or("");
    let key = match secret_type {
        DOCKER_CONFIG_JSON_TYPE => DOCKER_CONFIG_JSON_KEY,
        DOCKERCFG_TYPE => DOCKERCFG_KEY,
        other => {
            return Err(invalid(
                what,
                format!(
                    "Secret type {other:?} holds no registry credentials (want \
                     {DOCKER_CONFIG_JSON_TYPE} or {DOCKERCFG_TYPE})"
                ),
            ));
        }
    };
    let field = |name: &str| top.get(name).and_then(Value::as_object);
    let bytes = if let Some(v) = field("stringData").and_then(|d| d.get(key)) {
        let s = v
            .as_str()
            .ok_or_else(|| invalid(what, format!("stringData[{key:?}] must be a string")))?;
        s.as_bytes().to_vec()
    } else if let Some(v) = field("data").and_then(|d| d.get(key)) {
        let s = v
            .as_str()
            .ok_or_else(|| invalid(what, format!("data[{key:?}] must be a string")))?;
        // Kubernetes' []byte JSON encoding: standard base64; YAML may fold it over lines.
        let compact: String = s.split_whitespace().collect();
        base64::engine::general_purpose::STANDARD
            .decode(compact.as_bytes())
            .map_err(|_| invalid(what, format!("data[{key:?}] is not valid base64")))?
    } else {
        return Err(invalid(
            what,
            format!("Secret of type {secret_type} has no {key:?} in data or stringData"),
        ));
    };
    if bytes.is_empty() {
        return Err(invalid(what, format!("{key:?} is empty")));
    }
    let inner = format!("{what} ({key})");
    if key == DOCKER_CONFIG_JSON_KEY {
        parse_config_json(&inner, &bytes)
    } else {
        parse_dockercfg(&inner, &bytes)
    }
}
