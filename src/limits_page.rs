//! Test only: the book's reliability limits page (`docs/src/reference/limits.md`) states every
//! limit with the number the code keeps, so a limit changed in the code and not on the page (or
//! one the page leaves out) fails here rather than misleading an operator.

use std::time::Duration;

/// `n` with a comma between each group of three digits, as the page writes byte counts.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn mib(bytes: u64) -> String {
    assert_eq!(bytes % (1 << 20), 0, "{bytes} is a whole number of MiB");
    format!("{} MiB", bytes >> 20)
}

fn secs(d: Duration) -> String {
    format!("{} s", d.as_secs())
}

#[test]
fn the_limits_page_states_every_limit_with_the_codes_number() {
    let page = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/reference/limits.md"),
    )
    .expect("docs/src/reference/limits.md");
    // The page wraps lines: compare with white space runs as one space.
    let page = page.split_whitespace().collect::<Vec<_>>().join(" ");
    let file = crate::operator_file::MAX_OPERATOR_FILE_BYTES;
    let metrics = crate::telemetry::HttpLimits::default();
    let probes = crate::telemetry::HttpLimits::probes();
    let admin = crate::admin::AdminLimits::default();
    let trace = crate::replay::MAX_TRACE_LINE_BYTES as u64;
    let plugin = crate::pull::credentials::plugin::MAX_PLUGIN_STDOUT_BYTES as u64;
    let intent_age = crate::kubelet::DEFAULT_INTENT_MAX_AGE;
    let expected = [
        format!("at most **{}** ({} bytes", mib(file), grouped(file)),
        format!(
            "nested at most **{}** deep",
            crate::operator_file::MAX_NESTING_DEPTH
        ),
        format!(
            "**{}** connections, **{}** per remote IP, **{}** for a request head of at most **{} KiB**, **{}** to take the response",
            metrics.max_connections,
            metrics.max_connections_per_ip,
            secs(metrics.head_timeout),
            crate::telemetry::MAX_HEAD_BYTES / 1024,
            secs(metrics.write_timeout),
        ),
        format!(
            "its own **{}** connections (**{}** per address, below its slots), {} head, {} response",
            probes.max_connections,
            probes.max_connections_per_ip,
            secs(probes.head_timeout),
            secs(probes.write_timeout),
        ),
        format!(
            "an answer at most **{}** (the CLI reads that much)",
            mib(crate::admin::MAX_ANSWER_BYTES as u64)
        ),
        format!(
            "a message at most **{}** and a call **{}**",
            mib(crate::cri::MAX_MESSAGE_BYTES as u64),
            secs(crate::cri::CriConfig::default().call_timeout),
        ),
        #[cfg(feature = "kube")]
        format!(
            "read up to **{}** of body, and one publish (request and answer) has **{}**",
            mib(crate::telemetry::EventLimits::default().max_response_bytes as u64),
            secs(crate::telemetry::EventLimits::default().response_deadline),
        ),
        format!(
            "**{}** connections (more are closed at once",
            admin.max_connections
        ),
        format!("idle ones closed after **{}**", secs(admin.idle_timeout)),
        format!(
            "image name is at most **{}** bytes, a pod UID **{}**, a pin's reason **{}**",
            crate::model::MAX_IMAGE_NAME_BYTES,
            crate::model::MAX_POD_UID_BYTES,
            crate::model::MAX_PIN_REASON_BYTES,
        ),
        format!(
            "**Pins**: at most **{}** pins in force",
            grouped(crate::model::MAX_ACTIVE_PINS as u64)
        ),
        format!(
            "a line of at most **{}** ({} bytes",
            mib(trace),
            grouped(trace)
        ),
        format!(
            "each record file at most **{}**",
            mib(crate::kubelet::MAX_RECORD_FILE_BYTES)
        ),
        format!(
            "past **{}** bad files remembered",
            grouped(crate::kubelet::MAX_WARNED_FILES as u64)
        ),
        format!(
            "(default **{}h**, at least {}m)",
            intent_age.as_secs() / 3600,
            crate::config::MIN_INTENT_MAX_AGE.as_secs() / 60
        ),
        format!(
            "at most **{}** of stdout (\"the plugin's stdout is too large\"), **{} min** per run",
            mib(plugin),
            crate::pull::credentials::plugin::DEFAULT_PLUGIN_TIMEOUT.as_secs() / 60
        ),
        format!("at most **{}** `*.conf` files", crate::doctor::MAX_DROP_INS),
        format!(
            "**Warm set**: at most **{}** entries (the config file's `[[warm]]` tables and the \
             directory's files together) from at most **{}** files in `warmSetDir`",
            grouped(crate::warm::MAX_WARM_ENTRIES as u64),
            crate::warm::MAX_WARM_FILES
        ),
        format!(
            "the same cap, and at most **{}** in all",
            mib(crate::replay::MAX_PIPED_TRACE_BYTES)
        ),
        format!(
            "**Workload** (`simulate`): at most **{}** in all, a line at most **{} KiB**",
            mib(crate::workload::MAX_WORKLOAD_BYTES),
            crate::workload::MAX_WORKLOAD_LINE_BYTES / 1024
        ),
        format!(
            "A policy's simulation takes at most **{}** steps",
            grouped(crate::simulate::MAX_SIMULATED_STEPS)
        ),
    ];
    let missing: Vec<&String> = expected.iter().filter(|e| !page.contains(*e)).collect();
    assert!(
        missing.is_empty(),
        "docs/src/reference/limits.md does not state: {missing:#?}"
    );
}
