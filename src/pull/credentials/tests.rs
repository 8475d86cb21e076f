//! The kubelet's keyring tests (`pkg/credentialprovider/keyring_test.go`,
//! `config_test.go`, `secrets/secrets_test.go`) as data, and the parsing of every input form.

use super::*;
use base64::Engine;

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn entry(user: &str, password: &str) -> DockerConfigEntry {
    DockerConfigEntry {
        username: user.into(),
        password: password.into(),
        email: String::new(),
    }
}

fn users(creds: &[PullCredentials]) -> Vec<&str> {
    creds.iter().map(|c| c.username.as_str()).collect()
}

/// keyring_test.go TestURLsMatch.
#[test]
fn urls_match_as_the_kubelet_tests_say() {
    let cases = [
        ("*.kubernetes.io", "prefix.kubernetes.io", true),
        ("prefix.*.io", "prefix.kubernetes.io", true),
        ("prefix.kubernetes.*", "prefix.kubernetes.io", true),
        ("*-good.kubernetes.io", "prefix-good.kubernetes.io", true),
        ("*.kubernetes.io/blah", "prefix.kubernetes.io/blah", true),
        ("prefix.*.io/foo", "prefix.kubernetes.io/foo/bar", true),
        (
            "*.kubernetes.io:1111/blah",
            "prefix.kubernetes.io:1111/blah",
            true,
        ),
        (
            "prefix.*.io:1111/foo",
            "prefix.kubernetes.io:1111/foo/bar",
            true,
        ),
        ("*.kubernetes.io", "kubernetes.io", false),
        ("*.*.kubernetes.io", "prefix.kubernetes.io", false),
        ("*.*.kubernetes.io", "kubernetes.io", false),
        ("kubernetes.io", "kubernetes.com", false),
        ("k*.io", "quay.io", false),
        (
            "*.kubernetes.io:1234/blah",
            "prefix.kubernetes.io:1111/blah",
            false,
        ),
        (
            "prefix.*.io/foo",
            "prefix.kubernetes.io:1111/foo/bar",
            false,
        ),
        // Malformed globs and URLs never match.
        ("[.kubernetes.io", "a.kubernetes.io", false),
        ("a.kubernetes.io:port", "a.kubernetes.io:port", false),
    ];
    for (glob, target, want) in cases {
        assert_eq!(
            url_match::urls_match_str(glob, target),
            want,
            "{glob} vs {target}"
        );
    }
}

#[test]
fn host_part_globs_follow_go_filepath_match() {
    let cases: [(&str, &str, Option<bool>); 9] = [
        ("a?c", "abc", Some(true)),
        ("a[b-d]c", "acc", Some(true)),
        ("a[^b-d]c", "acc", Some(false)),
        ("a[^b-d]c", "axc", Some(true)),
        ("a\\*c", "a*c", Some(true)),
        ("*", "", Some(true)),
        ("a[", "a", None),
        ("[]a]", "a", None),
        ("ab*[", "abc", None),
    ];
    for (pattern, name, want) in cases {
        assert_eq!(
            url_match::glob_match(pattern.as_bytes(), name.as_bytes()),
            want,
            "{pattern} vs {name}"
        );
    }
}

fn keyring_with(location: &str, user: &str) -> Keyring {
    let mut k = Keyring::new();
    k.add(&DockerConfig(
        [(location.to_owned(), entry(user, "bar"))].into(),
    ));
    k
}

