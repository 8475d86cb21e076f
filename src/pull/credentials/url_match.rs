//! The kubelet keyring's URL matching (`pkg/credentialprovider/keyring.go`: `ParseSchemelessURL`,
//! `SplitURL`, `URLsMatch`): a credential's location is a schemeless URL whose host parts may
//! be globs (`*.example.com`, `prefix.*.io`); it matches an image name when the ports are
//! equal, the hosts have as many dot-separated parts and each part matches its glob
//! (Go's `filepath.Match`), and the location's path is a prefix of the image's.
//!
//! Invariant: matching never fails loudly; a location or name that does not parse (as Go's
//! `url.Parse` would refuse it) or a malformed glob simply does not match, as in the kubelet.

/// A schemeless URL: its host (with port) and its path (`""` or starting with `/`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SchemelessUrl {
    pub host: String,
    pub path: String,
}

/// Go's `url.Parse("https://" + s)` as far as the keyring uses it: user info dropped, the
/// query and fragment cut off; `None` where Go fails (control characters or a space in the
/// host, a port that is not a number).
pub(crate) fn parse_schemeless(s: &str) -> Option<SchemelessUrl> {
    if s.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return None;
    }
    let s = s.split(['?', '#']).next().unwrap_or("");
    let (authority, path) = match s.find('/') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    };
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host.contains(' ') {
        return None;
    }
    if let Some((_, port)) = split_port(host)
        && !port.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    Some(SchemelessUrl {
        host: host.to_owned(),
        path: path.to_owned(),
    })
}

/// Go's `net.SplitHostPort` where it succeeds: `Some((host, port))` for `host:port` and
/// `[v6]:port`.
fn split_port(host: &str) -> Option<(&str, &str)> {
    if let Some(rest) = host.strip_prefix('[') {
        let (addr, after) = rest.split_once(']')?;
        return after.strip_prefix(':').map(|port| (addr, port));
    }
    let (h, port) = host.rsplit_once(':')?;
    if h.contains(':') {
        return None;
    }
    Some((h, port))
}

/// `SplitURL`: the host's dot-separated parts, and the port (`""` when none).
fn split_host(host: &str) -> (Vec<&str>, &str) {
    let (h, port) = split_port(host).unwrap_or((host, ""));
    (h.split('.').collect(), port)
}

/// `URLsMatchStr(glob, target)`.
pub(crate) fn urls_match_str(glob: &str, target: &str) -> bool {
    match (parse_schemeless(glob), parse_schemeless(target)) {
        (Some(g), Some(t)) => urls_match(&g, &t),
        _ => false,
    }
}

/// `URLsMatch`: no wildcards in ports or paths.
pub(crate) fn urls_match(glob: &SchemelessUrl, target: &SchemelessUrl) -> bool {
    let (glob_parts, glob_port) = split_host(&glob.host);
    let (target_parts, target_port) = split_host(&target.host);
    glob_port == target_port
        && glob_parts.len() == target_parts.len()
        && target.path.starts_with(&glob.path)
        && glob_parts
            .iter()
            .zip(&target_parts)
            .all(|(g, t)| glob_match(g.as_bytes(), t.as_bytes()) == Some(true))
}

/// Go's `filepath.Match` on one host part (which holds no `/`): `*`, `?`, `[...]` classes
/// with ranges and `^` negation, `\` escapes; `None` for a malformed pattern.
pub(crate) fn glob_match(pattern: &[u8], name: &[u8]) -> Option<bool> {
    match pattern.split_first() {
        None => Some(name.is_empty()),
        Some((b'*', rest)) => {
            // Every split of `name` (a part holds no separator for `*` to stop at); a
            // malformed rest is an error even when an earlier split already matched.
            let mut matched = false;
            for i in 0..=name.len() {
                if glob_match(rest, &name[i..])? {
                    matched = true;
                }
            }
            Some(matched)
        }
        Some((b'?', rest)) => match name.split_first() {
            Some((_, name_rest)) => glob_match(rest, name_rest),
            None => check_pattern(rest).map(|()| false),
        },
        Some((b'[', rest)) => {
            let (class_matches, after) = match_class(rest, name.first().copied())?;
            match name.split_first() {
                Some((_, name_rest)) if class_matches => glob_match(after, name_rest),
                _ => check_pattern(after).map(|()| false),
            }
        }
        Some((b'\\', rest)) => {
            let (&want, rest) = rest.split_first()?;
            match name.split_first() {
                Some((&got, name_rest)) if got == want => glob_match(rest, name_rest),
                _ => check_pattern(rest).map(|()| false),
            }
        }
        Some((&want, rest)) => match name.split_first() {
            Some((&got, name_rest)) if got == want => glob_match(rest, name_rest),
            _ => check_pattern(rest).map(|()| false),
        },
    }
}

/// `None` when the rest of a pattern is malformed (Go reports ErrBadPattern even after a
/// mismatch).
fn check_pattern(pattern: &[u8]) -> Option<()> {
    glob_match(pattern, b"").map(|_| ())
}

/// A `[...]` class (after its `[`): whether `c` is in it, and the pattern after its `]`.
fn match_class(pattern: &[u8], c: Option<u8>) -> Option<(bool, &[u8])> {
    let (negated, mut p) = match pattern.split_first() {
        Some((b'^', rest)) => (true, rest),
        _ => (false, pattern),
    };
    let mut found = false;
    let mut first = true;
    loop {
        match p.split_first() {
            None => return None,
            Some((b']', rest)) if !first => {
                let hit = c.is_some() && found != negated;
                return Some((hit, rest));
            }
            _ => {}
        }
        first = false;
        let (lo, rest) = class_char(p)?;
        p = rest;
        let mut hi = lo;
        if let Some((b'-', rest)) = p.split_first() {
            let (h, rest) = class_char(rest)?;
            hi = h;
            p = rest;
        }
        if c.is_some_and(|c| lo <= c && c <= hi) {
            found = true;
        }
    }
}

fn class_char(p: &[u8]) -> Option<(u8, &[u8])> {
    match p.split_first()? {
        (b'\\', rest) => rest.split_first().map(|(&c, r)| (c, r)),
        (b'-' | b']', _) => None,
        (&c, rest) => Some((c, rest)),
    }
}
