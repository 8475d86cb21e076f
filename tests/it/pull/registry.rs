//! Pulls from the lab's password registry (`scripts/cri-lab`: docker-registry with htpasswd
//! auth, a random bcrypt password in lab.env) through the `imagekeeper pull` binary and a
//! running agent, with every source of credentials: none (fails with the registry's 401 and a
//! backoff), a dockerconfigjson Secret, a dockercfg Secret, the node's config.json on the
//! search path, a credential provider plugin, a wrong password; and the password is found in
//! no output, log line or database byte.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use base64::Engine;

use crate::support::{self, ContainerdRelease, Lab, http_get, wait_for};

/// The password registry, from lab.env.
struct AuthRegistry {
    registry: String,
    image: String,
    user: String,
    password: String,
}

fn auth_registry(lab: &Lab) -> AuthRegistry {
    AuthRegistry {
        registry: lab.env("CRI_LAB_AUTH_REGISTRY"),
        image: lab.env("CRI_LAB_AUTH_IMAGE"),
        user: lab.env("CRI_LAB_AUTH_USER"),
        password: lab.env("CRI_LAB_AUTH_PASSWORD"),
    }
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn config_json(registry: &str, user: &str, password: &str) -> String {
    format!(r#"{{"auths":{{"{registry}":{{"username":"{user}","password":"{password}"}}}}}}"#)
}

/// Every form of a secret that must never show: as written, in `user:password`, base64'd.
fn secret_forms(reg: &AuthRegistry, password: &str) -> Vec<String> {
    vec![
        password.to_owned(),
        b64(&format!("{}:{password}", reg.user)),
        b64(&config_json(&reg.registry, &reg.user, password)),
    ]
}

/// One test's files: a database, an empty kubelet root dir and HOME (so no node
/// credentials are found unless the test writes them), no agent socket.
struct Run {
    dir: tempfile::TempDir,
    endpoint: String,
}

impl Run {
    fn new(lab: &Lab) -> Run {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("kubelet")).expect("mkdir");
        std::fs::create_dir(dir.path().join("home")).expect("mkdir");
        Run {
            dir,
            endpoint: lab.endpoint.clone(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, content: &str) -> String {
        let path = self.path(name);
        std::fs::write(&path, content).expect("write");
        path.to_str().expect("utf8").to_owned()
    }

    fn command(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_imagekeeper"));
        c.env("HOME", self.path("home"))
            .env("IMAGEKEEPER_LOG", "debug")
            .current_dir(self.path("home"));
        c
    }

    /// `imagekeeper pull IMAGE --policy Always` on this run's database, debug logs on.
    fn pull(&self, image: &str, pod_uid: &str, extra: &[&str]) -> Output {
        self.command()
            .args(["pull", image, "--policy", "Always", "--pod-uid", pod_uid])
            .args(["--container-runtime-endpoint", &self.endpoint])
            .arg("--db")
            .arg(self.path("records.redb"))
            .arg("--admin-socket")
            .arg(self.path("no-agent.sock"))
            .arg("--kubelet-root-dir")
            .arg(self.path("kubelet"))
            .args(extra)
            .output()
            .expect("run imagekeeper pull")
    }

    fn inspect(&self, args: &[&str]) -> Output {
        self.command()
            .arg("inspect")
            .args(args)
            .arg("--db")
            .arg(self.path("records.redb"))
            .output()
            .expect("run imagekeeper inspect")
    }
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The image is untagged in containerd first, so that a success means a real pull.
async fn remove_private_image(lab: &Lab, reg: &AuthRegistry) {
    lab.remove_image(&reg.image).await;
}

fn assert_pulled(out: &Output) {
    assert_eq!(out.status.code(), Some(0), "{}", text(out));
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("sha256:"),
        "{}",
        text(out)
    );
}

/// How the lab's containerd words the password registry's 401: with credentials sent (a wrong
/// password) every release names the 401; with none sent, containerd 1.7 and 2.1 say they had
/// none to answer it with ("authorization failed: no basic auth credentials", each seen on the
/// lab) where 1.6 names the 401.
fn refusal(lab: &Lab, credentials_sent: bool) -> &'static str {
    if credentials_sent || lab.containerd_release() == ContainerdRelease::V1_6 {
        "401 Unauthorized"
    } else {
        "authorization failed: no basic auth credentials"
    }
}

/// A pull the password registry refused with its 401 (see [`refusal`]).
fn assert_unauthorized(lab: &Lab, out: &Output, credentials_sent: bool) {
    assert_eq!(out.status.code(), Some(1), "{}", text(out));
    let err = String::from_utf8_lossy(&out.stderr);
    let refusal = refusal(lab, credentials_sent);
    assert!(
        err.contains("imagekeeper: ErrImagePull: ") && err.contains(refusal),
        "containerd {:?}: the registry's refusal is {refusal:?}: {}",
        lab.containerd_release(),
        text(out)
    );
}

#[tokio::test]
#[ignore = "needs the cri lab's password registry: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn an_anonymous_pull_from_the_password_registry_fails_with_its_401_and_backs_off() {
    let lab = support::lab("pull::registry::an_anonymous_pull_from_the_password_registry_fails_with_its_401_and_backs_off").await;
    let reg = auth_registry(&lab);
    remove_private_image(&lab, &reg).await;
    let run = Run::new(&lab);
    assert_unauthorized(&lab, &run.pull(&reg.image, "anon", &[]), false);
    // The failure is in the backoff: the next pull is refused without a registry call.
    let again = run.pull(&reg.image, "anon", &[]);
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        err.contains("imagekeeper: ImagePullBackOff: Back-off pulling image")
            && err.contains(refusal(&lab, false)),
        "{}",
        text(&again)
    );
    let backoff = run.inspect(&["backoff", "-o", "json"]);
    assert!(
        String::from_utf8_lossy(&backoff.stdout).contains(&format!("anon_{}", reg.image)),
        "{}",
        text(&backoff)
    );
}