/// keyring_test.go TestDockerKeyringForGlob (hits, the image being `target/foo/bar`) and
/// TestKeyringMiss (misses).
#[test]
fn keyring_locations_match_images_as_the_kubelet_tests_say() {
    let hits = [
        ("https://hello.kubernetes.io", "hello.kubernetes.io"),
        ("https://*.docker.io", "prefix.docker.io"),
        ("https://prefix.*.io", "prefix.docker.io"),
        ("https://prefix.docker.*", "prefix.docker.io"),
        ("https://*.docker.io/path", "prefix.docker.io/path"),
        ("https://prefix.*.io/path", "prefix.docker.io/path/subpath"),
        ("https://prefix.docker.*/path", "prefix.docker.io/path"),
        ("https://*.docker.io:8888", "prefix.docker.io:8888"),
        ("https://prefix.*.io:8888", "prefix.docker.io:8888"),
        ("https://prefix.docker.*:8888", "prefix.docker.io:8888"),
        (
            "https://*.docker.io/path:1111",
            "prefix.docker.io/path:1111",
        ),
        ("https://*.docker.io/v1/", "prefix.docker.io/path:1111"),
        ("https://*.docker.io/v2/", "prefix.docker.io/path:1111"),
        (
            "https://prefix.docker.*/path:1111",
            "prefix.docker.io/path:1111",
        ),
        ("prefix.docker.io:1111", "prefix.docker.io:1111/path"),
        ("*.docker.io:1111", "prefix.docker.io:1111/path"),
    ];
    for (location, target) in hits {
        let k = keyring_with(location, "foo");
        assert_eq!(
            users(&k.lookup(&format!("{target}/foo/bar"))),
            ["foo"],
            "{location} vs {target}"
        );
    }
    let misses = [
        ("https://hello.kubernetes.io", "world.mesos.org/foo/bar"),
        ("https://*.docker.com", "prefix.docker.io"),
        ("https://suffix.*.io", "prefix.docker.io"),
        ("https://prefix.docker.c*", "prefix.docker.io"),
        (
            "https://prefix.*.io/path:1111",
            "prefix.docker.io/path/subpath:1111",
        ),
        ("suffix.*.io", "prefix.docker.io"),
        // Docker Hub's credentials are for Docker Hub only.
        ("https://index.docker.io/v1/", "world.mesos.org/foo/bar"),
    ];
    for (location, target) in misses {
        let k = keyring_with(location, "foo");
        assert!(
            k.lookup(&format!("{target}/foo/bar")).is_empty(),
            "{location} vs {target}"
        );
    }
}

/// keyring_test.go TestKeyringHitWith{Unqualified,UnqualifiedLibrary,Qualified}DockerHub and
/// TestIsDefaultRegistryMatch, plus the aliases a docker config may use for Docker Hub.
#[test]
fn docker_hub_credentials_serve_every_name_of_docker_hub() {
    for location in [
        "https://index.docker.io/v1/",
        "index.docker.io",
        "https://registry-1.docker.io/v2/",
    ] {
        let k = keyring_with(location, "hub");
        for image in [
            "google/docker-registry",
            "jenkins",
            "docker.io/library/busybox",
            "index.docker.io/google/docker-registry",
        ] {
            assert_eq!(users(&k.lookup(image)), ["hub"], "{location} for {image}");
        }
        assert!(k.lookup("quay.io/foo").is_empty(), "{location}");
    }
    let samples = [
        (true, "foo/bar"),
        (true, "docker.io/foo/bar"),
        (true, "index.docker.io/foo/bar"),
        (true, "foo"),
        (false, ""),
        (false, "registry.tld/foo/bar"),
        (false, "registry:5000/foo/bar"),
        (false, "myhostdocker.io/foo/bar"),
    ];
    for (want, image) in samples {
        assert_eq!(is_default_registry_match(image), want, "{image:?}");
    }
}

/// keyring_test.go TestDockerKeyringLookup and TestIssue3797: locations in reverse
/// lexicographic order (here the longer first), a path prefix matches on characters, schemes
/// and `/v1/` are stripped.
#[test]
fn locations_come_in_reverse_lexicographic_order_and_paths_match_by_prefix() {
    let mut k = Keyring::new();
    k.add(&DockerConfig(
        [
            ("bar.example.com/pong".to_owned(), entry("grace", "squash")),
            ("bar.example.com".to_owned(), entry("ada", "smash")),
        ]
        .into(),
    ));
    let cases: [(&str, &[&str]); 7] = [
        ("bar.example.com", &["ada"]),
        ("bar.example.com/pong", &["grace", "ada"]),
        ("bar.example.com/ping", &["ada"]),
        ("bar.example.com/pongz", &["grace", "ada"]),
        ("bar.example.com/pong/pang", &["grace", "ada"]),
        ("example.com", &[]),
        ("foo.example.com", &[]),
    ];
    for (image, want) in cases {
        assert_eq!(users(&k.lookup(image)), want, "{image}");
    }
    let k = keyring_with("https://quay.io/v1/", "rex");
    for image in ["quay.io", "quay.io/foo", "quay.io/foo/bar"] {
        assert_eq!(users(&k.lookup(image)), ["rex"], "{image}");
    }
}

#[test]
fn config_entries_decode_auth_which_wins_over_username_and_password() {
    let doc = format!(
        r#"{{"auths": {{"reg.example.com": {{"Username": "u", "password": "p", "email": "e"}},
            "other.example.com": {{"username": "x", "auth": "{}"}}}}}}"#,
        b64("bob:pa:ss")
    );
    let config = parse_config_json("t", doc.as_bytes()).expect("valid");
    assert_eq!(config.0["reg.example.com"].username, "u");
    assert_eq!(config.0["reg.example.com"].password, "p");
    assert_eq!(config.0["other.example.com"].username, "bob");
    assert_eq!(config.0["other.example.com"].password, "pa:ss");

    let bad = [
        format!(r#"{{"auths": {{"r": {{"auth": "{}"}}}}}}"#, b64("nocolon")),
        r#"{"auths": {"r": {"auth": "%%%"}}}"#.to_owned(),
        r#"{"auths": {"r": {"username": 3}}}"#.to_owned(),
        r#"{"auths": ["r"]}"#.to_owned(),
    ];
    for doc in bad {
        assert!(parse_config_json("t", doc.as_bytes()).is_err(), "{doc}");
    }
}

