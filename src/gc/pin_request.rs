//! The one check of a pin as it is asked for, by `imagekeeper pin` (on the database directly)
//! and by the admin `Pin` call alike, so the socket takes nothing the CLI refuses: a name that
//! is an image reference or an image id, without credentials, control characters or past
//! [`MAX_IMAGE_NAME_BYTES`]; a runtime handler of at most [`MAX_RUNTIME_HANDLER_BYTES`]
//! printable characters; a reason of at most [`MAX_PIN_REASON_BYTES`] without control
//! characters; an expiry that is none ([`UnixNanos::NEVER`]) or after `now`.
//!
//! Invariant: an error never shows a name's credentials (they are redacted by
//! [`crate::reference::redact_image_name`]) and shows a name's control characters escaped.

use crate::model::{MAX_IMAGE_NAME_BYTES, MAX_PIN_REASON_BYTES, PinKey, UnixNanos};
use crate::reference::{CredentialsInName, ImageReference, redact_image_name, refuse_credentials};

/// The longest runtime handler a pin takes: a RuntimeClass handler is a DNS label (63), a
/// subdomain at most 253.
pub const MAX_RUNTIME_HANDLER_BYTES: usize = 253;

/// A pin request refused, naming the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PinRequestError {
    /// The name is empty.
    #[error("IMAGE: the image name is empty")]
    EmptyName,
    /// The name is longer than the cap.
    #[error("IMAGE: an image name is at most {MAX_IMAGE_NAME_BYTES} bytes")]
    NameTooLong,
    /// The name carries credentials.
    #[error("IMAGE: {0}")]
    Credentials(#[from] CredentialsInName),
    #[error(
        "IMAGE {shown}: not an image reference (registry/repo:tag, repo@sha256:...) nor an image id"
    )]
    /// The name is neither an image reference nor an image id.
    NotAName {
        /// The value as the message shows it.
        shown: String,
    },
    #[error(
        "--runtime-handler: at most {MAX_RUNTIME_HANDLER_BYTES} bytes, without spaces or control characters"
    )]
    /// The runtime handler is too long or has spaces or control characters.
    BadHandler,
    /// The reason is too long or has control characters.
    #[error("--reason: at most {MAX_PIN_REASON_BYTES} bytes, without control characters")]
    BadReason,
    /// The reason starts as the pins a KeepSet wrote do (`KeepSet/`), reserved to them.
    #[error("--reason: a reason starting with \"KeepSet/\" is reserved to the pins of KeepSets")]
    ReservedReason,
    #[error("--until: the time {shown} is not in the future")]
    /// The expiry is not in the future.
    NotInFuture {
        /// The value as the message shows it.
        shown: String,
    },
}

/// Whether `name` is an image id: 64 hex digits, or `algorithm:` and at least 32 of them.
fn is_image_id(name: &str) -> bool {
    let hex = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    match name.split_once(':') {
        Some((algorithm, digits)) => {
            !algorithm.is_empty()
                && algorithm
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                && digits.len() >= 32
                && hex(digits)
        }
        None => name.len() == 64 && hex(name),
    }
}

/// Checks a pin as asked for at `now` (see the module's doc).
pub fn check_pin_request(
    key: &PinKey,
    until: UnixNanos,
    reason: &str,
    now: UnixNanos,
) -> Result<(), PinRequestError> {
    check_pin_image(key)?;
    if reason.len() > MAX_PIN_REASON_BYTES || reason.chars().any(char::is_control) {
        return Err(PinRequestError::BadReason);
    }
    if reason.starts_with(crate::gc::KEEPSET_REASON_PREFIX) {
        return Err(PinRequestError::ReservedReason);
    }
    if until != UnixNanos::NEVER && until <= now {
        let shown = if until.0 < 0 {
            format!("{} ns (negative)", until.0)
        } else {
            crate::format::format_rfc3339(until)
        };
        return Err(PinRequestError::NotInFuture { shown });
    }
    Ok(())
}

