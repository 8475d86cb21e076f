//! The alerting rules and the dashboard (`deploy/monitoring/`) against the real tools:
//! `promtool check rules` and `promtool test rules` (the unit tests beside the rules), and a
//! real Prometheus (Debian's, installed by scripts/tools) scraping a real agent process every
//! second with the rules loaded: every query of every dashboard panel returns data through
//! Prometheus' HTTP API (`$instance` as `.*`, `$__rate_interval` as `1m`), and three alerts
//! fire for real conditions the agent is put in (GC that cannot free enough on a disk above the
//! high threshold: `ImagekeeperGCFailing` and `ImagekeeperImageFsAboveHighThreshold`; a warm set
//! entry that does not fit under the low threshold: `ImagekeeperWarmImagesDoNotFit`).
//!
//! The agent runs against the in-process fake CRI runtime (this test is about what Prometheus
//! sees, not about CRI), whose image filesystem is the host's temp dir, statvfs'd for real. In
//! the copy of the rules that the server loads, each `for:` is 0s: waiting 5 to 15 minutes would
//! prove nothing the promtool unit tests do not (they pin every `for:`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use imagekeeper::model::{ContainerState, ImageId, RuntimeContainer, RuntimeImage};

use crate::support::agent::AgentFixture;
use crate::support::{self, metrics_address_from_stderr, wait_for};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