#[tokio::test]
#[ignore = "needs the cri lab's password registry: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn pull_secrets_of_both_types_and_a_bare_config_json_pull_from_the_password_registry() {
    let lab = support::lab("pull::registry::pull_secrets_of_both_types_and_a_bare_config_json_pull_from_the_password_registry").await;
    let reg = auth_registry(&lab);
    let json = config_json(&reg.registry, &reg.user, &reg.password);
    let dockercfg = format!(
        r#"{{"http://{}":{{"auth":"{}","email":"lab@example.com"}}}}"#,
        reg.registry,
        b64(&format!("{}:{}", reg.user, reg.password))
    );
    let forms = [
        (
            "dockerconfigjson.yaml",
            format!(
                "apiVersion: v1\nkind: Secret\nmetadata:\n  name: regcred\ntype: kubernetes.io/dockerconfigjson\ndata:\n  .dockerconfigjson: {}\n",
                b64(&json)
            ),
        ),
        (
            "dockercfg.json",
            format!(
                r#"{{"apiVersion":"v1","kind":"Secret","metadata":{{"name":"legacy"}},"type":"kubernetes.io/dockercfg","data":{{".dockercfg":"{}"}}}}"#,
                b64(&dockercfg)
            ),
        ),
        ("config.json", json.clone()),
    ];
    for (i, (name, content)) in forms.iter().enumerate() {
        remove_private_image(&lab, &reg).await;
        let run = Run::new(&lab);
        let secret = run.write(name, content);
        // An unrelated secret first: only the matching one is used.
        let other = run.write(
            "other.json",
            &config_json("registry.example.com", "nobody", "nothing"),
        );
        let out = run.pull(
            &reg.image,
            &format!("secret-{i}"),
            &["--pull-secret", &other, "--pull-secret", &secret],
        );
        assert_pulled(&out);
    }
}

#[tokio::test]
#[ignore = "needs the cri lab's password registry: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn node_credentials_in_the_kubelet_root_dir_are_read_at_each_pull() {
    let lab = support::lab(
        "pull::registry::node_credentials_in_the_kubelet_root_dir_are_read_at_each_pull",
    )
    .await;
    let reg = auth_registry(&lab);
    remove_private_image(&lab, &reg).await;
    let run = Run::new(&lab);
    assert_unauthorized(&lab, &run.pull(&reg.image, "node-1", &[]), false);
    run.write(
        "kubelet/config.json",
        &config_json(&reg.registry, &reg.user, &reg.password),
    );
    assert_pulled(&run.pull(&reg.image, "node-2", &[]));
    // Edited to a wrong password: the next pull uses the file as it is now.
    run.write(
        "kubelet/config.json",
        &config_json(&reg.registry, &reg.user, "not-the-password"),
    );
    assert_unauthorized(&lab, &run.pull(&reg.image, "node-3", &[]), true);
}

