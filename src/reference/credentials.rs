//! Credentials in an image name (`user:password@registry/repo`): finding them, redacting
//! them wherever a name is shown, and refusing such a name wherever one enters.
//!
//! Invariants: every path that shows, logs or refuses a name that may carry credentials goes
//! through [`redact_credentials`]; a digest (`repo@sha256:...`) is never taken for user info.

use crate::format::go_quote;

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
