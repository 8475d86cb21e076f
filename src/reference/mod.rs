//! Image references as the kubelet reads them: `ParseNormalizedNamed` of Go's
//! `github.com/distribution/reference`, and kubelet's `applyDefaultImageTag`.
//!
//! Written by hand from distribution/reference's grammar (`regexp.go`: `ReferenceRegexp`, its
//! domain, path component, tag and digest classes; `normalize.go`: `splitDockerDomain`,
//! including "an uppercase first component is a registry"; bracketed IPv6 registries such as
//! `[fe80::1]:5000/foo`), with go-digest's checks of a digest's algorithm and length, the
//! rejection of a bare 64-hex identifier, ASCII-only `\w` in tags, lowercase-hex digests, and
//! Go's error texts. No regular expression: a compiled reference regex held about 8 MiB for
//! the agent's life (it was oci-spec's, until `scripts/bench --signals` found it).
//!
//! Invariants: [`ImageReference::parse_normalized`] never panics, whatever the input; what it
//! accepts re-serializes with `Display` (`domain/path[:tag][@digest]`, the normalized form) to a
//! string that parses to an equal reference.
//!
//! Beside the parse: `credentials` (user info in a name: found, redacted, refused) and
//! `matching` (whether a name names an image as a runtime resolves it, and [`MatchIndex`]).
//! A leaf: it imports only `model` and `format`, and every layer that names images uses it.

use std::fmt;

use crate::format::go_quote;

mod credentials;
mod matching;
#[cfg(test)]
mod tests;

pub use credentials::{
    CredentialsInName, credentials_in, redact_credentials, redact_image_name, refuse_credentials,
};
#[cfg(test)]
pub(crate) use matching::PARSES;
pub use matching::{MatchIndex, MatchKey, MatchPin, image_matches, listed_keys, wanted_keys};

const DEFAULT_DOMAIN: &str = "docker.io";
const LEGACY_DEFAULT_DOMAIN: &str = "index.docker.io";
const OFFICIAL_REPO_PREFIX: &str = "library/";
const LOCALHOST: &str = "localhost";
/// Kubelet's default tag (`parsers.DefaultImageTag`).
pub const DEFAULT_TAG: &str = "latest";
/// distribution/reference `RepositoryNameTotalLengthMax`.
const NAME_TOTAL_LENGTH_MAX: usize = 255;

/// Why a string is not an image reference; `Display` is distribution/reference's message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReferenceError {
    /// The name is a bare 64-hex identifier.
    #[error("invalid repository name ({0}), cannot specify 64-byte hexadecimal strings")]
    Identifier(String),
    /// The repository is not lower case.
    #[error("invalid reference format: repository name ({0}) must be lowercase")]
    RemoteNotLowercase(String),
    /// The reference does not parse.
    #[error("invalid reference format")]
    InvalidFormat,
    /// The name has upper-case letters.
    #[error("repository name must be lowercase")]
    NameContainsUppercase,
    /// The name is empty.
    #[error("repository name must have at least one component")]
    NameEmpty,
    /// The name is too long.
    #[error("repository name must not be more than 255 characters")]
    NameTooLong,
    /// The digest does not parse.
    #[error("invalid checksum digest format")]
    DigestInvalidFormat,
    /// The digest has the wrong length.
    #[error("invalid checksum digest length")]
    DigestInvalidLength,
    /// The digest's algorithm is not supported.
    #[error("unsupported digest algorithm")]
    DigestUnsupported,
}

/// A named reference in distribution/reference's normalized form.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ImageReference {
    domain: String,
    path: String,
    tag: Option<String>,
    digest: Option<String>,
}

