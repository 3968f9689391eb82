//! The agent's configuration: defaults, located errors, refusals and bounds.

use std::path::Path;

use super::*;

const GOOD: &str = r#"
cluster: eu-west
router: {listen: "127.0.0.1:0"}
control: {listen: "127.0.0.1:0"}
workload:
  command: [flotilla, demo-app, --version, "{{version}}", --port, "{{port}}"]
subsets:
  stable: {version: "1.0", replicas: 2}
  canary: {version: "1.1"}
"#;

#[test]
fn a_good_config_parses_with_defaults() {
    let config = AgentConfig::parse(GOOD, "a.yaml").unwrap();
    assert_eq!(config.max_weight, 100);
    assert_eq!(config.router.threads, DEFAULT_ROUTER_THREADS);
    let t = config.template_of("canary").unwrap();
    assert_eq!(
        t.argv("1.1", 4000),
        ["flotilla", "demo-app", "--version", "1.1", "--port", "4000"]
    );
    assert_eq!(t.readiness.path, "/healthz");
}

#[test]
fn errors_name_the_line_column_and_field() {
    let text = GOOD.replace("replicas: 2", "replicas: two");
    let err = AgentConfig::parse(&text, "a.yaml").unwrap_err();
    assert_eq!(err.field, "subsets.stable.replicas");
    assert_eq!(err.line, 8, "{err}");
    assert!(err.to_string().starts_with("a.yaml:8:"), "{err}");

    let text = format!(
        "{GOOD}routes:\n  - name: r\n    subset: canry\n    header: {{name: x-canary, exact: \"true\"}}\n"
    );
    let err = AgentConfig::parse(&text, "a.yaml").unwrap_err();
    assert_eq!(err.field, "routes[0].subset", "{err}");
    assert!(err.message.contains("\"canry\""), "{err}");
    assert_eq!(err.line, 12, "{err}");
}

#[test]
fn bad_configs_are_refused() {
    let cases = [
        (
            GOOD.replace("127.0.0.1:0\"}\ncontrol", "0.0.0.0:80\"}\ncontrol"),
            "loopback",
        ),
        (
            GOOD.replace("  canary: {version: \"1.1\"}\n", ""),
            "\"canary\" is missing",
        ),
        (
            GOOD.replace(
                "127.0.0.1:0\"}\ncontrol",
                "127.0.0.1:0\", threads: 0}\ncontrol",
            ),
            "0 router threads",
        ),
        (GOOD.replace("\"{{port}}\"", "\"8080\""), "{{port}}"),
        (
            GOOD.replace("\"{{port}}\"", "\"{{prot}}\""),
            "unknown placeholder {{prot}}",
        ),
        (
            GOOD.replace(
                "cluster: eu-west",
                "cluster: eu-west\nweights: {canary: 101}",
            ),
            "above maxWeight",
        ),
        (
            GOOD.replace("cluster: eu-west", "cluster: eu-west\nbogus: 1"),
            "unknown field `bogus`",
        ),
    ];
    for (text, needle) in cases {
        let err = AgentConfig::parse(&text, "a.yaml").unwrap_err().to_string();
        assert!(err.contains(needle), "{needle}: {err}");
    }
}

#[test]
fn versions_and_replicas_are_bounded_with_file_line_and_field() {
    // A NUL (or a space, a quote, a newline) in a version crash-looped a replica.
    for version in ["1.0\\u0000", "1.0 beta", "$(id)", "a\\nb", ""] {
        let text = GOOD.replace(
            "stable: {version: \"1.0\", replicas: 2}",
            &format!("stable: {{version: \"{version}\", replicas: 2}}"),
        );
        let err = AgentConfig::parse(&text, "a.yaml").unwrap_err();
        assert_eq!(err.field, "subsets.stable.version", "{version}: {err}");
        assert_eq!(err.line, 8, "{err}");
        assert!(err.to_string().starts_with("a.yaml:8:"), "{err}");
    }
    let long = "9".repeat(MAX_VERSION_LEN + 1);
    let text = GOOD.replace("version: \"1.1\"", &format!("version: \"{long}\""));
    let err = AgentConfig::parse(&text, "a.yaml").unwrap_err();
    assert_eq!(err.field, "subsets.canary.version", "{err}");
    assert!(err.message.contains("1 to 128 characters"), "{err}");
    for good in [
        "1.9.0",
        "v2.0.0-rc.1+build_7",
        "registry.example:5000/app@sha256:ab",
    ] {
        assert_eq!(check_version(good), Ok(()), "{good}");
    }
    for bad in ["../../etc", "app/../x", "/abs", "a/./b", ".."] {
        let err = check_version(bad).unwrap_err();
        assert!(err.contains("must not start with /"), "{bad}: {err}");
    }
    assert_eq!(
        check_version("1..2"),
        Ok(()),
        "dots within a part are a version's"
    );

    let config = AgentConfig::parse(GOOD, "a.yaml").unwrap();
    assert_eq!(config.max_replicas, DEFAULT_MAX_REPLICAS);
    let text = GOOD.replace("replicas: 2", "replicas: 33");
    let err = AgentConfig::parse(&text, "a.yaml").unwrap_err();
    assert_eq!(err.field, "subsets.stable.replicas", "{err}");
    assert!(err.message.contains("maxReplicas (32)"), "{err}");
    let raised = text.replace("cluster: eu-west", "cluster: eu-west\nmaxReplicas: 40");
    assert_eq!(
        AgentConfig::parse(&raised, "a.yaml").unwrap().max_replicas,
        40
    );
    let err = AgentConfig::parse(
        &GOOD.replace("cluster: eu-west", "cluster: eu-west\nmaxReplicas: 1001"),
        "a.yaml",
    )
    .unwrap_err();
    assert_eq!((err.field.as_str(), err.line), ("maxReplicas", 3), "{err}");
}

#[test]
fn the_control_api_names_its_token_file() {
    let text = GOOD.replace(
        "control: {listen: \"127.0.0.1:0\"}",
        "control: {listen: \"127.0.0.1:0\", tokenFile: secrets/agent.token}",
    );
    let config = AgentConfig::parse(&text, "a.yaml").unwrap();
    assert_eq!(
        config.control.token_file.as_deref(),
        Some(Path::new("secrets/agent.token"))
    );
    assert_eq!(
        AgentConfig::parse(GOOD, "a.yaml")
            .unwrap()
            .control
            .token_file,
        None
    );
}
