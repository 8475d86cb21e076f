//! Image references as the kubelet reads them: `ParseNormalizedNamed` of Go's
//! `github.com/distribution/reference`, and kubelet's `applyDefaultImageTag`.
//!
//! The grammar of the path, tag and digest is checked by oci-spec's
//! [`oci_spec::distribution::Reference`]; this module wraps it where it differs from
//! distribution/reference: the Docker Hub domain split (`splitDockerDomain`, including "an
//! uppercase first component is a registry"), bracketed IPv6 registries (`[fe80::1]:5000/foo`),
//! the rejection of a bare 64-hex identifier, ASCII-only `\w` in tags, lowercase-hex digests,
//! and Go's error texts.
//!
//! Invariants: [`ImageReference::parse_normalized`] never panics, whatever the input; what it
//! accepts re-serializes with `Display` (`domain/path[:tag][@digest]`, the normalized form) to a
//! string that parses to an equal reference.

use std::fmt;

use crate::format::go_quote;
use oci_spec::distribution::{ParseError as OciParseError, Reference as OciReference};

const DEFAULT_DOMAIN: &str = "docker.io";
const LEGACY_DEFAULT_DOMAIN: &str = "index.docker.io";
const OFFICIAL_REPO_PREFIX: &str = "library/";
const LOCALHOST: &str = "localhost";
/// Kubelet's default tag (`parsers.DefaultImageTag`).
pub const DEFAULT_TAG: &str = "latest";
/// distribution/reference `RepositoryNameTotalLengthMax`.
const NAME_TOTAL_LENGTH_MAX: usize = 255;
/// A domain that oci-spec always takes as a registry and never rewrites; the real domain is
/// checked here and the placeholder only lets oci-spec check the rest.
const PLACEHOLDER_DOMAIN: &str = "placeholder.invalid";

/// Why a string is not an image reference; `Display` is distribution/reference's message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReferenceError {
    #[error("invalid repository name ({0}), cannot specify 64-byte hexadecimal strings")]
    Identifier(String),
    #[error("invalid reference format: repository name ({0}) must be lowercase")]
    RemoteNotLowercase(String),
    #[error("invalid reference format")]
    InvalidFormat,
    #[error("repository name must be lowercase")]
    NameContainsUppercase,
    #[error("repository name must have at least one component")]
    NameEmpty,
    #[error("repository name must not be more than 255 characters")]
    NameTooLong,
    #[error("invalid checksum digest format")]
    DigestInvalidFormat,
    #[error("invalid checksum digest length")]
    DigestInvalidLength,
    #[error("unsupported digest algorithm")]
    DigestUnsupported,
}

impl From<OciParseError> for ReferenceError {
    fn from(e: OciParseError) -> ReferenceError {
        match e {
            OciParseError::DigestInvalidFormat => ReferenceError::DigestInvalidFormat,
            OciParseError::DigestInvalidLength => ReferenceError::DigestInvalidLength,
            OciParseError::DigestUnsupported => ReferenceError::DigestUnsupported,
            OciParseError::NameContainsUppercase => ReferenceError::NameContainsUppercase,
            OciParseError::NameEmpty => ReferenceError::NameEmpty,
            OciParseError::NameTooLong => ReferenceError::NameTooLong,
            OciParseError::ReferenceInvalidFormat | OciParseError::TagInvalidFormat => {
                ReferenceError::InvalidFormat
            }
        }
    }
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
        let oci = OciReference::try_from(format!("{PLACEHOLDER_DOMAIN}/{remainder}"))?;
        if oci.registry() != PLACEHOLDER_DOMAIN {
            // oci-spec keeps a domain with a '.'; anything else means it read the input
            // differently from us, so refuse rather than guess.
            return Err(ReferenceError::InvalidFormat);
        }
        let path = oci.repository().to_owned();
        if !domain_is_domain && domain.len() + 1 + path.len() > NAME_TOTAL_LENGTH_MAX {
            // Go reads a domain that is only a path component as part of the path.
            return Err(ReferenceError::NameTooLong);
        }
        let digest = oci.digest().map(str::to_owned);
        if let Some(d) = &digest {
            let hex = d.split_once(':').map(|(_, h)| h).unwrap_or("");
            if hex.bytes().any(|b| b.is_ascii_uppercase()) {
                // go-digest accepts only lowercase hex for registered algorithms.
                return Err(ReferenceError::DigestInvalidFormat);
            }
        }
        // oci-spec fills in "latest" when neither is given; only an explicit tag counts.
        let explicit_tag = explicit_tag(&remainder);
        Ok(ImageReference {
            domain,
            path,
            tag: explicit_tag,
            digest,
        })
    }

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

    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

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