impl ImageReference {
    /// Go's `reference.ParseNormalizedNamed`: `busybox` becomes `docker.io/library/busybox`.
    pub fn parse_normalized(s: &str) -> Result<ImageReference, ReferenceError> {
        if is_identifier(s) {
            return Err(ReferenceError::Identifier(s.to_owned()));
        }
        let (domain, remainder) = split_docker_domain(s);
        let remote = remainder.split(':').next().unwrap_or("");
        if remote.to_lowercase() != remote {
            return Err(ReferenceError::RemoteNotLowercase(remote.to_owned()));
        }
        // distribution/reference's classes are all ASCII; Rust's `\w` is not.
        if !s.is_ascii() {
            return Err(ReferenceError::InvalidFormat);
        }
        let domain_is_domain = is_domain_and_port(&domain);
        if !domain_is_domain && !is_path_component(&domain) {
            let lower = domain.to_ascii_lowercase();
            if lower != domain && (is_domain_and_port(&lower) || is_path_component(&lower)) {
                return Err(ReferenceError::NameContainsUppercase);
            }
            return Err(ReferenceError::InvalidFormat);
        }
        let (path, digest) = split_remainder(&remainder)?;
        let path = path.to_owned();
        if !domain_is_domain && domain.len() + 1 + path.len() > NAME_TOTAL_LENGTH_MAX {
            // Go reads a domain that is only a path component as part of the path.
            return Err(ReferenceError::NameTooLong);
        }
        let digest = digest.map(str::to_owned);
        if let Some(d) = &digest {
            let hex = d.split_once(':').map(|(_, h)| h).unwrap_or("");
            if hex.bytes().any(|b| b.is_ascii_uppercase()) {
                // go-digest accepts only lowercase hex for registered algorithms.
                return Err(ReferenceError::DigestInvalidFormat);
            }
        }
        // Only an explicit tag counts ("latest" is the kubelet's default, not the name's).
        let explicit_tag = explicit_tag(&remainder);
        Ok(ImageReference {
            domain,
            path,
            tag: explicit_tag,
            digest,
        })
    }

    /// The registry domain.
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// The path after the domain, e.g. `library/busybox`.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The full name `domain/path`, Go's `Named.Name()`.
    pub fn name(&self) -> String {
        format!("{}/{}", self.domain, self.path)
    }

    /// The tag, if any.
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// The digest, if any.
    pub fn digest(&self) -> Option<&str> {
        self.digest.as_deref()
    }
}

impl fmt::Display for ImageReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.domain, self.path)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

/// Kubelet's `applyDefaultImageTag`: the image as written, with `:latest` appended when it has
/// neither tag nor digest. The error is kubelet's `couldn't parse image name %q: %v`.
pub fn apply_default_image_tag(image: &str) -> Result<String, String> {
    let named = ImageReference::parse_normalized(image)
        .map_err(|e| format!("couldn't parse image name {}: {e}", go_quote(image)))?;
    let tag = match (named.tag(), named.digest()) {
        (Some(t), _) => t.to_owned(),
        (None, None) => DEFAULT_TAG.to_owned(),
        (None, Some(_)) => String::new(),
    };
    if named.digest().is_none() && !tag.is_empty() && !image.ends_with(&format!(":{tag}")) {
        return Ok(format!("{image}:{tag}"));
    }
    Ok(image.to_owned())
}

