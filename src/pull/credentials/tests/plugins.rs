//! Credential provider plugins, run for real: small shell scripts written by each test
//! (`plugin/plugin_test.go`'s cases for the cache, `config_test.go`'s for validation).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use crate::model::UnixNanos;
use crate::pull::credentials::{CredentialSources, PluginProviders, plugin};

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

/// A cache case: (cacheKeyType, cacheDuration, defaultCacheDuration, lookups: (image, seconds
/// after T0, runs after the lookup)).
type CacheCase = (
    &'static str,
    Option<&'static str>,
    &'static str,
    Vec<(&'static str, i64, usize)>,
);

/// plugin_test.go's cache cases: per key type, lookups within and past the duration, and the
/// provider's default when the response has none.
fn cache_cases() -> Vec<CacheCase> {
    vec![
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
    ]
}

/// plugin.go's cache: a response is kept for its cacheDuration (or the provider's default when
/// it has none; 0 keeps nothing) under the image, its registry, or one global key, and
/// expiry is judged by the `now` given (the injected clock).
#[tokio::test]
async fn plugin_answers_are_cached_by_their_key_type_for_their_duration() {
    for (key_type, duration, default, lookups) in cache_cases() {
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
        // Issue 41: the value itself is not echoed (it reached the backoff's last error).
        (
            format!(
                "echo '{}'",
                ok.replace("\"Image\"", &format!("\"{PLUGIN_PASSWORD}\""))
            ),
            "did not return a valid cacheKeyType (a value of",
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

/// A valid provider's fields, as YAML under `providers:`.
const GOOD_PROVIDER: &str = "name: p\n  matchImages: ['*.example.com']\n  defaultCacheDuration: 1m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1";

/// A `CredentialProviderConfig` of one provider with `fields`.
fn config_with_provider(fields: &str) -> String {
    format!(
        "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- {fields}\n"
    )
}

/// config_test.go's invalid configs and what the error must say: no providers, names,
/// matchImages, cache durations, API versions, a duplicate, a missing executable, bad YAML.
fn invalid_config_cases() -> Vec<(String, &'static str)> {
    vec![
        (
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders: []\n"
                .to_owned(),
            "at least 1 item in plugins is required",
        ),
        (
            config_with_provider(&GOOD_PROVIDER.replace("name: p", "name: ''")),
            "name is required",
        ),
        (
            config_with_provider(&GOOD_PROVIDER.replace("name: p", "name: a/b")),
            "provider name cannot contain '/'",
        ),
        (
            config_with_provider(&GOOD_PROVIDER.replace("name: p", "name: ..")),
            "provider name cannot be '.' or '..'",
        ),
        (
            config_with_provider(&GOOD_PROVIDER.replace("  matchImages: ['*.example.com']\n", "")),
            "at least 1 item in matchImages is required",
        ),
        (
            config_with_provider(&GOOD_PROVIDER.replace("*.example.com", "bad host")),
            "match image is invalid",
        ),
        (
            config_with_provider(&GOOD_PROVIDER.replace("  defaultCacheDuration: 1m\n", "")),
            "defaultCacheDuration is required",
        ),
        (
            config_with_provider(&GOOD_PROVIDER.replace("1m", "-1m")),
            "defaultCacheDuration must be greater than or equal to 0",
        ),
        (
            config_with_provider(
                &GOOD_PROVIDER.replace("credentialprovider.kubelet.k8s.io/v1", "v2"),
            ),
            "supported values",
        ),
        (
            config_with_provider(GOOD_PROVIDER).replace("kubelet.config.k8s.io/v1\n", "v9\n"),
            "apiVersion: Unsupported value",
        ),
        (
            format!("{}- {GOOD_PROVIDER}\n", config_with_provider(GOOD_PROVIDER)),
            "duplicate provider name \"p\" found in configuration file(s)",
        ),
        (
            config_with_provider(&GOOD_PROVIDER.replace("name: p", "name: q")),
            "plugin binary executable",
        ),
        ("providers: [".to_owned(), "not valid YAML or JSON"),
    ]
}

/// KEP-4412's invalid `tokenAttributes` (config.go), the gate on as from 1.34, and the
/// kubelet's message for each.
fn invalid_token_attributes_cases() -> Vec<(String, &'static str)> {
    vec![
        (
            config_with_provider(&format!(
                "{GOOD_PROVIDER}\n  tokenAttributes: {{serviceAccountTokenAudience: a, requireServiceAccount: true}}"
            )),
            "providers[0].tokenAttributes.cacheType: Required value: cacheType is required to be set when tokenAttributes is specified. Supported values are: ServiceAccount, Token",
        ),
        (
            config_with_provider(&format!(
                "{GOOD_PROVIDER}\n  tokenAttributes: {{serviceAccountTokenAudience: a, requireServiceAccount: true, cacheType: Pod}}"
            )),
            "providers[0].tokenAttributes.cacheType: Unsupported value: \"Pod\"",
        ),
        (
            config_with_provider(&format!(
                "{}\n  tokenAttributes: {{serviceAccountTokenAudience: a, requireServiceAccount: true, cacheType: Token}}",
                GOOD_PROVIDER.replace(
                    "credentialprovider.kubelet.k8s.io/v1",
                    "credentialprovider.kubelet.k8s.io/v1beta1"
                )
            )),
            "providers[0].tokenAttributes: Forbidden: tokenAttributes is only supported for credentialprovider.kubelet.k8s.io/v1 API version",
        ),
        (
            config_with_provider(&format!(
                "{GOOD_PROVIDER}\n  tokenAttributes: {{cacheType: Token}}"
            )),
            "[providers[0].tokenAttributes.serviceAccountTokenAudience: Required value, providers[0].tokenAttributes.requireServiceAccount: Required value]",
        ),
        (
            config_with_provider(&format!(
                "{GOOD_PROVIDER}\n  tokenAttributes: {{serviceAccountTokenAudience: a, requireServiceAccount: false, cacheType: Token, requiredServiceAccountAnnotationKeys: [k]}}"
            )),
            "providers[0].tokenAttributes.requiredServiceAccountAnnotationKeys: Forbidden: requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set",
        ),
        (
            config_with_provider(&format!(
                "{GOOD_PROVIDER}\n  tokenAttributes: {{serviceAccountTokenAudience: a, requireServiceAccount: true, cacheType: Token, requiredServiceAccountAnnotationKeys: [k, j], optionalServiceAccountAnnotationKeys: [k, k]}}"
            )),
            "[providers[0].tokenAttributes.optionalServiceAccountAnnotationKeys: Duplicate value: \"k\", providers[0].tokenAttributes: Invalid value: [\"k\"]: annotation keys cannot be both required and optional]",
        ),
        (
            config_with_provider(&format!(
                "{GOOD_PROVIDER}\n  tokenAttributes: {{serviceAccountTokenAudience: a, requireServiceAccount: true, cacheType: Token, optionalServiceAccountAnnotationKeys: ['example.com/Role', '-x', 'a/b/c', 'Bad_Prefix/x']}}"
            )),
            "[providers[0].tokenAttributes.optionalServiceAccountAnnotationKeys: Invalid value: \"-x\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]'), providers[0].tokenAttributes.optionalServiceAccountAnnotationKeys: Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName'), providers[0].tokenAttributes.optionalServiceAccountAnnotationKeys: Invalid value: \"Bad_Prefix/x\": prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')]",
        ),
    ]
}

/// config_test.go's validation, and RegisterCredentialProviderPlugins' checks of the bin dir
/// and the executables.
#[test]
fn invalid_provider_configs_are_refused_with_the_kubelets_messages() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_plugin(dir.path(), "p", "{}");
    for (text, want) in invalid_config_cases()
        .into_iter()
        .chain(invalid_token_attributes_cases())
    {
        let config = dir.path().join("config.yaml");
        std::fs::write(&config, &text).expect("write");
        let err = PluginProviders::load(&config, dir.path())
            .expect_err(&text)
            .to_string();
        assert!(err.contains(want), "{text}\n=> {err}");
    }
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, config_with_provider(GOOD_PROVIDER)).expect("write");
    assert!(PluginProviders::load(&config, dir.path()).is_ok());
    let err = PluginProviders::load(&config, &dir.path().join("missing"))
        .expect_err("no bin dir")
        .to_string();
    assert!(
        err.contains("plugin binary directory") && err.contains("did not exist"),
        "{err}"
    );
}

/// The validation error prints its list of errors as the kubelet's `utilerrors.NewAggregate`
/// does: a message repeated (by two providers alike) is printed once, in first-seen order.
#[test]
fn a_validation_errors_repeated_messages_are_printed_once() {
    let name = "providers[0].name: Required value: name is required";
    let cache =
        "providers[0].defaultCacheDuration: Required value: defaultCacheDuration is required";
    let err = plugin::ProviderConfigError::Invalid {
        path: "/etc/kubernetes/credential-provider.yaml".into(),
        errors: vec![name.to_owned(), cache.to_owned(), name.to_owned()],
    };
    assert_eq!(
        err.to_string(),
        "failed to validate credential provider config /etc/kubernetes/credential-provider.yaml: \
         [providers[0].name: Required value: name is required, \
         providers[0].defaultCacheDuration: Required value: defaultCacheDuration is required]"
    );
}

/// A provider config `with` a provider `name` in service account token mode
/// (`tokenAttributes`), requiring a service account or not.
fn token_mode_config(dir: &Path, name: &str, require: bool) -> std::path::PathBuf {
    let path = dir.join("config.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: {name}\n  matchImages: ['*.example.com']\n  defaultCacheDuration: 0s\n  apiVersion: {API}\n  tokenAttributes:\n    serviceAccountTokenAudience: registry.example.com\n    requireServiceAccount: {require}\n    cacheType: ServiceAccount\n"
        ),
    )
    .expect("write config");
    path
}

/// plugin.go `provide` with an empty service account name (imagekeeper's pulls have none): a
/// token-mode provider that requires a service account gives nothing and is not run; one
/// that does not is run as any other, without a token.
#[tokio::test]
async fn token_mode_providers_run_only_when_they_do_not_require_a_service_account() {
    for (require, want_runs, want_users) in [(true, 0, vec![]), (false, 1, vec!["robot"])] {
        let dir = tempfile::tempdir().expect("tempdir");
        write_plugin(dir.path(), "sa", &response("Image", None));
        let config = token_mode_config(dir.path(), "sa", require);
        let sources = sources(PluginProviders::load(&config, dir.path()).expect("valid config"));
        let found = sources
            .lookup("reg.example.com/team/app", &[], at(0))
            .await
            .expect("no failure");
        let users: Vec<&str> = found.iter().map(|c| c.username.as_str()).collect();
        assert_eq!(users, want_users, "requireServiceAccount: {require}");
        assert_eq!(
            runs(dir.path()),
            want_runs,
            "requireServiceAccount: {require}"
        );
    }
}

fn provider_yaml(name: &str, user: &str, dir: &Path) -> String {
    write_plugin_answering(dir, name, user);
    format!(
        "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: {name}\n  matchImages: ['*.example.com']\n  defaultCacheDuration: 0s\n  apiVersion: {API}\n"
    )
}

/// A plugin `name` that answers `user` for `reg.example.com`.
fn write_plugin_answering(dir: &Path, name: &str, user: &str) {
    let path = dir.join(name);
    let answer = format!(
        r#"{{"kind":"CredentialProviderResponse","apiVersion":"{API}","cacheKeyType":"Image","auth":{{"reg.example.com":{{"username":"{user}","password":"p"}}}}}}"#
    );
    std::fs::write(
        &path,
        format!("#!/bin/sh\ncat > /dev/null\necho '{answer}'\n"),
    )
    .expect("write plugin");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// config.go `readCredentialProviderConfig` (kubelet 1.34): a directory's `*.json`, `*.yaml`
/// and `*.yml` files, in lexical order, merged; other files and directories skipped; a
/// provider named in two files, or a directory without config files, refused.
#[tokio::test]
async fn a_provider_config_directory_merges_its_files_in_lexical_order() {
    let bin = tempfile::tempdir().expect("tempdir");
    let configs = tempfile::tempdir().expect("tempdir");
    let d = configs.path();
    std::fs::write(d.join("20-b.yml"), provider_yaml("b", "bee", bin.path())).expect("write");
    std::fs::write(d.join("10-a.yaml"), provider_yaml("a", "ay", bin.path())).expect("write");
    // JSON is YAML too; a .txt file and a directory named like a config are not read.
    std::fs::write(
        d.join("30-c.json"),
        format!(
            r#"{{"apiVersion":"kubelet.config.k8s.io/v1","kind":"CredentialProviderConfig","providers":[{{"name":"c","matchImages":["*.example.com"],"defaultCacheDuration":"0s","apiVersion":"{API}"}}]}}"#
        ),
    )
    .expect("write");
    write_plugin_answering(bin.path(), "c", "sea");
    std::fs::write(d.join("00-notes.txt"), "not a config").expect("write");
    std::fs::create_dir(d.join("05-dir.yaml")).expect("mkdir");

    let plugins = PluginProviders::load(d, bin.path()).expect("a valid directory");
    assert!(
        format!("{plugins:?}").contains(r#"["a", "b", "c"]"#),
        "{plugins:?}"
    );
    let found = sources(plugins)
        .lookup("reg.example.com/app", &[], at(0))
        .await
        .expect("the plugins answer");
    let users: Vec<&str> = found.iter().map(|c| c.username.as_str()).collect();
    assert_eq!(users, ["ay", "bee", "sea"]);

    std::fs::write(
        d.join("40-again.yaml"),
        provider_yaml("b", "b2", bin.path()),
    )
    .expect("write");
    let err = PluginProviders::load(d, bin.path())
        .expect_err("b twice")
        .to_string();
    assert_eq!(
        err,
        format!(
            "{}: duplicate provider name \"b\" found in configuration file(s)",
            d.join("40-again.yaml").display()
        )
    );

    let empty = tempfile::tempdir().expect("tempdir");
    std::fs::write(empty.path().join("README"), "no configs here").expect("write");
    let err = PluginProviders::load(empty.path(), bin.path())
        .expect_err("no config file")
        .to_string();
    assert_eq!(
        err,
        format!(
            "no configuration files found in directory \"{}\"",
            empty.path().display()
        )
    );
}

/// The reload check's snapshot covers every file of a config directory: an edit in place of
/// any of them changes it, a file that is not a config does not.
#[test]
fn the_config_snapshot_covers_every_file_of_a_directory() {
    let bin = tempfile::tempdir().expect("tempdir");
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        d.path().join("a.yaml"),
        provider_yaml("a", "ay", bin.path()),
    )
    .expect("write");
    std::fs::write(
        d.path().join("b.yaml"),
        provider_yaml("b", "bee", bin.path()),
    )
    .expect("write");
    let start = plugin::config_snapshot(d.path()).expect("a directory with configs");
    std::fs::write(d.path().join("notes.txt"), "x").expect("write");
    assert_eq!(plugin::config_snapshot(d.path()).as_ref(), Some(&start));
    std::fs::write(
        d.path().join("b.yaml"),
        provider_yaml("b", "bee", bin.path()).replace("0s", "1m"),
    )
    .expect("edit in place");
    assert_ne!(plugin::config_snapshot(d.path()).as_ref(), Some(&start));
}

/// Whether the process `pid` has ended (exited, or a zombie), waiting for it at most
/// `bound` through a pidfd (readable once the process has exited): a signal, not a poll of
/// its state. The bound only turns a survivor into a failure.
fn has_ended_within(pid: libc::pid_t, bound: Duration) -> bool {
    // SAFETY: pidfd_open(2) takes a pid and flags, no pointers; the result is checked.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        // ESRCH: no such process (already reaped).
        return std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    }
    let fd = fd as libc::c_int;
    let mut poll = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, its count, a timeout; then our own descriptor is closed.
    let ready = unsafe { libc::poll(&mut poll, 1, bound.as_millis() as libc::c_int) };
    unsafe { libc::close(fd) };
    ready == 1
}

fn recorded_pid(path: &Path) -> libc::pid_t {
    std::fs::read_to_string(path)
        .expect("the plugin recorded the pid")
        .trim()
        .parse()
        .expect("a pid")
}

/// A plugin script `p` in `dir` reading its request, then running `body`.
fn plugin_script(dir: &Path, body: &str) -> std::path::PathBuf {
    let path = dir.join("p");
    std::fs::write(&path, format!("#!/bin/sh\ncat > /dev/null\n{body}\n")).expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    write_config(dir, "p", r#"["*.example.com"]"#, "0s")
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL");
    // SAFETY: a valid C string and a mode.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// A plugin that prints without end is refused once its stdout passes the cap (the kubelet
/// would read it all: 4.2 GB and an abort), and its process group is killed: the child
/// writing (started only once its pid is recorded, through a FIFO gate) has ended, and so has
/// a child that does not write (no SIGPIPE would end it: only the group's kill does).
#[tokio::test]
async fn a_plugin_printing_without_end_is_refused_and_its_group_killed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().display();
    mkfifo(&dir.path().join("gate"));
    let config = plugin_script(
        dir.path(),
        &format!(
            "sleep 1000 &\necho $! > {d}/sleeper.pid\nsh -c 'read _ < {d}/gate; exec yes' &\necho $! > {d}/child.pid\necho go > {d}/gate\nwait"
        ),
    );
    let plugins = PluginProviders::load(&config, dir.path())
        .expect("valid")
        .with_timeout(Duration::from_secs(120));
    let err = sources(plugins)
        .lookup("a.example.com/x", &[], at(0))
        .await
        .expect_err("too much output")
        .to_string();
    assert_eq!(
        err,
        format!(
            "credential provider p: error execing credential provider plugin p for image a.example.com/x: the plugin's stdout is too large (more than {} bytes; killed)",
            plugin::MAX_PLUGIN_STDOUT_BYTES
        )
    );
    let child = recorded_pid(&dir.path().join("child.pid"));
    assert!(
        has_ended_within(child, Duration::from_secs(10)),
        "yes ({child}) survived"
    );
    let sleeper = recorded_pid(&dir.path().join("sleeper.pid"));
    assert!(
        has_ended_within(sleeper, Duration::from_secs(10)),
        "sleep ({sleeper}) survived"
    );
}

/// A plugin that leaves a child holding its stdout open, answers and exits: its answer is
/// used at once (the kubelet's exec would wait for the child to close stdout).
#[tokio::test]
async fn a_plugins_answer_is_used_once_it_exits_though_a_child_keeps_stdout_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().display();
    let config = plugin_script(
        dir.path(),
        &format!(
            "sleep 1000 &\necho $! > {d}/child.pid\necho '{}'",
            response("Image", None)
        ),
    );
    // Without the early return the lookup would end only at this timeout, as an error.
    let plugins = PluginProviders::load(&config, dir.path())
        .expect("valid")
        .with_timeout(Duration::from_secs(30));
    let found = sources(plugins).lookup("a.example.com/x", &[], at(0)).await;
    let child = recorded_pid(&dir.path().join("child.pid"));
    // The sleeper is left alone by imagekeeper; the test ends it.
    // SAFETY: kill(2) of the sleeper the plugin started.
    unsafe { libc::kill(child, libc::SIGKILL) };
    let found = found.expect("the plugin answered and exited");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].username, "robot");
}

