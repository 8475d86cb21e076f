//! The service manager's readiness protocol (systemd's `sd_notify`), written here on std's
//! `UnixDatagram`: when `NOTIFY_SOCKET` is set (a unit with `Type=notify`), each state change
//! is one datagram of `KEY=value` lines sent to that socket — `READY=1` once the database is
//! open and the first detect is done, `RELOADING=1` (with `MONOTONIC_USEC`) and `READY=1`
//! again around a reload, `STOPPING=1` at shutdown, `STATUS=` text along the way.
//!
//! Invariants: a path starting with `/` is a socket file; one starting with `@` names a socket
//! in the abstract namespace (the `@` stands for the leading NUL byte); anything else (unset,
//! empty, another address family) disables notification. Sending never blocks the agent (the
//! socket is non-blocking) and never fails it: an error is returned for the caller to log.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// The environment variable the service manager sets.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// Where the service manager listens, if anywhere.
#[derive(Debug)]
pub struct Notifier {
    target: Option<(UnixDatagram, SocketAddr)>,
}

impl Notifier {
    /// The notifier `NOTIFY_SOCKET` asks for (disabled when it is unset).
    pub fn from_env() -> io::Result<Notifier> {
        Notifier::new(std::env::var_os(NOTIFY_SOCKET).as_deref())
    }

    /// The notifier for a `NOTIFY_SOCKET` value: `/path`, `@abstract-name`, or none.
    pub fn new(value: Option<&OsStr>) -> io::Result<Notifier> {
        let Some(value) = value else {
            return Ok(Notifier::disabled());
        };
        let bytes = value.as_bytes();
        let address = match bytes.first() {
            Some(b'/') => SocketAddr::from_pathname(value)?,
            Some(b'@') => abstract_address(&bytes[1..])?,
            _ => return Ok(Notifier::disabled()),
        };
        let socket = UnixDatagram::unbound()?;
        socket.set_nonblocking(true)?;
        Ok(Notifier {
            target: Some((socket, address)),
        })
    }

    /// A notifier that sends nothing.
    pub fn disabled() -> Notifier {
        Notifier { target: None }
    }

    /// Whether a service manager listens.
    pub fn enabled(&self) -> bool {
        self.target.is_some()
    }

    /// Sends one message and logs a failure instead of returning it: a message the service
    /// manager misses is never fatal to the agent.
    pub fn say(&self, message: &str) {
        if let Err(e) = self.notify(message) {
            tracing::warn!(error = %e, "Could not notify the service manager");
        }
    }

    /// Sends one message (`KEY=value` lines); nothing when disabled.
    pub fn notify(&self, message: &str) -> io::Result<()> {
        let Some((socket, address)) = &self.target else {
            return Ok(());
        };
        let sent = socket.send_to_addr(message.as_bytes(), address)?;
        if sent != message.len() {
            return Err(io::Error::other(format!(
                "sent {sent} of {} bytes",
                message.len()
            )));
        }
        Ok(())
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn abstract_address(name: &[u8]) -> io::Result<SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    SocketAddr::from_abstract_name(name)
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn abstract_address(_name: &[u8]) -> io::Result<SocketAddr> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "abstract unix sockets exist only on Linux",
    ))
}

/// `RELOADING=1` with the monotonic time in microseconds, as the protocol asks of a reload.
pub fn reloading_message() -> String {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid pointer given.
    let usec = if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } == 0 {
        i128::from(ts.tv_sec) * 1_000_000 + i128::from(ts.tv_nsec) / 1_000
    } else {
        0
    };
    format!("RELOADING=1\nMONOTONIC_USEC={usec}")
}

/// One `STATUS=` line: the text on one line (the protocol is line based).
pub fn status(text: &str) -> String {
    let one_line: String = text
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    format!("STATUS={one_line}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn receive(socket: &UnixDatagram) -> String {
        socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut buf = [0u8; 4096];
        let n = socket.recv(&mut buf).expect("a datagram");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[test]
    fn sends_to_a_socket_file_and_to_an_abstract_socket() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("notify.sock");
        let listener = UnixDatagram::bind(&path).expect("bind");
        let notifier = Notifier::new(Some(path.as_os_str())).expect("notifier");
        assert!(notifier.enabled());
        notifier.notify("READY=1").expect("send");
        assert_eq!(receive(&listener), "READY=1");

        let name = format!("imagekeeper-notify-test-{}", std::process::id());
        let listener =
            UnixDatagram::bind_addr(&abstract_address(name.as_bytes()).expect("abstract"))
                .expect("bind abstract");
        let notifier =
            Notifier::new(Some(OsStr::new(&format!("@{name}")))).expect("abstract notifier");
        notifier.notify("STOPPING=1").expect("send");
        assert_eq!(receive(&listener), "STOPPING=1");
    }

    #[test]
    fn unset_empty_or_other_addresses_disable_it() {
        for value in [None, Some(""), Some("vsock:2:1234"), Some("relative/path")] {
            let notifier = Notifier::new(value.map(OsStr::new)).expect("notifier");
            assert!(!notifier.enabled(), "{value:?}");
            notifier
                .notify("READY=1")
                .expect("a disabled notifier sends nothing");
        }
    }

    #[test]
    fn status_is_one_line_and_reloading_carries_the_monotonic_time() {
        assert_eq!(status("a\nb\rc"), "STATUS=a b c");
        let m = reloading_message();
        let usec: i128 = m
            .strip_prefix("RELOADING=1\nMONOTONIC_USEC=")
            .expect("format")
            .parse()
            .expect("a number");
        assert!(usec > 0);
    }
}