const SECRET_PASSWORD: &str = "s3cr3t-Pa55word";

fn dockerconfigjson(registry: &str) -> String {
    format!(r#"{{"auths":{{"{registry}":{{"username":"alice","password":"{SECRET_PASSWORD}"}}}}}}"#)
}

/// Every form a `--pull-secret` file may take gives the same credentials.
#[test]
fn pull_secrets_in_every_form_give_the_same_credentials() {
    let json = dockerconfigjson("reg.example.com:5000");
    let dockercfg = format!(
        r#"{{"reg.example.com:5000":{{"auth":"{}"}}}}"#,
        b64(&format!("alice:{SECRET_PASSWORD}"))
    );
    let forms = [
        json.clone(),
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: regcred\ntype: kubernetes.io/dockerconfigjson\ndata:\n  .dockerconfigjson: {}\n",
            b64(&json)
        ),
        format!(
            r#"{{"apiVersion":"v1","kind":"Secret","type":"kubernetes.io/dockerconfigjson","stringData":{{".dockerconfigjson":{}}}}}"#,
            serde_json::to_string(&json).expect("a string")
        ),
        format!(
            "kind: Secret\ntype: kubernetes.io/dockercfg\ndata:\n  .dockercfg: {}\n",
            b64(&dockercfg)
        ),
    ];
    for form in forms {
        let config = parse_pull_secret("secret.yaml", form.as_bytes()).expect(&form);
        let mut k = Keyring::new();
        k.add(&config);
        let found = k.lookup("reg.example.com:5000/team/app");
        assert_eq!(users(&found), ["alice"], "{form}");
        assert_eq!(found[0].password, SECRET_PASSWORD);
    }
}

/// A pull secret that is not one gets an error naming the problem and never quoting the
/// file (which may hold the password).
#[test]
fn bad_pull_secrets_are_refused_without_quoting_them() {
    let cases = [
        (
            format!(
                "kind: Secret\ntype: Opaque\ndata:\n  password: {}\n",
                b64(SECRET_PASSWORD)
            ),
            "Opaque",
        ),
        (
            "kind: Secret\ntype: kubernetes.io/dockerconfigjson\ndata: {}\n".to_owned(),
            "has no",
        ),
        (
            format!(
                "kind: Secret\ntype: kubernetes.io/dockerconfigjson\ndata:\n  .dockerconfigjson: {SECRET_PASSWORD}!\n"
            ),
            "base64",
        ),
        (
            format!(
                "kind: Secret\ntype: kubernetes.io/dockerconfigjson\nstringData:\n  .dockerconfigjson: '{{\"auths\": {SECRET_PASSWORD}'\n"
            ),
            "not valid JSON",
        ),
        (
            format!("{{\"auths\": \"{SECRET_PASSWORD}\""),
            "not valid YAML or JSON",
        ),
        (format!("password: {SECRET_PASSWORD}\n"), "neither"),
        (
            format!("kind: ConfigMap\ndata:\n  x: {SECRET_PASSWORD}\n"),
            "ConfigMap",
        ),
        (format!("- {SECRET_PASSWORD}\n"), "expected a Secret"),
    ];
    for (doc, want) in cases {
        let err = parse_pull_secret("secret.yaml", doc.as_bytes())
            .expect_err(&doc)
            .to_string();
        assert!(
            err.contains(want) && err.starts_with("secret.yaml"),
            "{err}"
        );
        assert!(!err.contains(SECRET_PASSWORD), "{err}");
        assert!(!format!("{:?}", parse_pull_secret("s", doc.as_bytes())).contains(SECRET_PASSWORD));
    }
}

#[test]
fn debug_output_of_credentials_redacts_them() {
    let config =
        parse_pull_secret("s", dockerconfigjson("r.example.com").as_bytes()).expect("valid");
    let mut k = Keyring::new();
    k.add(&config);
    let shown = format!("{config:?} {k:?} {:?}", k.lookup("r.example.com/x"));
    assert!(
        !shown.contains(SECRET_PASSWORD) && !shown.contains("alice"),
        "{shown}"
    );
}