/// A plugin past its timeout is killed with its whole process group: the child it forked
/// (which does not write, so no SIGPIPE would end it) has ended too. Paused time: the
/// timeout fires only once the plugin has recorded its child's pid (the blocking read of
/// the handshake FIFO holds the clock).
#[tokio::test(start_paused = true)]
async fn a_timed_out_plugin_is_killed_with_the_children_it_forked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().display();
    mkfifo(&dir.path().join("ready"));
    let config = plugin_script(
        dir.path(),
        &format!("sleep 1000 &\necho $! > {d}/child.pid\necho ready > {d}/ready\nwait"),
    );
    let plugins = PluginProviders::load(&config, dir.path()).expect("valid");
    let ready = dir.path().join("ready");
    // While this blocking task runs, paused time does not auto-advance.
    let handshake = tokio::task::spawn_blocking(move || std::fs::read(ready));
    let err = sources(plugins)
        .lookup("a.example.com/x", &[], at(0))
        .await
        .expect_err("no answer")
        .to_string();
    handshake
        .await
        .expect("joined")
        .expect("the plugin wrote the handshake");
    assert!(err.ends_with("no answer within 1m0s (killed)"), "{err}");
    let child = recorded_pid(&dir.path().join("child.pid"));
    assert!(
        has_ended_within(child, Duration::from_secs(10)),
        "sleep ({child}) survived"
    );
}
