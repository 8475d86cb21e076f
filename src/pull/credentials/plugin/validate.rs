//! The validation of a `CredentialProviderConfig` as the kubelet's
//! `validateCredentialProviderConfig` (`pkg/credentialprovider/plugin/config.go`) does it, with
//! its messages word for word: API versions, names, `matchImages`, cache durations, and
//! `tokenAttributes` (KEP-4412) with the qualified-name and DNS-1123 rules it applies. Pure:
//! it returns every error found (an empty list for a valid config) and reads nothing.

use super::{
    ConfigFile, ProviderFile, SUPPORTED_CONFIG_API_VERSIONS, SUPPORTED_PLUGIN_API_VERSIONS,
    TokenAttributesFile, url_match,
};

/// `validateCredentialProviderConfig` (`plugin/config.go`), its messages.
pub(super) fn validate(file: &ConfigFile) -> Vec<String> {
    let mut errs = Vec::new();
    if !SUPPORTED_CONFIG_API_VERSIONS.contains(&file.api_version.as_str()) {
        errs.push(format!(
            "apiVersion: Unsupported value: {:?}: supported values: {}",
            file.api_version,
            SUPPORTED_CONFIG_API_VERSIONS.join(", ")
        ));
    }
    if file.kind != "CredentialProviderConfig" {
        errs.push(format!(
            "kind: Unsupported value: {:?}: supported values: \"CredentialProviderConfig\"",
            file.kind
        ));
    }
    for (i, p) in file.providers.iter().enumerate() {
        validate_provider(&format!("providers[{i}]"), p, &mut errs);
    }
    errs
}

/// The checks of one provider, `at` its path (`providers[i]`).
fn validate_provider(at: &str, p: &ProviderFile, errs: &mut Vec<String>) {
    validate_provider_name(at, &p.name, errs);
    if p.api_version.is_empty() {
        errs.push(format!(
            "{at}.apiVersion: Required value: apiVersion is required"
        ));
    } else if !SUPPORTED_PLUGIN_API_VERSIONS.contains(&p.api_version.as_str()) {
        errs.push(format!(
            "{at}.apiVersion: Unsupported value: {:?}: supported values: {}",
            p.api_version,
            SUPPORTED_PLUGIN_API_VERSIONS.join(", ")
        ));
    }
    if p.match_images.is_empty() {
        errs.push(format!(
            "{at}.matchImages: Required value: at least 1 item in matchImages is required"
        ));
    }
    for (j, m) in p.match_images.iter().enumerate() {
        if url_match::parse_schemeless(m).is_none() {
            errs.push(format!(
                "{at}.matchImages[{j}]: Invalid value: {m:?}: match image is invalid"
            ));
        }
    }
    match p.default_cache_duration.as_deref() {
        None => errs.push(format!("{at}.defaultCacheDuration: Required value: defaultCacheDuration is required")),
        Some(d) => match crate::format::parse_go_duration(d) {
            Ok(_) => {}
            Err(_) if d.starts_with('-') => errs.push(format!(
                "{at}.defaultCacheDuration: Invalid value: {d:?}: defaultCacheDuration must be greater than or equal to 0"
            )),
            Err(e) => errs.push(format!("{at}.defaultCacheDuration: Invalid value: {d:?}: {e}")),
        },
    }
    for (j, e) in p.env.iter().enumerate() {
        if e.name.is_empty() {
            errs.push(format!("{at}.env[{j}].name: Required value"));
        }
    }
    if let Some(token) = &p.token_attributes {
        validate_token_attributes(&format!("{at}.tokenAttributes"), p, token, errs);
    }
}

/// The checks of a provider's name, `at` the provider's path.
fn validate_provider_name(at: &str, name: &str, errs: &mut Vec<String>) {
    if name.is_empty() {
        errs.push(format!("{at}.name: Required value: name is required"));
    }
    if name.contains('/') {
        errs.push(format!(
            "{at}.name: Invalid value: {name:?}: provider name cannot contain '/'"
        ));
    }
    if name.contains(' ') {
        errs.push(format!(
            "{at}.name: Invalid value: {name:?}: provider name cannot contain spaces"
        ));
    }
    if name == "." || name == ".." {
        errs.push(format!(
            "{at}.name: Invalid value: {name:?}: provider name cannot be '.' or '..'"
        ));
    }
}

const QUALIFIED_NAME_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and \
     must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or \
     '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case \
     alphanumeric characters, '-' or '.', and must start and end with an alphanumeric \
     character (e.g. 'example.com', regex used for validation is \
     '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// apimachinery's `validation.IsQualifiedName`, its messages: `[prefix/]name`, the prefix a