/// config.go's search: the first config.json on the path wins, else the first .dockercfg;
/// each lookup reads the files again.
#[test]
fn node_credentials_follow_the_search_path_and_are_read_at_each_lookup() {
    let dirs: Vec<tempfile::TempDir> = (0..4)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let node = NodeCredentials {
        config_json_dirs: vec![dirs[0].path().into(), dirs[1].path().into()],
        dockercfg_dirs: vec![dirs[2].path().into(), dirs[3].path().into()],
    };
    let json = |user: &str| {
        format!(r#"{{"auths":{{"r.example.com":{{"username":"{user}","password":"p"}}}}}}"#)
    };
    let cfg = |user: &str| format!(r#"{{"r.example.com":{{"username":"{user}","password":"p"}}}}"#);
    let read = |node: &NodeCredentials| {
        let mut k = Keyring::new();
        k.add(&node.read());
        users(&k.lookup("r.example.com/app"))
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
    };
    assert!(read(&node).is_empty());
    std::fs::write(dirs[3].path().join(".dockercfg"), cfg("legacy-late")).expect("write");
    assert_eq!(read(&node), ["legacy-late"]);
    std::fs::write(dirs[2].path().join(".dockercfg"), cfg("legacy")).expect("write");
    assert_eq!(read(&node), ["legacy"]);
    std::fs::write(dirs[1].path().join("config.json"), json("json-late")).expect("write");
    assert_eq!(read(&node), ["json-late"]);
    // An invalid file is skipped.
    std::fs::write(dirs[0].path().join("config.json"), "{not json").expect("write");
    assert_eq!(read(&node), ["json-late"]);
    std::fs::write(dirs[0].path().join("config.json"), json("json")).expect("write");
    assert_eq!(read(&node), ["json"]);
}

#[test]
fn the_kubelet_search_path_starts_at_the_kubelet_root_dir() {
    let node = NodeCredentials::kubelet_search_path(Some(Path::new("/var/lib/kubelet")));
    assert_eq!(node.config_json_dirs[0], Path::new("/var/lib/kubelet"));
    assert_eq!(
        node.config_json_dirs.last().map(PathBuf::as_path),
        Some(Path::new("/.docker"))
    );
    assert_eq!(node.dockercfg_dirs[0], Path::new("/var/lib/kubelet"));
    assert_eq!(
        node.dockercfg_dirs.last().map(PathBuf::as_path),
        Some(Path::new("/"))
    );
}

/// MakeDockerKeyring: the pull secrets' matches come before the node's.
#[tokio::test]
async fn pull_secrets_come_before_node_credentials() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"auths":{"r.example.com":{"username":"node","password":"p"}}}"#,
    )
    .expect("write");
    let sources = CredentialSources {
        node: Some(NodeCredentials {
            config_json_dirs: vec![dir.path().into()],
            dockercfg_dirs: vec![],
        }),
        plugins: None,
    };
    let secret = DockerConfig([("r.example.com/app".to_owned(), entry("secret", "p"))].into());
    let found = sources
        .lookup("r.example.com/app", &[secret], UnixNanos(0))
        .await
        .expect("no plugin");
    assert_eq!(users(&found), ["secret", "node"]);
    let found = sources
        .lookup("other.example.com/app", &[], UnixNanos(0))
        .await
        .expect("no plugin");
    assert!(found.is_empty());
}

use std::path::Path;

mod plugins;

/// keyring.go's index is reverse-sorted as strings, not by length: `b.example.com` comes
/// before the longer `*.example.com/team`; one location's credentials keep the order they
/// were added in (two pull secrets for one registry: the first listed is tried first).
#[test]
fn the_index_order_is_reverse_lexicographic_not_longest_first() {
    let mut k = Keyring::new();
    k.add(&DockerConfig(
        [("*.example.com/team".to_owned(), entry("glob-team", "p"))].into(),
    ));
    k.add(&DockerConfig(
        [("b.example.com".to_owned(), entry("host", "p"))].into(),
    ));
    k.add(&DockerConfig(
        [("b.example.com".to_owned(), entry("host-second", "p"))].into(),
    ));
    assert_eq!(
        users(&k.lookup("b.example.com/team/app")),
        ["host", "host-second", "glob-team"]
    );
}

