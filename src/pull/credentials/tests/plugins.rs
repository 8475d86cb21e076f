//! Credential provider plugins, run for real: small shell scripts written by each test
//! (`plugin/plugin_test.go`'s cases for the cache, `config_test.go`'s for validation).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use crate::model::UnixNanos;
use crate::pull::credentials::{CredentialSources, PluginProviders};

const API: &str = "credentialprovider.kubelet.k8s.io/v1";
const PLUGIN_PASSWORD: &str = "plugin-pa55-XYZ";

/// A plugin named `name` in `dir` that records its request, args and env, counts its runs,
/// and prints `response`.
fn write_plugin(dir: &Path, name: &str, response: &str) {
    let path = dir.join(name);
    let script = format!(
        "#!/bin/sh\ncat > '{d}/request.json'\necho \"$1 $PLUGIN_ENV\" > '{d}/args'\necho run >> '{d}/runs'\ncat <<'EOF'\n{response}\nEOF\n",
        d = dir.display()
    );
    std::fs::write(&path, script).expect("write plugin");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

fn write_config(
    dir: &Path,
    name: &str,
    match_images: &str,
    default_cache: &str,
) -> std::path::PathBuf {
    let path = dir.join("config.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: {name}\n  matchImages: {match_images}\n  defaultCacheDuration: {default_cache}\n  apiVersion: {API}\n  args: [first-arg]\n  env:\n  - name: PLUGIN_ENV\n    value: from-config\n"
        ),
    )
    .expect("write config");
    path
}

fn response(cache_key_type: &str, cache_duration: Option<&str>) -> String {
    let duration = cache_duration.map_or(String::new(), |d| format!(r#""cacheDuration":"{d}","#));
    format!(
        r#"{{"kind":"CredentialProviderResponse","apiVersion":"{API}","cacheKeyType":"{cache_key_type}",{duration}"auth":{{"*.example.com":{{"username":"robot","password":"{PLUGIN_PASSWORD}"}}}}}}"#
    )
}

fn runs(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("runs")).map_or(0, |s| s.lines().count())
}

fn sources(plugins: PluginProviders) -> CredentialSources {
    CredentialSources {
        node: None,
        plugins: Some(plugins),
    }
}

const T0: i64 = 1_700_000_000_000_000_000;

fn at(secs: i64) -> UnixNanos {
    UnixNanos(T0 + secs * 1_000_000_000)
}

#[tokio::test]
async fn a_matching_plugin_gets_the_request_on_stdin_and_its_credentials_are_used() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_plugin(dir.path(), "robot-creds", &response("Image", Some("0s")));
    let config = write_config(
        dir.path(),
        "robot-creds",
        r#"["*.example.com", "*.*.example.com"]"#,
        "0s",
    );
    let sources = sources(PluginProviders::load(&config, dir.path()).expect("valid config"));

    let found = sources
        .lookup("reg.example.com/team/app", &[], at(0))
        .await
        .expect("the plugin answers");
    assert_eq!(found.len(), 1);
    assert_eq!(
        (found[0].username.as_str(), found[0].password.as_str()),
        ("robot", PLUGIN_PASSWORD)
    );
    let request: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("request.json")).expect("request"),
    )
    .expect("JSON request");
    assert_eq!(
        request,
        serde_json::json!({"kind": "CredentialProviderRequest", "apiVersion": API, "image": "reg.example.com/team/app"})
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("args"))
            .expect("args")
            .trim(),
        "first-arg from-config"
    );
    // An image the plugin does not serve: no run, no credentials.
    let found = sources
        .lookup("quay.io/team/app", &[], at(0))
        .await
        .expect("no plugin");
    assert!(found.is_empty());
    assert_eq!(runs(dir.path()), 1);
}

/// plugin.go's cache: a response is kept for its cacheDuration (or the provider's default when
/// it has none; 0 keeps nothing) under the image, its registry, or one global key, and
/// expiry is judged by the `now` given (the injected clock).
#[tokio::test]
async fn plugin_answers_are_cached_by_their_key_type_for_their_duration() {
    // (cacheKeyType, cacheDuration, defaultCacheDuration, lookups: (image, seconds after T0),
    // runs after each lookup)
    type Case<'a> = (
        &'a str,
        Option<&'a str>,
        &'a str,
        Vec<(&'a str, i64, usize)>,
    );
    let cases: Vec<Case> = vec![
        (
            "Image",
            Some("10m"),
            "0s",
            vec![
                ("a.example.com/x", 0, 1),
                ("a.example.com/x", 600, 1),
                ("a.example.com/y", 600, 2),
                ("a.example.com/x", 601, 3),
            ],
        ),
        (
            "Registry",
            Some("10m"),
            "0s",
            vec![
                ("a.example.com/x", 0, 1),
                ("a.example.com/y", 300, 1),
                ("b.example.com/x", 300, 2),
                ("a.example.com/z", 601, 3),
            ],
        ),
        (
            "Global",
            Some("1h"),
            "0s",
            vec![
                ("a.example.com/x", 0, 1),
                ("b.example.com/y", 3599, 1),
                ("c.example.com/z", 3601, 2),
            ],
        ),
        (
            "Registry",
            Some("0s"),
            "1h",
            vec![("a.example.com/x", 0, 1), ("a.example.com/x", 0, 2)],
        ),
        (
            "Registry",
            None,
            "5m",
            vec![
                ("a.example.com/x", 0, 1),
                ("a.example.com/x", 300, 1),
                ("a.example.com/x", 301, 2),
            ],
        ),
        (
            "Registry",
            None,
            "0s",
            vec![("a.example.com/x", 0, 1), ("a.example.com/x", 1, 2)],
        ),
    ];
    for (key_type, duration, default, lookups) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        write_plugin(dir.path(), "p", &response(key_type, duration));
        let config = write_config(dir.path(), "p", r#"["*.example.com"]"#, default);
        let sources = sources(PluginProviders::load(&config, dir.path()).expect("valid"));
        for (image, secs, want_runs) in lookups {
            let found = sources.lookup(image, &[], at(secs)).await.expect("answers");
            assert_eq!(found.len(), 1, "{key_type} {duration:?}: {image} at {secs}");
            assert_eq!(
                runs(dir.path()),
                want_runs,
                "{key_type} {duration:?} default {default}: {image} at +{secs}s"
            );
        }
    }
}