/// lowercase RFC 1123 subdomain (at most 253 characters), the name at most 63 characters of
/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn qualified_name_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                if prefix.len() > 253 {
                    errs.push("prefix part must be no more than 253 characters".to_owned());
                }
                if !is_dns1123_subdomain(prefix) {
                    errs.push(format!("prefix part {DNS1123_SUBDOMAIN_ERR}"));
                }
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {QUALIFIED_NAME_ERR} with an optional DNS subdomain prefix \
                 and '/' (e.g. 'example.com/MyName')"
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_owned());
    }
    if !is_qualified_name_part(name) {
        errs.push(format!("name part {QUALIFIED_NAME_ERR}"));
    }
    errs
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, anchored.
fn is_qualified_name_part(name: &str) -> bool {
    let b = name.as_bytes();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`, anchored.
fn is_dns1123_subdomain(value: &str) -> bool {
    let lower_alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    value.split('.').all(|label| {
        let b = label.as_bytes();
        match (b.first(), b.last()) {
            (Some(first), Some(last)) => {
                lower_alnum(first)
                    && lower_alnum(last)
                    && b.iter().all(|c| lower_alnum(c) || *c == b'-')
            }
            _ => false,
        }
    })
}

/// The cache types of `tokenAttributes.cacheType`, sorted as the kubelet lists them.
const TOKEN_CACHE_TYPES: [&str; 2] = ["ServiceAccount", "Token"];

/// `validateCredentialProviderConfig`'s checks of `tokenAttributes` (`plugin/config.go`), the
/// `KubeletServiceAccountTokenForCredentialProviders` gate on (its default since 1.34).
fn validate_token_attributes(
    at: &str,
    p: &ProviderFile,
    token: &TokenAttributesFile,
    errs: &mut Vec<String>,
) {
    if token.service_account_token_audience.is_empty() {
        errs.push(format!("{at}.serviceAccountTokenAudience: Required value"));
    }
    if token.require_service_account.is_none() {
        errs.push(format!("{at}.requireServiceAccount: Required value"));
    }
    if p.api_version != SUPPORTED_PLUGIN_API_VERSIONS[0] {
        errs.push(format!(
            "{at}: Forbidden: tokenAttributes is only supported for {} API version",
            SUPPORTED_PLUGIN_API_VERSIONS[0]
        ));
    }
    if token.require_service_account == Some(false)
        && !token.required_service_account_annotation_keys.is_empty()
    {
        errs.push(format!(
            "{at}.requiredServiceAccountAnnotationKeys: Forbidden: requireServiceAccount cannot \
             be false when requiredServiceAccountAnnotationKeys is set"
        ));
    }
    for (field, keys) in [
        (
            "requiredServiceAccountAnnotationKeys",
            &token.required_service_account_annotation_keys,
        ),
        (
            "optionalServiceAccountAnnotationKeys",
            &token.optional_service_account_annotation_keys,
        ),
    ] {
        let mut seen = std::collections::BTreeSet::new();
        for key in keys {
            // validateServiceAccountAnnotationKeys: a qualified name, case ignored.
            for message in qualified_name_errors(&key.to_lowercase()) {
                errs.push(format!("{at}.{field}: Invalid value: {key:?}: {message}"));
            }
            if !seen.insert(key) {
                errs.push(format!("{at}.{field}: Duplicate value: {key:?}"));
            }
        }
    }
    let both: Vec<&String> = token
        .required_service_account_annotation_keys
        .iter()
        .filter(|k| token.optional_service_account_annotation_keys.contains(k))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if !both.is_empty() {
        errs.push(format!(
            "{at}: Invalid value: {}: annotation keys cannot be both required and optional",
            serde_json::Value::from(both.iter().map(|k| k.as_str()).collect::<Vec<_>>())
        ));
    }
    if token.cache_type.is_empty() {
        errs.push(format!(
            "{at}.cacheType: Required value: cacheType is required to be set when \
             tokenAttributes is specified. Supported values are: {}",
            TOKEN_CACHE_TYPES.join(", ")
        ));
    } else if !TOKEN_CACHE_TYPES.contains(&token.cache_type.as_str()) {
        errs.push(format!(
            "{at}.cacheType: Unsupported value: {:?}: supported values: \"ServiceAccount\", \
             \"Token\"",
            token.cache_type
        ));
    }
}