/// A plugin script answering the lab's credentials for the password registry.
fn write_plugin(run: &Run, reg: &AuthRegistry, password: &str) -> (String, String) {
    std::fs::create_dir_all(run.path("bin")).expect("mkdir");
    let plugin = run.path("bin/lab-credentials");
    std::fs::write(
        &plugin,
        format!(
            "#!/bin/sh\ncat > /dev/null\necho run >> '{runs}'\ncat <<'EOF'\n{{\"kind\":\"CredentialProviderResponse\",\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\"cacheKeyType\":\"Registry\",\"auth\":{{\"{r}\":{{\"username\":\"{u}\",\"password\":\"{password}\"}}}}}}\nEOF\n",
            runs = run.path("plugin-runs").display(),
            r = reg.registry,
            u = reg.user,
        ),
    )
    .expect("write plugin");
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let config = run.write(
        "providers.yaml",
        &format!(
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: lab-credentials\n  matchImages: [\"{}\"]\n  defaultCacheDuration: 10m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n",
            reg.registry
        ),
    );
    (config, run.path("bin").to_str().expect("utf8").to_owned())
}

#[tokio::test]
#[ignore = "needs the cri lab's password registry: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn a_credential_provider_plugin_pulls_from_the_password_registry() {
    let lab = support::lab(
        "pull::registry::a_credential_provider_plugin_pulls_from_the_password_registry",
    )
    .await;
    let reg = auth_registry(&lab);
    remove_private_image(&lab, &reg).await;
    let run = Run::new(&lab);
    let (config, bin_dir) = write_plugin(&run, &reg, &reg.password);
    let out = run.pull(
        &reg.image,
        "plugin",
        &[
            "--image-credential-provider-config",
            &config,
            "--image-credential-provider-bin-dir",
            &bin_dir,
        ],
    );
    assert_pulled(&out);
    assert_eq!(
        std::fs::read_to_string(run.path("plugin-runs")).expect("the plugin ran"),
        "run\n"
    );
}

#[tokio::test]
#[ignore = "needs the cri lab's password registry: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn a_wrong_password_fails_with_the_registrys_401() {
    let lab = support::lab("pull::registry::a_wrong_password_fails_with_the_registrys_401").await;
    let reg = auth_registry(&lab);
    remove_private_image(&lab, &reg).await;
    let run = Run::new(&lab);
    let secret = run.write(
        "wrong.json",
        &config_json(&reg.registry, &reg.user, "wrong-Pa55word-42"),
    );
    assert_unauthorized(
        &lab,
        &run.pull(&reg.image, "wrong", &["--pull-secret", &secret]),
        true,
    );
}

/// Successful and failed pulls with every source, debug logs on, then every output channel,
/// `inspect`'s every view and the database file's bytes are searched for the passwords.
#[tokio::test]
#[ignore = "needs the cri lab's password registry: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn the_password_appears_in_no_output_log_inspect_view_or_database_byte() {
    let lab = support::lab(
        "pull::registry::the_password_appears_in_no_output_log_inspect_view_or_database_byte",
    )
    .await;
    let reg = auth_registry(&lab);
    let wrong = "wrong-Pa55word-42";
    let run = Run::new(&lab);
    let good = run.write(
        "good.yaml",
        &format!(
            "kind: Secret\ntype: kubernetes.io/dockerconfigjson\ndata:\n  .dockerconfigjson: {}\n",
            b64(&config_json(&reg.registry, &reg.user, &reg.password))
        ),
    );
    let bad = run.write("bad.json", &config_json(&reg.registry, &reg.user, wrong));
    let (plugin_config, bin_dir) = write_plugin(&run, &reg, &reg.password);
    // An image name with credentials in it is echoed redacted.
    let in_name = format!("{}:{}@{}", reg.user, reg.password, reg.image);
    let mut outputs = Vec::new();
    remove_private_image(&lab, &reg).await;
    outputs.push(run.pull(&reg.image, "leak-1", &["--pull-secret", &bad]));
    outputs.push(run.pull(
        &reg.image,
        "leak-2",
        &["--pull-secret", &bad, "--pull-secret", &good],
    ));
    outputs.push(run.pull(
        &reg.image,
        "leak-3",
        &[
            "--image-credential-provider-config",
            &plugin_config,
            "--image-credential-provider-bin-dir",
            &bin_dir,
        ],
    ));
    outputs.push(run.pull(&in_name, "leak-4", &[]));
    assert_eq!(outputs[0].status.code(), Some(1), "{}", text(&outputs[0]));
    assert_pulled(&outputs[1]);
    assert_pulled(&outputs[2]);
    assert_eq!(outputs[3].status.code(), Some(2), "{}", text(&outputs[3]));
    for view in [
        vec!["list", "-o", "json"],
        vec!["list", "-o", "wide"],
        vec!["backoff", "-o", "json"],
        vec!["stats", "-o", "json"],
        vec!["export"],
        vec!["explain", "-o", "json"],
    ] {
        let out = run.inspect(&view);
        assert_eq!(out.status.code(), Some(0), "{view:?}: {}", text(&out));
        outputs.push(out);
    }
    let db = std::fs::read(run.path("records.redb")).expect("the database");
    let mut secrets = secret_forms(&reg, &reg.password);
    secrets.extend(secret_forms(&reg, wrong));
    for secret in &secrets {
        for out in &outputs {
            assert!(
                !text(out).contains(secret.as_str()),
                "{secret} in {}",
                text(out)
            );
        }
        assert!(
            !db.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "a password is in the database file"
        );
    }
    // The wrong password's failure was recorded (so the search above saw a backoff entry).
    assert!(String::from_utf8_lossy(&outputs[6].stdout).contains("leak-1_"));
}