/// A plugin that fails, hangs or answers garbage fails the lookup with a message naming the
/// plugin and what went wrong, and never what it printed.
#[tokio::test]
async fn a_failing_hanging_or_garbage_plugin_is_a_clear_error_that_quotes_nothing() {
    let ok = response("Image", None);
    let cases = [
        (
            format!("echo '{ok}'; echo '{PLUGIN_PASSWORD}' >&2; exit 3"),
            "exit status: 3",
        ),
        (format!("echo 'not json {PLUGIN_PASSWORD}'"), "not JSON"),
        (
            format!(
                "echo '{}'",
                ok.replace(API, "credentialprovider.kubelet.k8s.io/v1beta1")
            ),
            "apiVersion from credential plugin response did not match",
        ),
        (
            format!("echo '{}'", ok.replace("\"Image\"", "\"Pod\"")),
            "did not return a valid cacheKeyType",
        ),
        (
            format!(
                "echo '{}'",
                ok.replace("\"username\":\"robot\"", "\"username\":7")
            ),
            "error decoding credential provider plugin response from stdout",
        ),
        (
            "exec sleep 30".to_owned(),
            "no answer within 300ms (killed)",
        ),
    ];
    for (body, want) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("p");
        std::fs::write(&path, format!("#!/bin/sh\ncat > /dev/null\n{body}\n")).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let config = write_config(dir.path(), "p", r#"["*.example.com"]"#, "0s");
        let plugins = PluginProviders::load(&config, dir.path())
            .expect("valid")
            .with_timeout(Duration::from_millis(300));
        let err = sources(plugins)
            .lookup("a.example.com/x", &[], at(0))
            .await
            .expect_err(&body)
            .to_string();
        assert!(
            err.starts_with("credential provider p: ") && err.contains(want),
            "{err}"
        );
        assert!(!err.contains(PLUGIN_PASSWORD), "{err}");
    }
}

/// config_test.go's validation, and RegisterCredentialProviderPlugins' checks of the bin dir
/// and the executables.
#[test]
fn invalid_provider_configs_are_refused_with_the_kubelets_messages() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_plugin(dir.path(), "p", "{}");
    let provider = |fields: &str| {
        format!(
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- {fields}\n"
        )
    };
    let good = "name: p\n  matchImages: ['*.example.com']\n  defaultCacheDuration: 1m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1";
    let cases = [
        (
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders: []\n"
                .to_owned(),
            "at least 1 item in plugins is required",
        ),
        (
            provider(&good.replace("name: p", "name: ''")),
            "name is required",
        ),
        (
            provider(&good.replace("name: p", "name: a/b")),
            "provider name cannot contain '/'",
        ),
        (
            provider(&good.replace("name: p", "name: ..")),
            "provider name cannot be '.' or '..'",
        ),
        (
            provider(&good.replace("  matchImages: ['*.example.com']\n", "")),
            "at least 1 item in matchImages is required",
        ),
        (
            provider(&good.replace("*.example.com", "bad host")),
            "match image is invalid",
        ),
        (
            provider(&good.replace("  defaultCacheDuration: 1m\n", "")),
            "defaultCacheDuration is required",
        ),
        (
            provider(&good.replace("1m", "-1m")),
            "defaultCacheDuration must be greater than or equal to 0",
        ),
        (
            provider(&good.replace("credentialprovider.kubelet.k8s.io/v1", "v2")),
            "supported values",
        ),
        (
            provider(good).replace("kubelet.config.k8s.io/v1\n", "v9\n"),
            "apiVersion: Unsupported value",
        ),
        (
            format!("{}- {good}\n", provider(good)),
            "Duplicate value: \"p\"",
        ),
        (
            provider(&good.replace("name: p", "name: q")),
            "plugin binary executable",
        ),
        ("providers: [".to_owned(), "not valid YAML or JSON"),
    ];
    for (text, want) in cases {
        let config = dir.path().join("config.yaml");
        std::fs::write(&config, &text).expect("write");
        let err = PluginProviders::load(&config, dir.path())
            .expect_err(&text)
            .to_string();
        assert!(err.contains(want), "{text}\n=> {err}");
    }
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, provider(good)).expect("write");
    assert!(PluginProviders::load(&config, dir.path()).is_ok());
    let err = PluginProviders::load(&config, &dir.path().join("missing"))
        .expect_err("no bin dir")
        .to_string();
    assert!(
        err.contains("plugin binary directory") && err.contains("did not exist"),
        "{err}"
    );
}