/// A plugin `p` in `dir` answering `location` with user `user`, and the sources with the
/// node's config.json in `node_dir`.
async fn node_and_plugin_sources(
    dir: &Path,
    node_dir: &Path,
    location: &str,
    user: &str,
) -> CredentialSources {
    use std::os::unix::fs::PermissionsExt;
    let answer = format!(
        r#"{{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Image","auth":{{"{location}":{{"username":"{user}","password":"p"}}}}}}"#
    );
    let plugin = dir.join("p");
    std::fs::write(
        &plugin,
        format!("#!/bin/sh\ncat > /dev/null\necho '{answer}'\n"),
    )
    .expect("write plugin");
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: p\n  matchImages: ['*.example.com', 'docker.io']\n  defaultCacheDuration: 0s\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n",
    )
    .expect("write config");
    CredentialSources {
        node: Some(NodeCredentials {
            config_json_dirs: vec![node_dir.into()],
            dockercfg_dirs: vec![],
        }),
        plugins: Some(PluginProviders::load(&config, dir).expect("valid config")),
    }
}

/// image_manager.go: `MakeDockerKeyring(pullSecrets, UnionDockerKeyring{nodeKeyring,
/// pluginKeyring})`. The node's docker config and the plugins' answers are two keyrings
/// tried in turn (not one index): the node's `reg.example.com` comes before a plugin's
/// `reg.example.com/team` though the merged index would put the plugin's first; and each
/// keyring falls back to its own Docker Hub credentials.
#[tokio::test]
async fn the_node_config_comes_before_the_plugins_each_its_own_keyring() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node_dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        node_dir.path().join("config.json"),
        r#"{"auths":{"reg.example.com":{"username":"node","password":"p"},"https://index.docker.io/v1/":{"username":"node-hub","password":"p"}}}"#,
    )
    .expect("write");
    let sources = node_and_plugin_sources(
        dir.path(),
        node_dir.path(),
        "reg.example.com/team",
        "plugin",
    )
    .await;
    let secret = DockerConfig([("reg.example.com".to_owned(), entry("secret", "p"))].into());
    let found = sources
        .lookup("reg.example.com/team/app", &[secret], UnixNanos(0))
        .await
        .expect("the plugin answers");
    assert_eq!(users(&found), ["secret", "node", "plugin"]);

    // Docker Hub: the plugin answers a location that matches, the node's Hub entry is its
    // keyring's fallback and still comes first.
    let sources =
        node_and_plugin_sources(dir.path(), node_dir.path(), "docker.io", "plugin-hub").await;
    let found = sources
        .lookup("docker.io/library/busybox", &[], UnixNanos(0))
        .await
        .expect("the plugin answers");
    assert_eq!(users(&found), ["node-hub", "plugin-hub"]);
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL");
    // SAFETY: a valid C string and a mode.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// A FIFO at a node config path is skipped at once with a warning naming it (opening it used
/// to wait for a writer forever), and the search goes on to the next directory.
#[test]
fn a_fifo_on_the_node_search_path_is_skipped_with_a_warning_naming_it() {
    let dirs: Vec<tempfile::TempDir> = (0..2)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let fifo = dirs[0].path().join("config.json");
    mkfifo(&fifo);
    std::fs::write(
        dirs[1].path().join("config.json"),
        r#"{"auths":{"r.example.com":{"username":"second","password":"p"}}}"#,
    )
    .expect("write");
    let node = NodeCredentials {
        config_json_dirs: vec![dirs[0].path().into(), dirs[1].path().into()],
        dockercfg_dirs: vec![],
    };
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || LogWriter(writer.clone()))
        .with_ansi(false)
        .finish();
    // Bounded: without the fix the read blocks in open(2); the watchdog turns that into a
    // failure instead of a hung test.
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = node.clone();
    std::thread::spawn(move || {
        let config = tracing::subscriber::with_default(subscriber, || reader.read());
        let _ = tx.send(config);
    });
    let config = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("reading the node config returns (a FIFO is not waited on)");
    let mut k = Keyring::new();
    k.add(&config);
    assert_eq!(users(&k.lookup("r.example.com/app")), ["second"]);
    let log = String::from_utf8(log.lock().expect("log").clone()).expect("UTF-8 log");
    assert!(
        log.contains("WARN")
            && log.contains(&format!("{}: not a regular file (a FIFO)", fifo.display())),
        "{log}"
    );
}

struct LogWriter(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A pull secret nested past the operator-file bound is refused before the parser sees it,
/// naming the input: a secret sent over the admin socket is not read through
/// `operator_file`, so `parse_pull_secret` checks it itself.
#[test]
fn a_deeply_nested_pull_secret_is_refused_before_parsing() {
    let doc = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let err = parse_pull_secret("pull secret 1", doc.as_bytes())
        .expect_err("too deep")
        .to_string();
    assert_eq!(
        err,
        "pull secret 1: nested more than 64 levels deep at line 1"
    );
}
