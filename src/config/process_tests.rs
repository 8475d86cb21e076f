//! Tests of the process-level settings.

use super::*;

#[test]
fn a_host_port_takes_an_ipv6_host_with_or_without_brackets() {
    let ok = [
        ("127.0.0.1:9899", "127.0.0.1:9899"),
        ("[fd00::1]:9899", "[fd00::1]:9899"),
        ("fd00::1:9899", "[fd00::1]:9899"),
        ("::1:9898", "[::1]:9898"),
    ];
    for (given, want) in ok {
        assert_eq!(
            parse_host_port(given).map(|a| a.to_string()).as_deref(),
            Ok(want),
            "{given}"
        );
    }
    for bad in [
        "localhost:9899",
        "fd00::1",
        "127.0.0.1",
        "[fd00::1:9899",
        "1.2.3.4:x",
    ] {
        assert!(parse_host_port(bad).is_err(), "{bad}");
    }
}