/// The user-info part of an image name that carries credentials (`user:password@` in
/// `user:password@registry/repo`, with or without a `scheme://`), if any. A digest
/// (`repo@sha256:...`) is not user info.
pub fn credentials_in(image: &str) -> Option<&str> {
    let rest = image.split_once("://").map_or(image, |(_, rest)| rest);
    let host = rest.split('/').next().unwrap_or(rest);
    let (userinfo, after) = host.rsplit_once('@')?;
    let is_digest = after.split_once(':').is_some_and(|(algorithm, hex)| {
        !algorithm.is_empty()
            && algorithm
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+._-".contains(&b))
            && hex.len() >= 32
            && hex.bytes().all(|b| b.is_ascii_hexdigit())
    });
    if is_digest || userinfo.is_empty() {
        return None;
    }
    Some(userinfo)
}

/// `text` with the credentials of `image` (see [`credentials_in`]), as written, as
/// [`go_quote`] escapes them or as `{:?}` escapes them, replaced by `REDACTED`. The one
/// redaction of image names: every path that shows, logs or refuses a name that may carry
/// `user:password@` goes through it ([`redact_image_name`], [`refuse_credentials`], the pull
/// errors, the CLI's failures).
pub fn redact_credentials(text: &str, image: &str) -> String {
    match credentials_in(image) {
        Some(secret) => {
            let quoted = go_quote(secret);
            let quoted = &quoted[1..quoted.len() - 1];
            let debug = format!("{secret:?}");
            let debug = &debug[1..debug.len() - 1];
            text.replace(secret, "REDACTED")
                .replace(quoted, "REDACTED")
                .replace(debug, "REDACTED")
        }
        None => text.to_owned(),
    }
}

/// `image` as it may be shown: its user info (`user:password@`), if any, replaced by
/// `REDACTED` ([`redact_credentials`] of the name itself).
pub fn redact_image_name(image: &str) -> String {
    redact_credentials(image, image)
}

/// An image name that carries user info (`user:password@registry/repo`): refused wherever a
/// name enters (pin, the admin `Pin` call, warm entries, restore, the config file), shown
/// only redacted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{redacted:?}: an image name must not carry credentials (user:password@); give them as a pull secret"
)]
pub struct CredentialsInName {
    /// The name with its user info replaced by `REDACTED`.
    pub redacted: String,
}