/// A pull through a running agent: the pull secret travels over the admin socket, the agent's
/// node credentials and plugins serve the rest; the agent's log, its metrics and its database
/// never show the password.
#[tokio::test]
#[ignore = "needs the cri lab's password registry: scripts/cri-lab up, IMAGEKEEPER_LAB_ENV (scripts/test runs it)"]
async fn a_pull_through_the_running_agent_uses_the_pull_secret_it_is_sent() {
    let lab = support::lab(
        "pull::registry::a_pull_through_the_running_agent_uses_the_pull_secret_it_is_sent",
    )
    .await;
    let reg = auth_registry(&lab);
    remove_private_image(&lab, &reg).await;
    let run = Run::new(&lab);
    let socket = run.path("admin.sock");
    let log = std::fs::File::create(run.path("agent.log")).expect("log file");
    let mut agent = run
        .command()
        .args(["run", "--container-runtime-endpoint", &run.endpoint])
        .arg("--db")
        .arg(run.path("records.redb"))
        .arg("--admin-socket")
        .arg(&socket)
        .arg("--kubelet-root-dir")
        .arg(run.path("kubelet"))
        .args(["--gc-period", "1h", "--image-gc-high-threshold", "100"])
        // Port 0: the agent binds a port the kernel chooses and logs it (a port picked here
        // and passed on could be taken by anyone in between).
        .args(["--metrics-address", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn the agent");
    let log_path = run.path("agent.log");
    let metrics = wait_for(
        "the agent's metrics address",
        Duration::from_secs(30),
        || {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            async move { support::metrics_address_in_log(&log) }
        },
    )
    .await;
    let up = socket.clone();
    wait_for("the admin socket", Duration::from_secs(30), || {
        let exists = up.exists();
        async move { exists.then_some(()) }
    })
    .await;
    let via_agent = |pod: &str, extra: &[&str]| {
        run.command()
            .args(["pull", &reg.image, "--policy", "Always", "--pod-uid", pod])
            .arg("--admin-socket")
            .arg(&socket)
            .args(extra)
            .output()
            .expect("run imagekeeper pull")
    };
    let anonymous = via_agent("agent-1", &[]);
    let secret = run.write(
        "secret.json",
        &config_json(&reg.registry, &reg.user, &reg.password),
    );
    let with_secret = via_agent("agent-2", &["--pull-secret", &secret]);
    let metrics_body = http_get(&metrics, "/metrics");
    let _ = agent.kill();
    let _ = agent.wait();
    assert!(metrics_body.starts_with("HTTP/1.1 200"), "{metrics_body}");
    let db = std::fs::read(run.path("records.redb")).expect("the database");
    assert_unauthorized(&lab, &anonymous, false);
    assert_pulled(&with_secret);
    let agent_log = std::fs::read_to_string(run.path("agent.log")).expect("agent log");
    assert!(agent_log.contains(refusal(&lab, false)), "{agent_log}");
    for secret in secret_forms(&reg, &reg.password) {
        assert!(!agent_log.contains(&secret), "{agent_log}");
        assert!(!text(&with_secret).contains(&secret));
        assert!(!metrics_body.contains(&secret), "{metrics_body}");
        assert!(
            !db.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "a password is in the agent's database file"
        );
    }
}