/// `^[a-f0-9]{64}$`.
fn is_identifier(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// distribution/reference `splitDockerDomain`.
fn split_docker_domain(name: &str) -> (String, String) {
    let Some((maybe_domain, maybe_remote)) = name.split_once('/') else {
        return (
            DEFAULT_DOMAIN.to_owned(),
            format!("{OFFICIAL_REPO_PREFIX}{name}"),
        );
    };
    let (domain, mut remote) = if maybe_domain == LOCALHOST {
        (maybe_domain.to_owned(), maybe_remote.to_owned())
    } else if maybe_domain == LEGACY_DEFAULT_DOMAIN {
        (DEFAULT_DOMAIN.to_owned(), maybe_remote.to_owned())
    } else if maybe_domain.contains(['.', ':']) || maybe_domain.to_lowercase() != maybe_domain {
        (maybe_domain.to_owned(), maybe_remote.to_owned())
    } else {
        (DEFAULT_DOMAIN.to_owned(), name.to_owned())
    };
    if domain == DEFAULT_DOMAIN && !remote.contains('/') {
        remote = format!("{OFFICIAL_REPO_PREFIX}{remote}");
    }
    (domain, remote)
}

/// `ReferenceRegexp` after the domain, `path [':' tag] ['@' digest]`, then go-digest's
/// check of the digest: the path and the digest as written. A path or digest that does not
/// read is `InvalidFormat`; a path over 255 characters `NameTooLong`; a digest of an
/// algorithm other than sha256, sha384 and sha512 `DigestUnsupported`, of the wrong length
/// for its algorithm `DigestInvalidLength`.
fn split_remainder(remainder: &str) -> Result<(&str, Option<&str>), ReferenceError> {
    // No class of the path or tag holds '@', and none of the path holds ':'.
    let (name, digest) = match remainder.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (remainder, None),
    };
    let (path, tag) = match name.split_once(':') {
        Some((path, tag)) => (path, Some(tag)),
        None => (name, None),
    };
    if !path.split('/').all(is_path_component)
        || !tag.is_none_or(is_tag)
        || !digest.is_none_or(is_digest)
    {
        return Err(ReferenceError::InvalidFormat);
    }
    if path.len() > NAME_TOTAL_LENGTH_MAX {
        return Err(ReferenceError::NameTooLong);
    }
    if let Some(digest) = digest {
        let (algorithm, hex) = digest
            .split_once(':')
            .ok_or(ReferenceError::DigestInvalidFormat)?;
        let want = match algorithm {
            "sha256" => 64,
            "sha384" => 96,
            "sha512" => 128,
            _ => return Err(ReferenceError::DigestUnsupported),
        };
        if hex.len() != want {
            return Err(ReferenceError::DigestInvalidLength);
        }
    }
    Ok((path, digest))
}

/// `tag`: `[\w][\w.-]{0,127}` (ASCII `\w`).
fn is_tag(tag: &str) -> bool {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let b = tag.as_bytes();
    b.first().is_some_and(|f| word(*f))
        && b.len() <= 128
        && b.iter().all(|x| word(*x) || *x == b'.' || *x == b'-')
}

/// `digest`: `algorithm ':' hex`, the algorithm
/// `[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*`, the hex `[[:xdigit:]]{32,}`.
fn is_digest(digest: &str) -> bool {
    let Some((algorithm, hex)) = digest.split_once(':') else {
        return false;
    };
    let component = |c: &str| {
        let b = c.as_bytes();
        b.first().is_some_and(u8::is_ascii_alphabetic) && b.iter().all(u8::is_ascii_alphanumeric)
    };
    algorithm.split(['-', '_', '+', '.']).all(component)
        && hex.len() >= 32
        && hex.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The tag as written after the last path component, if any.
fn explicit_tag(remainder: &str) -> Option<String> {
    let before_digest = remainder.split('@').next().unwrap_or("");
    let last = before_digest.rsplit('/').next().unwrap_or("");
    last.split_once(':').map(|(_, t)| t.to_owned())
}

/// `domainAndPort`: (domain-name | `[` ipv6 `]`) [`:` port].
fn is_domain_and_port(s: &str) -> bool {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let Some(end) = rest.find(']') else {
            return false;
        };
        let addr = &rest[..end];
        if addr.is_empty() || !addr.bytes().all(|b| b.is_ascii_hexdigit() || b == b':') {
            return false;
        }
        (None, &rest[end + 1..])
    } else {
        match s.find(':') {
            Some(i) => (Some(&s[..i]), &s[i..]),
            None => (Some(s), ""),
        }
    };
    if let Some(host) = host
        && !host.split('.').all(is_domain_component)
    {
        return false;
    }
    match port.strip_prefix(':') {
        None => port.is_empty(),
        Some(digits) => !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()),
    }
}

/// `[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]`.
fn is_domain_component(c: &str) -> bool {
    let b = c.as_bytes();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && b.iter().all(|x| x.is_ascii_alphanumeric() || *x == b'-')
        }
        _ => false,
    }
}

/// `pathComponent`: `[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*`.
fn is_path_component(c: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let b = c.as_bytes();
    let mut i = 0;
    loop {
        let start = i;
        while i < b.len() && alnum(b[i]) {
            i += 1;
        }
        if i == start {
            return false;
        }
        if i == b.len() {
            return true;
        }
        let sep_start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &c[sep_start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-');
        if !ok {
            return false;
        }
    }
}
