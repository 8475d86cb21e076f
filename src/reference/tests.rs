//! Image references: parsing against distribution/reference's cases, the default tag,
//! matching as a runtime resolves names (and the match index's agreement with it), and
//! credentials in names.

use super::*;

const HEX64: &str = "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff";

/// (input, Ok((name, tag, digest)) or Err(message)) under ParseNormalizedNamed. Inputs are
/// distribution/reference's reference_test.go (TestReferenceParse) and normalize_test.go
/// cases, re-expressed with the Docker Hub normalization applied.
#[test]
fn parse_normalized_matches_distribution_reference() {
    type Want<'a> = Result<(&'a str, Option<&'a str>, Option<&'a str>), &'a str>;
    let long_ok = format!("{}a", "a/".repeat(127));
    let long_ok_name = format!("docker.io/{long_ok}");
    let long_bad = format!("{}a:tag", "a/".repeat(128));
    let d256 = format!("sha256:{HEX64}");
    let d512 = format!("sha512:{HEX64}{HEX64}");
    let cases: Vec<(String, Want)> = vec![
        (
            "test_com".into(),
            Ok(("docker.io/library/test_com", None, None)),
        ),
        (
            "test.com:tag".into(),
            Ok(("docker.io/library/test.com", Some("tag"), None)),
        ),
        (
            "test.com:5000".into(),
            Ok(("docker.io/library/test.com", Some("5000"), None)),
        ),
        (
            "test.com/repo:tag".into(),
            Ok(("test.com/repo", Some("tag"), None)),
        ),
        ("test:5000/repo".into(), Ok(("test:5000/repo", None, None))),
        (
            "test:5000/repo:tag".into(),
            Ok(("test:5000/repo", Some("tag"), None)),
        ),
        (
            format!("test:5000/repo@{d256}"),
            Ok(("test:5000/repo", None, Some(&d256))),
        ),
        (
            format!("test:5000/repo:tag@{d256}"),
            Ok(("test:5000/repo", Some("tag"), Some(&d256))),
        ),
        ("".into(), Err("invalid reference format")),
        (":justtag".into(), Err("invalid reference format")),
        (format!("@{d256}"), Err("invalid reference format")),
        (
            "repo@sha256:ffffffffffffffffffffffffffffffffff".into(),
            Err("invalid checksum digest length"),
        ),
        (
            format!("validname@invaliddigest:{HEX64}"),
            Err("unsupported digest algorithm"),
        ),
        (
            "Uppercase:tag".into(),
            Err("invalid reference format: repository name (library/Uppercase) must be lowercase"),
        ),
        // "Uppercase" is a domain here: an uppercase first component is a registry.
        (
            "Uppercase/lowercase:tag".into(),
            Ok(("Uppercase/lowercase", Some("tag"), None)),
        ),
        (
            "test:5000/Uppercase/lowercase:tag".into(),
            Err(
                "invalid reference format: repository name (Uppercase/lowercase) must be lowercase",
            ),
        ),
        (
            "lowercase:Uppercase".into(),
            Ok(("docker.io/library/lowercase", Some("Uppercase"), None)),
        ),
        (
            long_bad,
            Err("repository name must not be more than 255 characters"),
        ),
        (
            format!("{long_ok}:tag-puts-this-over-max"),
            Ok((&long_ok_name, Some("tag-puts-this-over-max"), None)),
        ),
        ("aa/asdf$$^/aa".into(), Err("invalid reference format")),
        (
            "sub-dom1.foo.com/bar/baz/quux".into(),
            Ok(("sub-dom1.foo.com/bar/baz/quux", None, None)),
        ),
        (
            "b.gcr.io/test.example.com/my-app:test.example.com".into(),
            Ok((
                "b.gcr.io/test.example.com/my-app",
                Some("test.example.com"),
                None,
            )),
        ),
        (
            format!("xn--7o8h.com/myimage:xn--7o8h.com@{d512}"),
            Ok(("xn--7o8h.com/myimage", Some("xn--7o8h.com"), Some(&d512))),
        ),
        (
            "foo_bar.com:8080".into(),
            Ok(("docker.io/library/foo_bar.com", Some("8080"), None)),
        ),
        (
            "foo/foo_bar.com:8080".into(),
            Ok(("docker.io/foo/foo_bar.com", Some("8080"), None)),
        ),
        (
            "192.168.1.1".into(),
            Ok(("docker.io/library/192.168.1.1", None, None)),
        ),
        (
            "192.168.1.1:5000/repo:5050".into(),
            Ok(("192.168.1.1:5000/repo", Some("5050"), None)),
        ),
        ("[2001:db8::1]".into(), Err("invalid reference format")),
        ("[2001:db8::1]:5000".into(), Err("invalid reference format")),
        (
            "[2001:db8::1]/repo".into(),
            Ok(("[2001:db8::1]/repo", None, None)),
        ),
        (
            "[2001:db8:1:2:3:4:5:6]/repo:tag".into(),
            Ok(("[2001:db8:1:2:3:4:5:6]/repo", Some("tag"), None)),
        ),
        (
            format!("[2001:db8::1]:5000/repo:tag@{d256}"),
            Ok(("[2001:db8::1]:5000/repo", Some("tag"), Some(&d256))),
        ),
        (
            "[::1]:5000/repo".into(),
            Ok(("[::1]:5000/repo", None, None)),
        ),
        (
            "[fe80::1]:5000/foo:bar".into(),
            Ok(("[fe80::1]:5000/foo", Some("bar"), None)),
        ),
        (
            "[fe80::1%eth0]:5000/repo".into(),
            Err("invalid reference format"),
        ),
        (
            "[fe80::1%@invalidzone]:5000/repo".into(),
            Err("invalid reference format"),
        ),
        // normalize_test.go
        (
            "busybox".into(),
            Ok(("docker.io/library/busybox", None, None)),
        ),
        (
            "docker.io/busybox".into(),
            Ok(("docker.io/library/busybox", None, None)),
        ),
        (
            "index.docker.io/busybox:1".into(),
            Ok(("docker.io/library/busybox", Some("1"), None)),
        ),
        ("localhost/foo".into(), Ok(("localhost/foo", None, None))),
        (
            "localhost:5000/foo/bar".into(),
            Ok(("localhost:5000/foo/bar", None, None)),
        ),
        (
            "library/ubuntu".into(),
            Ok(("docker.io/library/ubuntu", None, None)),
        ),
        (
            "dmcgowan/myapp:1.0".into(),
            Ok(("docker.io/dmcgowan/myapp", Some("1.0"), None)),
        ),
        (
            "a__b/c--d/e.f".into(),
            Ok(("docker.io/a__b/c--d/e.f", None, None)),
        ),
        ("a___b".into(), Err("invalid reference format")),
        ("-foo".into(), Err("invalid reference format")),
        ("foo-".into(), Err("invalid reference format")),
        ("foo/".into(), Err("invalid reference format")),
        ("http://url".into(), Err("invalid reference format")),
        (
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad".into(),
            Err(
                "invalid repository name (ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad), cannot specify 64-byte hexadecimal strings",
            ),
        ),
        (
            format!("foo@sha256:{}", HEX64.to_uppercase()),
            Err("invalid checksum digest format"),
        ),
        ("foo:t\u{e4}g".into(), Err("invalid reference format")),
        (
            "Foo_bar/baz".into(),
            Err("repository name must be lowercase"),
        ),
        (
            "foo_bar.com/baz".into(),
            Ok(("foo_bar.com/baz", None, None)),
        ),
    ];
    for (input, want) in cases {
        let got = ImageReference::parse_normalized(&input);
        match (&got, &want) {
            (Ok(r), Ok((name, tag, digest))) => {
                assert_eq!(r.name(), *name, "name of {input:?}");
                assert_eq!(r.tag(), *tag, "tag of {input:?}");
                assert_eq!(r.digest(), *digest, "digest of {input:?}");
            }
            (Err(e), Err(msg)) => assert_eq!(e.to_string(), *msg, "error of {input:?}"),
            _ => panic!("{input:?}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn default_tag_is_appended_to_the_name_as_written() {
    let d = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    let cases = [
        ("root".to_owned(), "root:latest".to_owned()),
        ("root:tag".to_owned(), "root:tag".to_owned()),
        (format!("root@{d}"), format!("root@{d}")),
        (format!("root:latest@{d}"), format!("root:latest@{d}")),
        ("root:latest".to_owned(), "root:latest".to_owned()),
        ("quay.io/a/b".to_owned(), "quay.io/a/b:latest".to_owned()),
        (
            "[fe80::1]:5000/foo".to_owned(),
            "[fe80::1]:5000/foo:latest".to_owned(),
        ),
    ];
    for (input, want) in cases {
        assert_eq!(apply_default_image_tag(&input), Ok(want), "{input}");
    }
}

#[test]
fn default_tag_error_is_kubelets_message() {
    assert_eq!(
        apply_default_image_tag("FAILED_IMAGE").unwrap_err(),
        "couldn't parse image name \"FAILED_IMAGE\": invalid reference format: repository name (library/FAILED_IMAGE) must be lowercase"
    );
    assert_eq!(
        apply_default_image_tag("http://url").unwrap_err(),
        "couldn't parse image name \"http://url\": invalid reference format"
    );
}

mod props {
    use super::super::*;
    use proptest::prelude::*;

    /// How the parser read the part after the domain before it was written by hand: oci-spec's
    /// `Reference` of `placeholder.invalid/<remainder>` (a domain it keeps as written), its
    /// errors mapped as they were.
    fn oci_spec_remainder(remainder: &str) -> Result<(String, Option<String>), ReferenceError> {
        use oci_spec::distribution::{ParseError, Reference};
        match Reference::try_from(format!("placeholder.invalid/{remainder}")) {
            Ok(r) if r.registry() == "placeholder.invalid" => {
                Ok((r.repository().to_owned(), r.digest().map(str::to_owned)))
            }
            Ok(_) => Err(ReferenceError::InvalidFormat),
            Err(e) => Err(match e {
                ParseError::DigestInvalidFormat => ReferenceError::DigestInvalidFormat,
                ParseError::DigestInvalidLength => ReferenceError::DigestInvalidLength,
                ParseError::DigestUnsupported => ReferenceError::DigestUnsupported,
                ParseError::NameContainsUppercase => ReferenceError::NameContainsUppercase,
                ParseError::NameEmpty => ReferenceError::NameEmpty,
                ParseError::NameTooLong => ReferenceError::NameTooLong,
                ParseError::ReferenceInvalidFormat | ParseError::TagInvalidFormat => {
                    ReferenceError::InvalidFormat
                }
            }),
        }
    }

    fn reference_like() -> impl Strategy<Value = String> {
        let domain = prop_oneof![
            Just(String::new()),
            "[a-zA-Z0-9][a-zA-Z0-9.-]{0,10}(:[0-9]{1,5})?/",
            "\\[[0-9a-fA-F:]{1,12}\\](:[0-9]{1,4})?/",
            Just("localhost/".to_owned()),
            Just("index.docker.io/".to_owned()),
        ];
        let path = "[a-z0-9]{1,5}([._-]{1,2}[a-z0-9]{1,5}){0,2}(/[a-z0-9_.-]{1,8}){0,3}";
        let tag = prop_oneof![Just(String::new()), ":[A-Za-z0-9_][A-Za-z0-9_.-]{0,10}"];
        let digest = prop_oneof![
            Just(String::new()),
            "@sha256:[a-f0-9]{64}",
            "@sha512:[a-fA-F0-9]{128}",
            "@[a-z]{1,6}:[a-f0-9]{32,40}",
        ];
        (domain, path, tag, digest).prop_map(|(d, p, t, g)| format!("{d}{p}{t}{g}"))
    }

    proptest! {
        #[test]
        fn what_parses_reserializes_to_the_same_reference(s in reference_like()) {
            if let Ok(r) = ImageReference::parse_normalized(&s) {
                let again = ImageReference::parse_normalized(&r.to_string());
                prop_assert_eq!(again, Ok(r));
            }
        }

        #[test]
        fn parse_never_panics_on_any_string(s in "\\PC{0,80}") {
            let _ = ImageReference::parse_normalized(&s);
            let _ = apply_default_image_tag(&s);
        }

        #[test]
        fn the_hand_grammar_reads_every_remainder_as_the_oci_spec_parse_it_replaced(
            s in prop_oneof![
                reference_like(),
                "[a-zA-Z0-9:/@._+-]{0,60}",
                "[a-z0-9]{1,3}(/[a-z0-9._-]{1,90}){1,4}(:[a-zA-Z0-9._-]{100,140})?(@[a-zA-Z0-9+._-]{1,8}:[0-9a-fA-F]{20,130})?",
            ]
        ) {
            let (_, remainder) = split_docker_domain(&s);
            prop_assert_eq!(
                split_remainder(&remainder).map(|(p, d)| (p.to_owned(), d.map(str::to_owned))),
                oci_spec_remainder(&remainder)
            );
        }

        #[test]
        fn parse_never_panics_on_ascii_soup(s in "[a-zA-Z0-9:/@._\\[\\]-]{0,60}") {
            if let Ok(r) = ImageReference::parse_normalized(&s) {
                prop_assert_eq!(ImageReference::parse_normalized(&r.to_string()), Ok(r));
            }
        }
    }
}

/// The sandbox image and in-flight pulls are matched as the runtime resolves names.
#[test]
fn image_matches_names_as_the_runtime_resolves_them() {
    let digest = format!("sha256:{HEX64}");
    let pause = crate::model::RuntimeImage {
        id: crate::model::ImageId::new("sha256:1111"),
        repo_tags: vec!["registry.k8s.io/pause:3.9".into()],
        repo_digests: vec![format!("registry.k8s.io/pause@{digest}")],
        ..Default::default()
    };
    let busybox = crate::model::RuntimeImage {
        id: crate::model::ImageId::new("sha256:2222"),
        repo_tags: vec!["docker.io/library/busybox:latest".into()],
        ..Default::default()
    };
    let cases: Vec<(String, &crate::model::RuntimeImage, bool)> = vec![
        ("registry.k8s.io/pause:3.9".into(), &pause, true),
        ("registry.k8s.io/pause:3.8".into(), &pause, false),
        (format!("registry.k8s.io/pause@{digest}"), &pause, true),
        (format!("registry.k8s.io/pause:3.8@{digest}"), &pause, true),
        (format!("other.io/pause@{digest}"), &pause, false),
        ("sha256:1111".into(), &pause, true),
        ("pause:3.9".into(), &pause, true),
        ("pause:3.8".into(), &pause, false),
        ("library/pause:3.9".into(), &pause, true),
        ("other.io/pause:3.9".into(), &pause, false),
        ("busybox".into(), &busybox, true),
        ("busybox:latest".into(), &busybox, true),
        ("library/busybox".into(), &busybox, true),
        ("docker.io/busybox:latest".into(), &busybox, true),
        ("busybox:1.35".into(), &busybox, false),
        ("".into(), &busybox, false),
        ("Not A Reference".into(), &busybox, false),
    ];
    for (name, image, want) in cases {
        assert_eq!(
            image_matches(&name, image),
            want,
            "{name} vs {:?}",
            image.repo_tags
        );
    }
}

/// `MatchIndex` answers what `image_matches` answers, pair by pair: every name of a pool
/// (short names, Docker Hub forms, registries, digests, ids, junk) against images listing
/// one or two of the pool's names as tags or digests, under two handlers.
#[test]
fn the_match_index_answers_exactly_what_image_matches_answers() {
    let digest = format!("sha256:{HEX64}");
    let other = format!("sha256:{}", "b".repeat(64));
    let pool: Vec<String> = vec![
        "registry.k8s.io/pause:3.9".into(),
        "registry.k8s.io/pause:3.8".into(),
        format!("registry.k8s.io/pause@{digest}"),
        format!("registry.k8s.io/pause:3.8@{digest}"),
        format!("other.io/pause@{digest}"),
        format!("other.io/pause@{other}"),
        "sha256:1111".into(),
        "pause:3.9".into(),
        "pause".into(),
        "library/pause:3.9".into(),
        "other.io/pause:3.9".into(),
        "busybox".into(),
        "busybox:latest".into(),
        "library/busybox".into(),
        "docker.io/busybox:latest".into(),
        "docker.io/library/busybox:latest".into(),
        "index.docker.io/library/busybox".into(),
        format!("busybox@{digest}"),
        "busybox:1.35".into(),
        "localhost/busybox:1.35".into(),
        "localhost:5000/team/busybox:1.35".into(),
        "team/busybox:1.35".into(),
        String::new(),
        "Not A Reference".into(),
    ];
    let mut images = Vec::new();
    for (i, a) in pool.iter().enumerate() {
        for (j, b) in pool.iter().enumerate().step_by(3) {
            for handler in ["", "runsc"] {
                let (tags, digests): (Vec<String>, Vec<String>) = if a.contains('@') {
                    (vec![b.clone()], vec![a.clone()])
                } else {
                    (vec![a.clone(), b.clone()], Vec::new())
                };
                images.push(crate::model::RuntimeImage {
                    id: crate::model::ImageId::new(if j == 6 {
                        "sha256:1111".to_owned()
                    } else {
                        format!("sha256:{i}-{j}")
                    }),
                    repo_tags: tags,
                    repo_digests: digests,
                    runtime_handler: handler.into(),
                    ..Default::default()
                });
            }
        }
    }
    let names: Vec<(&str, &str)> = pool
        .iter()
        .flat_map(|n| [(n.as_str(), ""), (n.as_str(), "runsc")])
        .collect();
    let by_name = MatchIndex::of_names(names.iter().copied());
    let by_image = MatchIndex::of_images(images.iter());
    let mut matched = 0;
    for (n, (name, handler)) in names.iter().enumerate() {
        let want: Vec<usize> = (0..images.len())
            .filter(|&i| images[i].runtime_handler == *handler && image_matches(name, &images[i]))
            .collect();
        matched += want.len();
        assert_eq!(
            by_image.named_by(name, handler),
            want,
            "{name:?} {handler:?}"
        );
        for (i, image) in images.iter().enumerate() {
            assert_eq!(
                by_name.naming(image).contains(&n),
                want.contains(&i),
                "{name:?} {handler:?} vs {:?} {:?}",
                image.repo_tags,
                image.repo_digests
            );
        }
    }
    assert!(
        matched > 100,
        "the pool must match often to prove anything: {matched}"
    );
}

#[test]
fn credentials_are_found_in_image_names_and_digests_are_not() {
    let digest = format!("sha256:{}", "a".repeat(64));
    let cases = [
        ("user:s3cret@registry.example/app", Some("user:s3cret")),
        (
            "https://user:s3cret@registry.example:5000/app:1",
            Some("user:s3cret"),
        ),
        ("token@registry.example/app", Some("token")),
        ("user:pw@host", Some("user:pw")),
        ("registry.example/app:1", None),
        ("busybox", None),
        (&*format!("busybox@{digest}"), None),
        (&*format!("busybox:1.36@{digest}"), None),
        (&*format!("registry.example/app@{digest}"), None),
    ];
    for (image, want) in cases {
        assert_eq!(credentials_in(image), want, "{image}");
    }
}