/// `Ok` when `image` carries no user info, else the refusal naming it redacted.
pub fn refuse_credentials(image: &str) -> Result<(), CredentialsInName> {
    match credentials_in(image) {
        None => Ok(()),
        Some(_) => Err(CredentialsInName {
            redacted: redact_image_name(image),
        }),
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

#[cfg(test)]
thread_local! {
    /// How many names [`Resolution::of`] parsed on this thread: the warm tests bound it, so a
    /// cost that grows with entries x images (a parse per pair) fails them.
    pub(crate) static PARSES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How a runtime may resolve one reference: its normalized repository (`domain/path`), the
/// repository as written when no registry was named (`pause` for `pause:3.9`, `library/`
/// dropped), and its tag (the default tag when neither tag nor digest is given) or digest.
struct Resolution {
    name: String,
    short_path: Option<String>,
    tag: Option<String>,
    digest: Option<String>,
}

impl Resolution {
    fn of(reference: &str) -> Option<Resolution> {
        #[cfg(test)]
        PARSES.with(|n| n.set(n.get() + 1));
        let r = ImageReference::parse_normalized(reference).ok()?;
        let named_registry = r.domain() != DEFAULT_DOMAIN
            || reference.starts_with("docker.io/")
            || reference.starts_with("index.docker.io/");
        let short_path = (!named_registry).then(|| {
            r.path()
                .strip_prefix(OFFICIAL_REPO_PREFIX)
                .unwrap_or(r.path())
                .to_owned()
        });
        let tag = match (r.tag(), r.digest()) {
            (Some(t), _) => Some(t.to_owned()),
            (None, None) => Some(DEFAULT_TAG.to_owned()),
            (None, Some(_)) => None,
        };
        Some(Resolution {
            name: r.name(),
            short_path,
            tag,
            digest: r.digest().map(str::to_owned),
        })
    }

    /// The path without its registry, `library/` dropped on Docker Hub.
    fn path_without_registry(&self) -> &str {
        let path = self.name.split_once('/').map_or("", |(_, p)| p);
        if self.name.starts_with("docker.io/") {
            path.strip_prefix(OFFICIAL_REPO_PREFIX).unwrap_or(path)
        } else {
            path
        }
    }

    /// Whether `listed` (a repo tag or digest the runtime lists) is what `self` resolves to:
    /// the same repository, or, for a short name, the same path on any registry (a runtime
    /// with unqualified-search registries, such as CRI-O, resolves `pause:3.9` to
    /// `registry.k8s.io/pause:3.9`); then the same digest if one was given, else the same tag.
    fn resolves_to(&self, listed: &Resolution) -> bool {
        let same_repository = self.name == listed.name
            || self
                .short_path
                .as_deref()
                .is_some_and(|p| p == listed.path_without_registry());
        same_repository
            && match &self.digest {
                Some(d) => listed.digest.as_ref() == Some(d),
                None => listed.digest.is_none() && listed.tag == self.tag,
            }
    }
}

/// Whether `name` names `image` the way a runtime resolves names: the image id itself, or a
/// reference that resolves to one of its repo tags or, when it carries a digest, to one of its
/// repo digests (the digest decides when both are given). Used where a name protects an image
/// (the sandbox image, pulls in flight), so a short name errs on the side of matching.
pub fn image_matches(name: &str, image: &impl crate::model::ImageLike) -> bool {
    if name.is_empty() {
        return false;
    }
    if name == image.id() {
        return true;
    }
    let Some(wanted) = Resolution::of(name) else {
        return false;
    };
    let listed = if wanted.digest.is_some() {
        image.repo_digests()
    } else {
        image.repo_tags()
    };
    listed
        .filter_map(Resolution::of)
        .any(|l| wanted.resolves_to(&l))
}

/// The tag or digest a [`MatchKey`] holds: a tag meets only a listed repo tag, a digest only
/// a listed repo digest.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MatchPin {
    Tag(String),
    Digest(String),
}

/// One way a name and an image meet in [`image_matches`]: the image id as written, the
/// normalized repository with its tag or digest, or, for a short name, the path without its
/// registry with its tag or digest. [`wanted_keys`] gives a name's keys and [`listed_keys`] an
/// image's; `image_matches(name, image)` holds exactly when they share one (tested below), so
/// a [`MatchIndex`] of either side finds the other's matches with one lookup per key instead
/// of a parse per pair.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MatchKey {
    Id(String),
    Repository { name: String, pin: MatchPin },
    Path { path: String, pin: MatchPin },
}

/// The keys of a wanted name (see [`MatchKey`]): none for an empty name, its id form, and, when
/// it parses, its repository (and its path, for a short name) with its digest, else its tag
/// (`latest` when it has neither).
pub fn wanted_keys(name: &str) -> Vec<MatchKey> {
    if name.is_empty() {
        return Vec::new();
    }
    let mut keys = vec![MatchKey::Id(name.to_owned())];
    let Some(wanted) = Resolution::of(name) else {
        return keys;
    };
    let pin = match (wanted.digest, wanted.tag) {
        (Some(digest), _) => MatchPin::Digest(digest),
        (None, Some(tag)) => MatchPin::Tag(tag),
        (None, None) => return keys,
    };
    if let Some(path) = wanted.short_path {
        keys.push(MatchKey::Path {
            path,
            pin: pin.clone(),
        });
    }
    keys.push(MatchKey::Repository {
        name: wanted.name,
        pin,
    });
    keys
}

/// The keys of a listed image (see [`MatchKey`]): its id, and for each repo tag without a
/// digest and each repo digest, its repository and its path without the registry, with that
/// tag or digest.
pub fn listed_keys(image: &impl crate::model::ImageLike) -> Vec<MatchKey> {
    let mut keys = vec![MatchKey::Id(image.id().to_owned())];
    let mut add = |listed: Resolution, pin: MatchPin| {
        keys.push(MatchKey::Path {
            path: listed.path_without_registry().to_owned(),
            pin: pin.clone(),
        });
        keys.push(MatchKey::Repository {
            name: listed.name,
            pin,
        });
    };
    for listed in image.repo_tags().filter_map(Resolution::of) {
        if listed.digest.is_none()
            && let Some(tag) = listed.tag.clone()
        {
            add(listed, MatchPin::Tag(tag));
        }
    }
    for listed in image.repo_digests().filter_map(Resolution::of) {
        if let Some(digest) = listed.digest.clone() {
            add(listed, MatchPin::Digest(digest));
        }
    }
    keys
}

/// Names or images by their [`MatchKey`]s and runtime handler, by position: built of one side
/// ([`MatchIndex::of_names`] or [`MatchIndex::of_images`]) and asked with the other. What it
/// answers is exactly what `image_matches` and an equal handler answer, pair by pair; its cost
/// is one parse per name or image name, never one per pair.
#[derive(Clone, Debug, Default)]
pub struct MatchIndex {
    by_key: std::collections::HashMap<(String, MatchKey), Vec<usize>>,
}

impl MatchIndex {
    fn insert(&mut self, handler: &str, keys: Vec<MatchKey>, at: usize) {
        for key in keys {
            let positions = self.by_key.entry((handler.to_owned(), key)).or_default();
            if positions.last() != Some(&at) {
                positions.push(at);
            }
        }
    }

    fn lookup(&self, handler: &str, keys: Vec<MatchKey>) -> Vec<usize> {
        let mut out: Vec<usize> = keys
            .into_iter()
            .filter_map(|key| self.by_key.get(&(handler.to_owned(), key)))
            .flatten()
            .copied()
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// An index of wanted names, each `(name, runtime handler)`, asked with [`Self::naming`].
    pub fn of_names<'a>(names: impl IntoIterator<Item = (&'a str, &'a str)>) -> MatchIndex {
        let mut index = MatchIndex::default();
        for (at, (name, handler)) in names.into_iter().enumerate() {
            index.insert(handler, wanted_keys(name), at);
        }
        index
    }

    /// An index of listed images, asked with [`Self::named_by`].
    pub fn of_images<'a, I: crate::model::ImageLike + 'a>(
        images: impl IntoIterator<Item = &'a I>,
    ) -> MatchIndex {
        let mut index = MatchIndex::default();
        for (at, image) in images.into_iter().enumerate() {
            index.insert(image.runtime_handler(), listed_keys(image), at);
        }
        index
    }

    /// Of an index of names: the positions of the names that name `image`, in order.
    pub fn naming(&self, image: &impl crate::model::ImageLike) -> Vec<usize> {
        self.lookup(image.runtime_handler(), listed_keys(image))
    }

    /// Of an index of images: the positions of the images `name` names under `handler`, in
    /// order.
    pub fn named_by(&self, name: &str, handler: &str) -> Vec<usize> {
        self.lookup(handler, wanted_keys(name))
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    const HEX64: &str = "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff";

    /// (input, Ok((name, tag, digest)) or Err(message)) under ParseNormalizedNamed. Inputs are
    /// distribution/reference's reference_test.go (TestReferenceParse) and normalize_test.go
    /// cases, re-expressed with the Docker Hub normalization applied.
    #[test]
    fn parse_normalized_matches_distribution_reference() {
        type Want<'a> = Result<(&'a str, Option<&'a str>, Option<&'a str>), &'a str>;
        let long_ok = format!("{}a", "a/".repeat(127));
        let long_ok_name = format!("docker.io/{long_ok}");
        let long_bad = format!("{}a:tag", "a/".repeat(128));
        let d256 = format!("sha256:{HEX64}");
        let d512 = format!("sha512:{HEX64}{HEX64}");
        let cases: Vec<(String, Want)> = vec![
            (
                "test_com".into(),
                Ok(("docker.io/library/test_com", None, None)),
            ),
            (
                "test.com:tag".into(),
                Ok(("docker.io/library/test.com", Some("tag"), None)),
            ),
            (
                "test.com:5000".into(),
                Ok(("docker.io/library/test.com", Some("5000"), None)),
            ),
            (
                "test.com/repo:tag".into(),
                Ok(("test.com/repo", Some("tag"), None)),
            ),
            ("test:5000/repo".into(), Ok(("test:5000/repo", None, None))),
            (
                "test:5000/repo:tag".into(),
                Ok(("test:5000/repo", Some("tag"), None)),
            ),
            (
                format!("test:5000/repo@{d256}"),
                Ok(("test:5000/repo", None, Some(&d256))),
            ),
            (
                format!("test:5000/repo:tag@{d256}"),
                Ok(("test:5000/repo", Some("tag"), Some(&d256))),
            ),
            ("".into(), Err("invalid reference format")),
            (":justtag".into(), Err("invalid reference format")),
            (format!("@{d256}"), Err("invalid reference format")),
            (
                "repo@sha256:ffffffffffffffffffffffffffffffffff".into(),
                Err("invalid checksum digest length"),
            ),
            (
                format!("validname@invaliddigest:{HEX64}"),
                Err("unsupported digest algorithm"),
            ),
            (
                "Uppercase:tag".into(),
                Err(
                    "invalid reference format: repository name (library/Uppercase) must be lowercase",
                ),
            ),
            // "Uppercase" is a domain here: an uppercase first component is a registry.
            (
                "Uppercase/lowercase:tag".into(),
                Ok(("Uppercase/lowercase", Some("tag"), None)),
            ),
            (
                "test:5000/Uppercase/lowercase:tag".into(),
                Err(
                    "invalid reference format: repository name (Uppercase/lowercase) must be lowercase",
                ),
            ),
            (
                "lowercase:Uppercase".into(),
                Ok(("docker.io/library/lowercase", Some("Uppercase"), None)),
            ),
            (
                long_bad,
                Err("repository name must not be more than 255 characters"),
            ),
            (
                format!("{long_ok}:tag-puts-this-over-max"),
                Ok((&long_ok_name, Some("tag-puts-this-over-max"), None)),
            ),
            ("aa/asdf$$^/aa".into(), Err("invalid reference format")),
            (
                "sub-dom1.foo.com/bar/baz/quux".into(),
                Ok(("sub-dom1.foo.com/bar/baz/quux", None, None)),
            ),
            (
                "b.gcr.io/test.example.com/my-app:test.example.com".into(),
                Ok((
                    "b.gcr.io/test.example.com/my-app",
                    Some("test.example.com"),
                    None,
                )),
            ),
            (
                format!("xn--7o8h.com/myimage:xn--7o8h.com@{d512}"),
                Ok(("xn--7o8h.com/myimage", Some("xn--7o8h.com"), Some(&d512))),
            ),
            (
                "foo_bar.com:8080".into(),
                Ok(("docker.io/library/foo_bar.com", Some("8080"), None)),
            ),
            (
                "foo/foo_bar.com:8080".into(),
                Ok(("docker.io/foo/foo_bar.com", Some("8080"), None)),
            ),
            (
                "192.168.1.1".into(),
                Ok(("docker.io/library/192.168.1.1", None, None)),
            ),
            (
                "192.168.1.1:5000/repo:5050".into(),
                Ok(("192.168.1.1:5000/repo", Some("5050"), None)),
            ),
            ("[2001:db8::1]".into(), Err("invalid reference format")),
            ("[2001:db8::1]:5000".into(), Err("invalid reference format")),
            (
                "[2001:db8::1]/repo".into(),
                Ok(("[2001:db8::1]/repo", None, None)),
            ),
            (
                "[2001:db8:1:2:3:4:5:6]/repo:tag".into(),
                Ok(("[2001:db8:1:2:3:4:5:6]/repo", Some("tag"), None)),
            ),
            (
                format!("[2001:db8::1]:5000/repo:tag@{d256}"),
                Ok(("[2001:db8::1]:5000/repo", Some("tag"), Some(&d256))),
            ),
            (
                "[::1]:5000/repo".into(),
                Ok(("[::1]:5000/repo", None, None)),
            ),
            (
                "[fe80::1]:5000/foo:bar".into(),
                Ok(("[fe80::1]:5000/foo", Some("bar"), None)),
            ),
            (
                "[fe80::1%eth0]:5000/repo".into(),
                Err("invalid reference format"),
            ),
            (
                "[fe80::1%@invalidzone]:5000/repo".into(),
                Err("invalid reference format"),
            ),
            // normalize_test.go
            (
                "busybox".into(),
                Ok(("docker.io/library/busybox", None, None)),
            ),
            (
                "docker.io/busybox".into(),
                Ok(("docker.io/library/busybox", None, None)),
            ),
            (
                "index.docker.io/busybox:1".into(),
                Ok(("docker.io/library/busybox", Some("1"), None)),
            ),
            ("localhost/foo".into(), Ok(("localhost/foo", None, None))),
            (
                "localhost:5000/foo/bar".into(),
                Ok(("localhost:5000/foo/bar", None, None)),
            ),
            (
                "library/ubuntu".into(),
                Ok(("docker.io/library/ubuntu", None, None)),
            ),
            (
                "dmcgowan/myapp:1.0".into(),
                Ok(("docker.io/dmcgowan/myapp", Some("1.0"), None)),
            ),
            (
                "a__b/c--d/e.f".into(),
                Ok(("docker.io/a__b/c--d/e.f", None, None)),
            ),
            ("a___b".into(), Err("invalid reference format")),
            ("-foo".into(), Err("invalid reference format")),
            ("foo-".into(), Err("invalid reference format")),
            ("foo/".into(), Err("invalid reference format")),
            ("http://url".into(), Err("invalid reference format")),
            (
                "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad".into(),
                Err(
                    "invalid repository name (ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad), cannot specify 64-byte hexadecimal strings",
                ),
            ),
            (
                format!("foo@sha256:{}", HEX64.to_uppercase()),
                Err("invalid checksum digest format"),
            ),
            ("foo:t\u{e4}g".into(), Err("invalid reference format")),
            (
                "Foo_bar/baz".into(),
                Err("repository name must be lowercase"),
            ),
            (
                "foo_bar.com/baz".into(),
                Ok(("foo_bar.com/baz", None, None)),
            ),
        ];
        for (input, want) in cases {
            let got = ImageReference::parse_normalized(&input);
            match (&got, &want) {
                (Ok(r), Ok((name, tag, digest))) => {
                    assert_eq!(r.name(), *name, "name of {input:?}");
                    assert_eq!(r.tag(), *tag, "tag of {input:?}");
                    assert_eq!(r.digest(), *digest, "digest of {input:?}");
                }
                (Err(e), Err(msg)) => assert_eq!(e.to_string(), *msg, "error of {input:?}"),
                _ => panic!("{input:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn default_tag_is_appended_to_the_name_as_written() {
        let d = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        let cases = [
            ("root".to_owned(), "root:latest".to_owned()),
            ("root:tag".to_owned(), "root:tag".to_owned()),
            (format!("root@{d}"), format!("root@{d}")),
            (format!("root:latest@{d}"), format!("root:latest@{d}")),
            ("root:latest".to_owned(), "root:latest".to_owned()),
            ("quay.io/a/b".to_owned(), "quay.io/a/b:latest".to_owned()),
            (
                "[fe80::1]:5000/foo".to_owned(),
                "[fe80::1]:5000/foo:latest".to_owned(),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(apply_default_image_tag(&input), Ok(want), "{input}");
        }
    }

    #[test]
    fn default_tag_error_is_kubelets_message() {
        assert_eq!(
            apply_default_image_tag("FAILED_IMAGE").unwrap_err(),
            "couldn't parse image name \"FAILED_IMAGE\": invalid reference format: repository name (library/FAILED_IMAGE) must be lowercase"
        );
        assert_eq!(
            apply_default_image_tag("http://url").unwrap_err(),
            "couldn't parse image name \"http://url\": invalid reference format"
        );
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        fn reference_like() -> impl Strategy<Value = String> {
            let domain = prop_oneof![
                Just(String::new()),
                "[a-zA-Z0-9][a-zA-Z0-9.-]{0,10}(:[0-9]{1,5})?/",
                "\\[[0-9a-fA-F:]{1,12}\\](:[0-9]{1,4})?/",
                Just("localhost/".to_owned()),
                Just("index.docker.io/".to_owned()),
            ];
            let path = "[a-z0-9]{1,5}([._-]{1,2}[a-z0-9]{1,5}){0,2}(/[a-z0-9_.-]{1,8}){0,3}";
            let tag = prop_oneof![Just(String::new()), ":[A-Za-z0-9_][A-Za-z0-9_.-]{0,10}"];
            let digest = prop_oneof![
                Just(String::new()),
                "@sha256:[a-f0-9]{64}",
                "@sha512:[a-fA-F0-9]{128}",
                "@[a-z]{1,6}:[a-f0-9]{32,40}",
            ];
            (domain, path, tag, digest).prop_map(|(d, p, t, g)| format!("{d}{p}{t}{g}"))
        }

        proptest! {
            #[test]
            fn what_parses_reserializes_to_the_same_reference(s in reference_like()) {
                if let Ok(r) = ImageReference::parse_normalized(&s) {
                    let again = ImageReference::parse_normalized(&r.to_string());
                    prop_assert_eq!(again, Ok(r));
                }
            }

            #[test]
            fn parse_never_panics_on_any_string(s in "\\PC{0,80}") {
                let _ = ImageReference::parse_normalized(&s);
                let _ = apply_default_image_tag(&s);
            }

            #[test]
            fn parse_never_panics_on_ascii_soup(s in "[a-zA-Z0-9:/@._\\[\\]-]{0,60}") {
                if let Ok(r) = ImageReference::parse_normalized(&s) {
                    prop_assert_eq!(ImageReference::parse_normalized(&r.to_string()), Ok(r));
                }
            }
        }
    }

    /// The sandbox image and in-flight pulls are matched as the runtime resolves names.
    #[test]
    fn image_matches_names_as_the_runtime_resolves_them() {
        let digest = format!("sha256:{HEX64}");
        let pause = crate::model::RuntimeImage {
            id: crate::model::ImageId::new("sha256:1111"),
            repo_tags: vec!["registry.k8s.io/pause:3.9".into()],
            repo_digests: vec![format!("registry.k8s.io/pause@{digest}")],
            ..Default::default()
        };
        let busybox = crate::model::RuntimeImage {
            id: crate::model::ImageId::new("sha256:2222"),
            repo_tags: vec!["docker.io/library/busybox:latest".into()],
            ..Default::default()
        };
        let cases: Vec<(String, &crate::model::RuntimeImage, bool)> = vec![
            ("registry.k8s.io/pause:3.9".into(), &pause, true),
            ("registry.k8s.io/pause:3.8".into(), &pause, false),
            (format!("registry.k8s.io/pause@{digest}"), &pause, true),
            (format!("registry.k8s.io/pause:3.8@{digest}"), &pause, true),
            (format!("other.io/pause@{digest}"), &pause, false),
            ("sha256:1111".into(), &pause, true),
            ("pause:3.9".into(), &pause, true),
            ("pause:3.8".into(), &pause, false),
            ("library/pause:3.9".into(), &pause, true),
            ("other.io/pause:3.9".into(), &pause, false),
            ("busybox".into(), &busybox, true),
            ("busybox:latest".into(), &busybox, true),
            ("library/busybox".into(), &busybox, true),
            ("docker.io/busybox:latest".into(), &busybox, true),
            ("busybox:1.35".into(), &busybox, false),
            ("".into(), &busybox, false),
            ("Not A Reference".into(), &busybox, false),
        ];
        for (name, image, want) in cases {
            assert_eq!(
                image_matches(&name, image),
                want,
                "{name} vs {:?}",
                image.repo_tags
            );
        }
    }

    /// `MatchIndex` answers what `image_matches` answers, pair by pair: every name of a pool
    /// (short names, Docker Hub forms, registries, digests, ids, junk) against images listing
    /// one or two of the pool's names as tags or digests, under two handlers.
    #[test]
    fn the_match_index_answers_exactly_what_image_matches_answers() {
        let digest = format!("sha256:{HEX64}");
        let other = format!("sha256:{}", "b".repeat(64));
        let pool: Vec<String> = vec![
            "registry.k8s.io/pause:3.9".into(),
            "registry.k8s.io/pause:3.8".into(),
            format!("registry.k8s.io/pause@{digest}"),
            format!("registry.k8s.io/pause:3.8@{digest}"),
            format!("other.io/pause@{digest}"),
            format!("other.io/pause@{other}"),
            "sha256:1111".into(),
            "pause:3.9".into(),
            "pause".into(),
            "library/pause:3.9".into(),
            "other.io/pause:3.9".into(),
            "busybox".into(),
            "busybox:latest".into(),
            "library/busybox".into(),
            "docker.io/busybox:latest".into(),
            "docker.io/library/busybox:latest".into(),
            "index.docker.io/library/busybox".into(),
            format!("busybox@{digest}"),
            "busybox:1.35".into(),
            "localhost/busybox:1.35".into(),
            "localhost:5000/team/busybox:1.35".into(),
            "team/busybox:1.35".into(),
            String::new(),
            "Not A Reference".into(),
        ];
        let mut images = Vec::new();
        for (i, a) in pool.iter().enumerate() {
            for (j, b) in pool.iter().enumerate().step_by(3) {
                for handler in ["", "runsc"] {
                    let (tags, digests): (Vec<String>, Vec<String>) = if a.contains('@') {
                        (vec![b.clone()], vec![a.clone()])
                    } else {
                        (vec![a.clone(), b.clone()], Vec::new())
                    };
                    images.push(crate::model::RuntimeImage {
                        id: crate::model::ImageId::new(if j == 6 {
                            "sha256:1111".to_owned()
                        } else {
                            format!("sha256:{i}-{j}")
                        }),
                        repo_tags: tags,
                        repo_digests: digests,
                        runtime_handler: handler.into(),
                        ..Default::default()
                    });
                }
            }
        }
        let names: Vec<(&str, &str)> = pool
            .iter()
            .flat_map(|n| [(n.as_str(), ""), (n.as_str(), "runsc")])
            .collect();
        let by_name = MatchIndex::of_names(names.iter().copied());
        let by_image = MatchIndex::of_images(images.iter());
        let mut matched = 0;
        for (n, (name, handler)) in names.iter().enumerate() {
            let want: Vec<usize> = (0..images.len())
                .filter(|&i| {
                    images[i].runtime_handler == *handler && image_matches(name, &images[i])
                })
                .collect();
            matched += want.len();
            assert_eq!(
                by_image.named_by(name, handler),
                want,
                "{name:?} {handler:?}"
            );
            for (i, image) in images.iter().enumerate() {
                assert_eq!(
                    by_name.naming(image).contains(&n),
                    want.contains(&i),
                    "{name:?} {handler:?} vs {:?} {:?}",
                    image.repo_tags,
                    image.repo_digests
                );
            }
        }
        assert!(
            matched > 100,
            "the pool must match often to prove anything: {matched}"
        );
    }

    #[test]
    fn credentials_are_found_in_image_names_and_digests_are_not() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let cases = [
            ("user:s3cret@registry.example/app", Some("user:s3cret")),
            (
                "https://user:s3cret@registry.example:5000/app:1",
                Some("user:s3cret"),
            ),
            ("token@registry.example/app", Some("token")),
            ("user:pw@host", Some("user:pw")),
            ("registry.example/app:1", None),
            ("busybox", None),
            (&*format!("busybox@{digest}"), None),
            (&*format!("busybox:1.36@{digest}"), None),
            (&*format!("registry.example/app@{digest}"), None),
        ];
        for (image, want) in cases {
            assert_eq!(credentials_in(image), want, "{image}");
        }
    }
}