#[test]
fn the_rules_pass_promtool_check_and_their_unit_tests() {
    let Some(promtool) = support::tool(
        "monitoring::the_rules_pass_promtool_check_and_their_unit_tests",
        "promtool",
        "IMAGEKEEPER_PROMTOOL",
    ) else {
        return;
    };
    // Every alert the rules file must have, and each one pinned by a unit test in which it
    // fires (promtool passes a test file that never names an alert).
    let rules: serde_yaml_ng::Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(repo("deploy/monitoring/imagekeeper-rules.yaml")).expect("rules"),
    )
    .expect("rules YAML");
    let alerts: Vec<&str> = rules["groups"]
        .as_sequence()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_sequence().expect("rules"))
        .filter_map(|r| r["alert"].as_str())
        .collect();
    for want in [
        "ImagekeeperGCFailing",
        "ImagekeeperStoreUnhealthy",
        "ImagekeeperImageFsAboveHighThreshold",
        "ImagekeeperRepullRegretHigh",
        "ImagekeeperWarmImagesDoNotFit",
        "ImagekeeperAbsent",
    ] {
        assert!(alerts.contains(&want), "no alert {want} in {alerts:?}");
    }
    let tests: serde_yaml_ng::Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(repo("deploy/monitoring/imagekeeper-rules_test.yaml"))
            .expect("rule tests"),
    )
    .expect("rule tests YAML");
    let fired: Vec<&str> = tests["tests"]
        .as_sequence()
        .expect("tests")
        .iter()
        .filter_map(|t| t["alert_rule_test"].as_sequence())
        .flatten()
        .filter(|t| t["exp_alerts"].as_sequence().is_some_and(|a| !a.is_empty()))
        .filter_map(|t| t["alertname"].as_str())
        .collect();
    for alert in &alerts {
        assert!(
            fired.contains(alert),
            "no unit test in imagekeeper-rules_test.yaml makes {alert} fire"
        );
    }
    for args in [
        ["check", "rules", "imagekeeper-rules.yaml"],
        ["test", "rules", "imagekeeper-rules_test.yaml"],
    ] {
        let out = Command::new(&promtool)
            .args(args)
            .current_dir(repo("deploy/monitoring"))
            .output()
            .expect("promtool");
        assert!(
            out.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A child process killed on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `%XX` for everything but unreserved characters (a query string's value).
fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The JSON body of a GET to Prometheus' API, or None while it does not answer.
fn prometheus_get(address: &str, path: &str) -> Option<serde_json::Value> {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(address).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: prometheus\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = Vec::new();
    conn.read_to_end(&mut out).ok()?;
    let text = String::from_utf8_lossy(&out);
    let (_, body) = text.split_once("\r\n\r\n")?;
    // Prometheus answers small bodies with Content-Length, never chunked, to Connection: close.
    serde_json::from_str(body).ok()
}

/// Starts Prometheus on a free loopback port. Prometheus cannot bind port 0 and say which it
/// got, so a port is chosen and the start retried on another if that one was taken meanwhile.
fn start_prometheus(prometheus: &Path, config: &Path, data: &Path) -> (Killed, String) {
    for _ in 0..5 {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            listener.local_addr().expect("address").port()
        };
        let address = format!("127.0.0.1:{port}");
        let mut child = Command::new(prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address={address}"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn prometheus");
        // Ready when /-/ready answers 200 (no signal to wait on: a poll, guarded by a
        // deadline), or the process exits (the port was taken): then try another.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            if let Ok(mut conn) = std::net::TcpStream::connect(&address) {
                use std::io::{Read, Write};
                let _ = write!(
                    conn,
                    "GET /-/ready HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n"
                );
                let mut out = String::new();
                let _ = conn.read_to_string(&mut out);
                if out.starts_with("HTTP/1.1 200") {
                    return (Killed(child), address);
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "prometheus did not become ready within 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut log = String::new();
        if let Some(mut stderr) = child.stderr.take() {
            use std::io::Read;
            let _ = stderr.read_to_string(&mut log);
        }
        assert!(
            log.contains("address already in use"),
            "prometheus exited: {log}"
        );
    }
    panic!("no free port for prometheus in 5 tries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_answers_every_dashboard_query_and_fires_three_alerts() {
    let test = "monitoring::a_real_prometheus_answers_every_dashboard_query_and_fires_three_alerts";
    let Some(prometheus) = support::tool(test, "prometheus", "IMAGEKEEPER_PROMETHEUS") else {
        return;
    };
    // A node whose one image is in use by a running container, on a disk above the high
    // threshold of 1 %: every GC cycle fails to free what it must; and a warm set (a mounted
    // ConfigMap's directory) whose one image is missing and cannot fit under the low threshold
    // of 0 %: the warm cycle never pulls it.
    let AgentFixture { fake, .. } = AgentFixture::builder()
        .images([RuntimeImage {
            id: ImageId::new("sha256:aaa"),
            repo_tags: vec!["registry.example/a:1".to_owned()],
            size: 1000,
            ..RuntimeImage::default()
        }])
        .image_fs_used(1500)
        .start()
        .await;
    fake.set_containers(vec![RuntimeContainer {
        id: "c1".into(),
        pod_sandbox_id: "pod".into(),
        image: "registry.example/a:1".into(),
        image_id: ImageId::new("sha256:aaa"),
        state: ContainerState::Running,
        runtime_handler: String::new(),
    }]);
    fake.add_pullable(
        "registry.example/b:1",
        RuntimeImage {
            id: ImageId::new("sha256:bbb"),
            repo_tags: vec!["registry.example/b:1".to_owned()],
            size: 500,
            ..RuntimeImage::default()
        },
    );
    scrape_and_check(
        &prometheus,
        &["--container-runtime-endpoint".to_owned(), fake.endpoint()],
        "registry.example/b:1",
        &[
            "ImagekeeperGCFailing",
            "ImagekeeperImageFsAboveHighThreshold",
            "ImagekeeperWarmImagesDoNotFit",
        ],
    )
    .await;
}

/// Runs the agent with `args` (and a GC every second above a high threshold of 1 % down to 0,
/// a warm set whose one image cannot fit), pulls `pull` through it, starts Prometheus
/// scraping it with the rules (each `for:` 0s), and asserts that every dashboard panel's query
/// has data and that every alert of `expected` fires, and neither agent-down alert.
async fn scrape_and_check(prometheus: &Path, args: &[String], pull: &str, expected: &[&str]) {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("records.redb");
    let socket = dir.path().join("admin.sock");
    let warm_dir = dir.path().join("warm");
    std::fs::create_dir(&warm_dir).expect("mkdir warm");
    std::fs::write(
        warm_dir.join("node.yaml"),
        "warm:\n  - image: registry.example/model:1\n    size: 100Mi\n",
    )
    .expect("write the warm set");
    let mut agent = Command::new(env!("CARGO_BIN_EXE_imagekeeper"))
        .arg("run")
        .args(args)
        .args([
            "--db",
            db.to_str().expect("utf8"),
            "--admin-socket",
            socket.to_str().expect("utf8"),
            "--metrics-address",
            "127.0.0.1:0",
            "--gc-period",
            "1s",
            "--image-gc-high-threshold",
            "1",
            "--image-gc-low-threshold",
            "0",
            "--minimum-image-ttl-duration=0s",
            "--warm-set-dir",
            warm_dir.to_str().expect("utf8"),
        ])
        .env_remove("IMAGEKEEPER_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn agent");
    let stderr = agent.stderr.take().expect("piped");
    let agent = Killed(agent);
    let metrics = metrics_address_from_stderr(stderr, Duration::from_secs(60)).await;
    // A pull through the agent, so the pull histogram has a series.
    let out = support::bin::output(
        support::bin::imagekeeper()
            .args(["pull", pull, "--admin-socket"])
            .arg(&socket),
    );
    assert!(out.status.success(), "pull: {out:?}");

    let rules =
        std::fs::read_to_string(repo("deploy/monitoring/imagekeeper-rules.yaml")).expect("rules");
    let rules: String = rules
        .lines()
        .map(|line| {
            if line.trim_start().starts_with("for: ") {
                let indent = &line[..line.len() - line.trim_start().len()];
                format!("{indent}for: 0s\n")
            } else {
                format!("{line}\n")
            }
        })
        .collect();
    std::fs::write(dir.path().join("rules.yaml"), rules).expect("write rules");
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: imagekeeper\n    static_configs:\n      - targets: ['{metrics}']\n",
            dir.path().join("rules.yaml").display()
        ),
    )
    .expect("write config");
    let (_prometheus, address) = start_prometheus(prometheus, &config, &dir.path().join("data"));

    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo("deploy/monitoring/dashboard.json")).expect("dashboard"),
    )
    .expect("dashboard JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    // What an operator watches per node (issue 27's overview), each in some panel's query.
    let queries: Vec<&str> = panels
        .iter()
        .flat_map(|p| p["targets"].as_array().expect("targets"))
        .map(|t| t["expr"].as_str().expect("expr"))
        .collect();
    for metric in [
        "imagekeeper_image_fs_available_bytes",
        "imagekeeper_image_gc_high_threshold_percent",
        "imagekeeper_image_gc_low_threshold_percent",
        "imagekeeper_image_gc_progress_freed_bytes",
        "imagekeeper_image_garbage_collected_total",
        "imagekeeper_image_repulls_after_eviction_total",
        "imagekeeper_image_gc_duration_seconds_bucket",
        "imagekeeper_warm_images",
        "imagekeeper_image_pins",
        "imagekeeper_image_fs_inodes",
        "imagekeeper_store_healthy",
        // KEP-6053's series (issue 52).
        "imagekeeper_image_gc_attempts_total",
        "imagekeeper_image_gc_target_bytes_sum",
        "imagekeeper_image_gc_freed_bytes_sum",
        "imagekeeper_image_gc_image_deletions_total",
        "imagekeeper_image_gc_skipped_images_total",
        "imagekeeper_image_gc_image_fs_usage_percent",
    ] {
        assert!(
            queries.iter().any(|q| q.contains(metric)),
            "no dashboard panel queries {metric}"
        );
    }
    for panel in panels {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("expr");
            // The disk accounting reads containerd's own API, which the fake runtime does not
            // serve: its panel has no data here (the disk lab test scrapes the metric from an
            // agent on the real containerd and compares it with `inspect disk`).
            if expr.contains("imagekeeper_disk_bytes") {
                continue;
            }
            let query = expr
                .replace("$instance", ".*")
                .replace("$__rate_interval", "1m");
            let path = format!("/api/v1/query?query={}", url_encode(&query));
            // Prometheus scrapes every second; a rate needs two samples: poll until the query
            // has a result (no signal announces a scrape), the deadline only against a hang.
            let result = wait_for(
                &format!("data for {:?}: {query}", panel["title"]),
                Duration::from_secs(90),
                || {
                    let answer = prometheus_get(&address, &path);
                    let query = query.clone();
                    async move {
                        let answer = answer?;
                        assert_eq!(answer["status"], "success", "{query}: {answer}");
                        let result = answer["data"]["result"].as_array()?.clone();
                        (!result.is_empty()).then_some(result)
                    }
                },
            )
            .await;
            assert!(!result.is_empty());
        }
    }
    // The alerts fire (polled: Prometheus evaluates every second, nothing announces it).
    let firing = wait_for(
        &format!("{expected:?} firing"),
        Duration::from_secs(90),
        || {
            let answer = prometheus_get(&address, "/api/v1/alerts");
            async move {
                let alerts = answer?["data"]["alerts"].as_array()?.clone();
                let names: Vec<String> = alerts
                    .iter()
                    .filter(|a| a["state"] == "firing")
                    .filter_map(|a| a["labels"]["alertname"].as_str().map(str::to_owned))
                    .collect();
                expected
                    .iter()
                    .all(|want| names.iter().any(|n| n == want))
                    .then_some(names)
            }
        },
    )
    .await;
    // The agent is up, so the alerts about a missing agent stay quiet.
    assert!(
        !firing
            .iter()
            .any(|n| n == "ImagekeeperDown" || n == "ImagekeeperAbsent"),
        "{firing:?}"
    );
    drop(agent);
}