/// Checks a pin's image name and runtime handler (the part of [`check_pin_request`] a KeepSet's
/// images go through too).
pub fn check_pin_image(key: &PinKey) -> Result<(), PinRequestError> {
    let name = key.image.as_str();
    if name.is_empty() {
        return Err(PinRequestError::EmptyName);
    }
    if name.len() > MAX_IMAGE_NAME_BYTES {
        return Err(PinRequestError::NameTooLong);
    }
    refuse_credentials(name)?;
    if name.chars().any(char::is_control)
        || !(is_image_id(name) || ImageReference::parse_normalized(name).is_ok())
    {
        let shown = format!("{:?}", redact_image_name(name));
        return Err(PinRequestError::NotAName { shown });
    }
    let handler = key.runtime_handler.as_str();
    if handler.len() > MAX_RUNTIME_HANDLER_BYTES
        || handler.chars().any(|c| c.is_control() || c.is_whitespace())
    {
        return Err(PinRequestError::BadHandler);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The time every case is checked at.
    const NOW: UnixNanos = UnixNanos(1_000_000_000_000);

    /// (what, key, until, reason, passes or a part of the refusal)
    type Case<'a> = (&'a str, PinKey, UnixNanos, &'a str, Result<(), &'a str>);

    fn key(image: &str, handler: &str) -> PinKey {
        PinKey::new(image, handler)
    }

    /// Every case passes or is refused with its part, and no refusal shows the secret.
    fn check(cases: Vec<Case>) {
        for (what, key, until, reason, want) in cases {
            let got = check_pin_request(&key, until, reason, NOW).map_err(|e| e.to_string());
            match (want, got) {
                (Ok(()), Ok(())) => {}
                (Err(part), Err(message)) => {
                    assert!(message.contains(part), "{what}: {message}");
                    assert!(!message.contains("S3cret"), "{what}: {message}");
                }
                (want, got) => panic!("{what}: want {want:?}, got {got:?}"),
            }
        }
    }

    // Every field's refusal, and what passes: the same cases for the CLI and the socket.

    #[test]
    fn a_tag_an_image_id_or_a_bare_id_with_a_handler_reason_and_future_expiry_passes() {
        let id64 = "a".repeat(64);
        let sha = format!("sha256:{id64}");
        check(vec![
            (
                "a tag",
                key("registry.example/x:1", ""),
                UnixNanos::NEVER,
                "",
                Ok(()),
            ),
            (
                "an image id",
                key(&sha, ""),
                UnixNanos(NOW.0 + 1),
                "why",
                Ok(()),
            ),
            (
                "a bare id",
                key(&id64, "nvidia"),
                UnixNanos::NEVER,
                "",
                Ok(()),
            ),
        ]);
    }

    #[test]
    fn an_image_name_is_refused_naming_the_image_and_never_showing_a_secret() {
        let long_name = format!("registry.example/{}:1", "a".repeat(MAX_IMAGE_NAME_BYTES));
        check(vec![
            (
                "empty",
                key("", ""),
                UnixNanos::NEVER,
                "",
                Err("IMAGE: the image name is empty"),
            ),
            (
                "long",
                key(&long_name, ""),
                UnixNanos::NEVER,
                "",
                Err("at most 4096 bytes"),
            ),
            (
                "credentials",
                key("user:S3cret@127.0.0.1:5091/y:1", ""),
                UnixNanos::NEVER,
                "",
                Err("\"REDACTED@127.0.0.1:5091/y:1\": an image name must not carry credentials"),
            ),
            (
                "a newline",
                key("x:1\nfake", ""),
                UnixNanos::NEVER,
                "",
                Err("\"x:1\\nfake\": not an image reference"),
            ),
            (
                "an escape",
                key("x\u{1b}[31m:1", ""),
                UnixNanos::NEVER,
                "",
                Err("not an image reference"),
            ),
            (
                "not a name",
                key("Bad Name", ""),
                UnixNanos::NEVER,
                "",
                Err("not an image reference"),
            ),
        ]);
    }

    #[test]
    fn a_long_or_unprintable_handler_or_reason_is_refused_naming_its_flag() {
        let long_handler = "h".repeat(MAX_RUNTIME_HANDLER_BYTES + 1);
        let long_reason = "r".repeat(MAX_PIN_REASON_BYTES + 1);
        check(vec![
            (
                "long handler",
                key("x:1", &long_handler),
                UnixNanos::NEVER,
                "",
                Err("--runtime-handler"),
            ),
            (
                "handler newline",
                key("x:1", "a\nb"),
                UnixNanos::NEVER,
                "",
                Err("--runtime-handler"),
            ),
            (
                "long reason",
                key("x:1", ""),
                UnixNanos::NEVER,
                &long_reason,
                Err("--reason"),
            ),
            (
                "reason escape",
                key("x:1", ""),
                UnixNanos::NEVER,
                "a\u{1b}[2J",
                Err("--reason"),
            ),
            (
                "a KeepSet's reason",
                key("x:1", ""),
                UnixNanos::NEVER,
                "KeepSet/gpu-rollout",
                Err("reserved to the pins of KeepSets"),
            ),
        ]);
    }

    #[test]
    fn an_expiry_now_or_past_or_negative_is_refused_as_not_in_the_future() {
        check(vec![
            (
                "past",
                key("x:1", ""),
                UnixNanos(NOW.0 - 1),
                "",
                Err("is not in the future"),
            ),
            ("now", key("x:1", ""), NOW, "", Err("is not in the future")),
            (
                "negative",
                key("x:1", ""),
                UnixNanos(-5),
                "",
                Err("-5 ns (negative) is not in the future"),
            ),
        ]);
    }
}
