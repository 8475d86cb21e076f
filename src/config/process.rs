//! The process-level settings' resolvers: the metrics endpoint's address and the loops'
//! periods (flags only). Invariant: a loop period is at least [`MIN_LOOP_PERIOD`].

use std::net::SocketAddr;
use std::time::Duration;

use super::origin::{duration, invalid};
use super::{ConfigError, FlagValues, MIN_LOOP_PERIOD};

/// The metrics endpoint's address (a flag only).
pub(super) fn resolve_metrics_address(
    flags: &FlagValues,
) -> Result<Option<SocketAddr>, ConfigError> {
    let metrics_address = match &flags.metrics_address {
        None => None,
        Some(a) if a.is_empty() => None,
        Some(a) => Some(parse_host_port(a).map_err(|e| {
            invalid(
                "--metrics-address".to_owned(),
                format!("{a:?} is not HOST:PORT with an IP host: {e}"),
            )
        })?),
    };
    Ok(metrics_address)
}

/// `HOST:PORT` with an IP host: `127.0.0.1:9899`, `[fd00::1]:9899`, and also an IPv6 host
/// without brackets, `fd00::1:9899`, as the DaemonSet's `$(HOST_IP):9899` gives on an IPv6
/// node (the port is what follows the last colon).
pub(crate) fn parse_host_port(a: &str) -> Result<SocketAddr, std::net::AddrParseError> {
    a.parse::<SocketAddr>().or_else(|e| {
        let (host, port) = a.rsplit_once(':').ok_or(e.clone())?;
        match (host.parse::<std::net::Ipv6Addr>(), port.parse::<u16>()) {
            (Ok(ip), Ok(port)) if !host.starts_with('[') => Ok(SocketAddr::from((ip, port))),
            _ => Err(e),
        }
    })
}

/// A loop's period from its flag (at least [`MIN_LOOP_PERIOD`]), else `default`.
pub(super) fn period(
    flag: &Option<String>,
    name: &str,
    default: Duration,
) -> Result<Duration, ConfigError> {
    match flag {
        None => Ok(default),
        Some(v) => {
            let d = duration(v, name)?;
            if d < MIN_LOOP_PERIOD {
                Err(invalid(
                    name.to_owned(),
                    format!("must be at least 1s (got {v:?})"),
                ))
            } else {
                Ok(d)
            }
        }
    }
}

#[cfg(test)]
#[path = "process_tests.rs"]
mod tests;