/// The same against the lab's real containerd (named `monitoring::lab::...`, one at a time with
/// the other lab tests): its image filesystem (a 2 GiB tmpfs) taken above the high threshold
/// of 1 % by a 64 MiB file beside containerd's root, every lab image kept by the config's
/// `pinnedImages = ["<lab registry>/imagekeeper-lab/*"]`, so GC cannot free enough (FreeDiskSpaceFailed); a lab image removed
/// and pulled back through the agent from the lab registry.
mod lab {
    use super::*;
    use imagekeeper::cri::ImageRuntime;

    /// Removes the filler file and the pulled image when dropped.
    struct Cleanup {
        filler: PathBuf,
        endpoint: String,
        image: String,
    }

    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.filler);
            let (endpoint, image) = (self.endpoint.clone(), self.image.clone());
            let cleanup = std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a current-thread runtime can be built");
                runtime.block_on(async {
                    let client =
                        imagekeeper::cri::CriClient::connect(support::lab_config(&endpoint))
                            .await
                            .expect("valid endpoint");
                    if let Err(err) = client.remove_image(&image, "").await {
                        eprintln!("cleanup: RemoveImage {image}: {err}");
                    }
                });
            });
            let _ = cleanup.join();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs the cri lab and prometheus: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV, scripts/tools (scripts/test runs it)"]
    async fn a_real_prometheus_scraping_an_agent_on_the_lab_containerd_answers_every_panel_and_fires_three_alerts()
     {
        let test = "monitoring::lab::a_real_prometheus_scraping_an_agent_on_the_lab_containerd_answers_every_panel_and_fires_three_alerts";
        let lab = support::lab(test).await;
        let prometheus = support::lab_tool(test, "prometheus", "IMAGEKEEPER_PROMETHEUS");
        let root = lab
            .imagefs_root
            .clone()
            .expect("lab.env names CRI_LAB_IMAGEFS_ROOT (scripts/cri-lab up again)");
        let image = lab.image("data:1mb").reference.clone();
        let _cleanup = Cleanup {
            filler: root.join("monitoring-filler"),
            endpoint: lab.endpoint.clone(),
            image: image.clone(),
        };
        std::fs::write(root.join("monitoring-filler"), vec![0x5a_u8; 64 << 20]).expect("filler");
        lab.remove_image(&image).await;
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("imagekeeper.toml");
        std::fs::write(
            &config,
            format!("pinnedImages = [\"{}/*\"]\n", lab.image_prefix),
        )
        .expect("write config");
        scrape_and_check(
            &prometheus,
            &[
                "--container-runtime-endpoint".to_owned(),
                lab.endpoint.clone(),
                "--config".to_owned(),
                config.display().to_string(),
                "--pod-infra-container-image".to_owned(),
                lab.sandbox_image.clone(),
                "--kubelet-root-dir=".to_owned(),
            ],
            &image,
            &[
                "ImagekeeperGCFailing",
                "ImagekeeperImageFsAboveHighThreshold",
                "ImagekeeperWarmImagesDoNotFit",
            ],
        )
        .await;
    }
}
