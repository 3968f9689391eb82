//! Tests of the Argo Rollouts notification configuration: parsing (and errors naming the file
//! and the key), the trigger mapping, subscriptions, `when`, template rendering, the requests,
//! and the Rollout a notification is about.

use std::collections::BTreeMap;

use flotilla_core::fleet::{ClusterState, FleetSpecs, FleetState, fleet_revision};
use flotilla_core::manifest;
use flotilla_core::rollout::model::{Phase, RolloutState};
use serde_json::json;

use super::*;
use crate::controller::record::{FleetRecord, Notification};

/// Seed 004's ConfigMap, verbatim (`shared/seeds/004_19319f4b8bef9823.txt`).
const SEED_004: &str = "apiVersion: v1
kind: ConfigMap
metadata: { name: argo-rollouts-notification-configmap, namespace: argo-rollouts }
data:
  trigger.on-rollout-aborted: |
    - send: [rollout-aborted]
      when: rollout.status.abort == true
  template.rollout-aborted: |
    message: |
      \u{1F6A8} Rollout {{.rollout.metadata.name}} ABORTED in {{.rollout.metadata.namespace}}.
      Reverted to stable. Check the failing AnalysisRun.
";

/// The seed's ConfigMap with a Slack service (its token from the Secret) at a local URL.
fn seed_with_slack() -> String {
    format!(
        "{SEED_004}  service.slack: |\n    token: $slack-token\n    apiURL: http://127.0.0.1:9/api/\n"
    )
}

fn secret(key: &str) -> Result<String, String> {
    match key {
        "slack-token" => Ok("xoxb-seed-004".into()),
        "hook-password" => Ok("s3cret".into()),
        _ => Err(format!(
            "secret {SECRET}/{key} not found: set FLOTILLA_SECRET_ARGO_ROLLOUTS_NOTIFICATION_SECRET_{}",
            key.to_uppercase().replace('-', "_")
        )),
    }
}

fn load(text: &str) -> Result<Option<Config>, ConfigError> {
    let load = manifest::load_bytes("notifications.yaml", text.as_bytes());
    Config::load(&load.config_maps, &secret)
}

fn parsed(text: &str) -> Config {
    load(text)
        .unwrap_or_else(|e| panic!("{e}"))
        .expect("a configuration")
}

fn error(text: &str) -> ConfigError {
    match load(text) {
        Err(e) => e,
        Ok(c) => panic!("accepted: {c:?}"),
    }
}

fn aborted(revision: &str) -> Notification {
    Notification {
        event: "rollout-aborted".into(),
        id: format!("payment-api/{revision}/7/rollout-aborted"),
        fleet: "payment-api".into(),
        revision: revision.into(),
        cluster: Some("canary-eu-west".into()),
        metric: Some("error-rate".into()),
        value: Some("[0.12]".into()),
        message: "payment-api: cluster canary-eu-west rolled back from payment-api:1.9.0: metric error-rate = [0.12] (Metric \"error-rate\" assessed Failed due to failed (2) > failureLimit (1))".into(),
        time: 1_767_225_600_000,
    }
}

/// The demo fleet's record, its Rollout annotated with `annotations`, and canary-eu-west's
/// engine aborted by its error-rate metric.
fn record(annotations: &[(&str, &str)]) -> FleetRecord {
    let controls: Vec<String> = (1..=4).map(|p| format!("http://127.0.0.1:{p}")).collect();
    let text = crate::demo::manifests(&controls, 1.0);
    let load = manifest::load_bytes("m.yaml", text.as_bytes());
    let mut set =
        crate::controller::source::desired_from(&load.manifests, load.diagnostics, &[], "m");
    let mut desired = set.desired.remove(0);
    desired.rollout.metadata.annotations = Some(
        annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    let mut state = FleetState::default();
    state.clusters.insert(
        "canary-eu-west".into(),
        ClusterState {
            rollout: RolloutState {
                abort: true,
                aborted_at: Some(1_767_225_600_000),
                phase: Phase::Degraded,
                message: "RolloutAborted: Rollout aborted update to revision 2: Background analysis phase error/failed: Metric \"error-rate\" assessed Failed due to failed (2) > failureLimit (1)".into(),
                ..RolloutState::default()
            },
            ..ClusterState::default()
        },
    );
    FleetRecord {
        name: "payment-api".into(),
        specs: FleetSpecs::new(desired.rollout.clone()),
        source_hash: String::new(),
        state,
        reverted: None,
        pinned: Default::default(),
        git_status: None,
        desired: Some(Box::new(desired)),
        adopting: Default::default(),
        heard: Default::default(),
    }
}

const SUBSCRIBED: (&str, &str) = (
    "notifications.argoproj.io/subscribe.on-rollout-aborted.slack",
    "flotilla-alerts",
);

fn form(out: &Outgoing) -> &BTreeMap<String, String> {
    match &out.request.body {
        Body::Form(form) => form,
        other => panic!("not a form: {other:?}"),
    }
}

#[test]
fn seed_004_sends_one_slack_message_on_an_abort_with_the_rollout_and_the_failing_metric() {
    let text = seed_with_slack().replace(
        "Check the failing AnalysisRun.",
        "Check the failing AnalysisRun.\n      {{.flotilla.cluster}}: {{.flotilla.metric}} = {{.flotilla.value}}; {{.rollout.status.message}}",
    );
    let config = parsed(&text);
    let record = record(&[SUBSCRIBED]);
    let n = aborted(&fleet_revision(&record.specs.next));
    let subject = Subject::of(&record, &n);
    let out: Vec<Outgoing> = config
        .outgoing(&n, &subject)
        .into_iter()
        .map(|r| r.unwrap_or_else(|e| panic!("{e:?}")))
        .collect();
    assert_eq!(out.len(), 1, "{out:#?}");
    let message = &out[0];
    assert_eq!(
        (
            message.trigger.as_str(),
            message.service.as_str(),
            message.recipient.as_str()
        ),
        ("on-rollout-aborted", "slack", "flotilla-alerts")
    );
    assert_eq!(message.request.method, "POST");
    assert_eq!(
        message.request.url,
        "http://127.0.0.1:9/api/chat.postMessage"
    );
    let form = form(message);
    assert_eq!(form["token"], "xoxb-seed-004");
    assert_eq!(form["channel"], "flotilla-alerts");
    let text = &form["text"];
    assert!(
        text.starts_with(
            "\u{1F6A8} Rollout payment-api ABORTED in default.\nReverted to stable. Check the failing AnalysisRun.\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("canary-eu-west: error-rate = [0.12]; RolloutAborted: Rollout aborted update to revision 2: Background analysis phase error/failed: Metric \"error-rate\" assessed Failed"),
        "{text}"
    );
    // No slack part in the template: no attachments or blocks, as slack-go sends it.
    assert_eq!(
        form.keys().map(String::as_str).collect::<Vec<_>>(),
        ["channel", "text", "token"]
    );
    assert!(
        message
            .request
            .body
            .encode()
            .contains("token=xoxb-seed-004")
    );
}

#[test]
fn the_when_condition_decides_and_an_unsubscribed_or_unmapped_event_sends_nothing() {
    let config = parsed(&seed_with_slack());
    let record = record(&[SUBSCRIBED]);
    let revision = fleet_revision(&record.specs.next);
    // `rollout.status.abort == true` is false for a status without the abort.
    let mut subject = Subject::of(&record, &aborted(&revision));
    subject.rollout["status"]["abort"] = json!(false);
    assert!(config.outgoing(&aborted(&revision), &subject).is_empty());
    // Subscribed to on-rollout-aborted only: a pause sends nothing, nor does an event with no
    // Argo counterpart.
    for event in ["cluster-paused", "wave-completed", "fleet-halted"] {
        let n = Notification {
            event: event.into(),
            ..aborted(&revision)
        };
        assert!(
            config.outgoing(&n, &Subject::of(&record, &n)).is_empty(),
            "{event}"
        );
    }
    // Without the subscription annotation, nothing.
    let bare = record_without_subscription();
    let n = aborted(&fleet_revision(&bare.specs.next));
    assert!(config.outgoing(&n, &Subject::of(&bare, &n)).is_empty());
    // An empty `when` sends whatever the status (Argo Rollouts' empty-condition rule).
    let always =
        parsed(&seed_with_slack().replace("      when: rollout.status.abort == true\n", ""));
    assert_eq!(always.outgoing(&aborted(&revision), &subject).len(), 1);
    // A `when` that fails to evaluate is false (and logged).
    let failing = parsed(&seed_with_slack().replace(
        "rollout.status.abort == true",
        "rollout.status.nothing.deeper == 1",
    ));
    assert!(failing.outgoing(&aborted(&revision), &subject).is_empty());
}

fn record_without_subscription() -> FleetRecord {
    record(&[])
}

#[test]
fn every_mapped_event_is_a_flotilla_event_with_argos_reason_as_its_trigger() {
    for (event, reason, trigger) in TRIGGERS {
        assert!(
            crate::controller::config::EVENTS.contains(event),
            "{event} is not an event of Flotilla's"
        );
        assert_eq!(&trigger_of_reason(reason), trigger, "{reason}");
        assert_eq!(trigger_of(event, false), Some(*trigger));
    }
    assert_eq!(
        trigger_of_reason("AnalysisRunError"),
        ANALYSIS_ERROR_TRIGGER
    );
    assert_eq!(
        trigger_of("analysis-failed", true),
        Some("on-analysis-run-error")
    );
    assert_eq!(
        trigger_of("rollout-aborted", true),
        Some("on-rollout-aborted")
    );
    for event in [
        "wave-completed",
        "barrier-passed",
        "fleet-halted",
        "fleet-aborted",
        "desired-state-invalid",
    ] {
        assert_eq!(trigger_of(event, false), None, "{event}");
    }
    assert_eq!(trigger_of_reason("HTTPError"), "on-http-error");
}

#[test]
fn the_rollout_has_argos_status_at_the_event_and_the_manifests_metadata() {
    let record = record(&[SUBSCRIBED]);
    let revision = fleet_revision(&record.specs.next);
    let subject = Subject::of(&record, &aborted(&revision));
    let rollout = &subject.rollout;
    assert_eq!(rollout["metadata"]["name"], "payment-api");
    assert_eq!(rollout["metadata"]["namespace"], "default");
    assert_eq!(
        rollout["metadata"]["annotations"][SUBSCRIBED.0],
        SUBSCRIBED.1
    );
    assert_eq!(rollout["spec"]["replicas"], 2);
    assert_eq!(rollout["status"]["abort"], true);
    assert_eq!(rollout["status"]["phase"], "Degraded");
    assert_eq!(rollout["status"]["abortedAt"], "2026-01-01T00:00:00Z");
    assert!(
        rollout["status"]["message"]
            .as_str()
            .unwrap()
            .contains("Metric \"error-rate\" assessed Failed"),
        "{rollout}"
    );
    assert!(!subject.errored);
    // The engine has moved on (a retry): the status comes from the event itself.
    let mut moved = record.clone();
    moved
        .state
        .clusters
        .get_mut("canary-eu-west")
        .unwrap()
        .rollout = RolloutState::default();
    let subject = Subject::of(&moved, &aborted(&revision));
    assert_eq!(subject.rollout["status"]["abort"], true);
    assert_eq!(subject.rollout["status"]["phase"], "Degraded");
    let message = subject.rollout["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "RolloutAborted: Rollout aborted update to revision {revision}: "
        )) && message.contains("metric error-rate = [0.12]"),
        "{message}"
    );
    // An analysis that ended in Error is Argo's AnalysisRunError.
    let mut errored = record.clone();
    let cluster = errored.state.clusters.get_mut("canary-eu-west").unwrap();
    cluster.aborted_on_error = true;
    cluster.failure = Some(flotilla_core::fleet::Failure {
        metric: "error-rate".into(),
        value: "".into(),
        message: "Metric \"error-rate\" assessed Error".into(),
    });
    let n = Notification {
        event: "analysis-failed".into(),
        ..aborted(&revision)
    };
    let subject = Subject::of(&errored, &n);
    assert!(subject.errored);
    assert_eq!(
        trigger_of(&n.event, subject.errored),
        Some("on-analysis-run-error")
    );
    // Without a record, the notification's own status.
    let bare = Subject::bare(&aborted("r"));
    assert_eq!(bare.rollout["status"]["phase"], "Degraded");
}

#[test]
fn errors_name_the_file_the_key_and_the_cause_and_load_nothing() {
    let base = seed_with_slack();
    let cases: Vec<(String, &str, &str)> = vec![
        (
            base.replace(
                "    - send: [rollout-aborted]",
                "    - send: [rollout-aborted",
            ),
            "trigger.on-rollout-aborted",
            "invalid value",
        ),
        (
            base.replace("send: [rollout-aborted]", "send: [rollout-abortd]"),
            "trigger.on-rollout-aborted",
            "template \"rollout-abortd\" is not defined (the templates are: rollout-aborted)",
        ),
        (
            base.replace(
                "rollout.status.abort == true",
                "rollout.status.abort == = true",
            ),
            "trigger.on-rollout-aborted",
            "[0].when: \"rollout.status.abort == = true\" does not compile: at 1:25: expected",
        ),
        (
            base.replace("{{.rollout.metadata.name}}", "{{.rollout.metadata.name"),
            "template.rollout-aborted",
            "message: template: rollout-aborted:1:",
        ),
        (
            base.replace(
                "{{.rollout.metadata.name}}",
                "{{.rollout.metadata.name | shout}}",
            ),
            "template.rollout-aborted",
            "function \"shout\" not defined",
        ),
        (
            base.replace("when: rollout", "whenn: rollout"),
            "trigger.on-rollout-aborted",
            "unknown field `whenn`",
        ),
        (
            base.replace("$slack-token", "$slack-tokn"),
            "service.slack",
            "$slack-tokn names a key of the Secret argo-rollouts-notification-secret: secret argo-rollouts-notification-secret/slack-tokn not found: set FLOTILLA_SECRET_ARGO_ROLLOUTS_NOTIFICATION_SECRET_SLACK_TOKN",
        ),
        (
            base.replace("apiURL:", "apiUrll:"),
            "service.slack",
            "unknown field `apiUrll`",
        ),
        (
            format!("{base}  service.slak: |\n    token: x\n"),
            "service.slak",
            "service type \"slak\" is not supported",
        ),
        (
            format!("{base}  service.webhook.hook: |\n    url: ftp://127.0.0.1/\n"),
            "service.webhook.hook",
            "url: \"ftp://127.0.0.1/\" is not an http or https URL",
        ),
        (
            format!(
                "{base}  subscriptions: |\n    - recipients: [slack:a]\n      selector: \"app in (x\"\n"
            ),
            "subscriptions",
            "[0].selector",
        ),
        (
            base.replace(
                "  trigger.on-rollout-aborted: |",
                "  trigger.on-rollout-aborted: 3\n  x: |",
            ),
            "trigger.on-rollout-aborted",
            "data values are strings",
        ),
    ];
    for (text, key, needle) in cases {
        let e = error(&text);
        assert_eq!(e.key, key, "{e}");
        assert_eq!(e.file, "notifications.yaml", "{e}");
        assert!(e.message.contains(needle), "{e}\nwanted: {needle}");
        let line = text
            .lines()
            .position(|l| l.trim_start().starts_with(&format!("{key}:")))
            .map(|i| i as u32 + 1);
        if let Some(line) = line {
            assert_eq!(e.line, line, "{e}");
        }
        let shown = e.to_string();
        assert!(
            shown.starts_with(&format!(
                "notifications.yaml:{}:{}: ConfigMap argo-rollouts-notification-configmap: {key}: ",
                e.line, e.column
            )),
            "{shown}"
        );
    }
    // Twice in the source: the second names the first.
    let two = format!("{SEED_004}---\n{SEED_004}");
    let e = error(&two);
    assert!(e.message.contains("defined again"), "{e}");
    // No ConfigMap of that name: no configuration.
    assert!(
        load("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\n")
            .unwrap()
            .is_none()
    );
}

#[test]
fn a_source_that_cannot_be_read_keeps_the_configuration_in_force() {
    let broken = manifest::load_bytes("notifications.yaml", b"data: [unclosed\n");
    assert!(broken.config_maps.is_empty());
    let unreadable = vec!["notifications.yaml:1:7: invalid YAML".to_owned()];
    // In force: the unreadable file may hold it, so it is an error (nothing changes).
    let error = Config::from_source(&[], &unreadable, true, &secret).unwrap_err();
    assert!(
        error.contains(CONFIG_MAP) && error.contains("notifications.yaml:1:7"),
        "{error}"
    );
    // None in force, or every file read: no configuration.
    assert!(
        Config::from_source(&[], &unreadable, false, &secret)
            .unwrap()
            .is_none()
    );
    assert!(
        Config::from_source(&[], &[], true, &secret)
            .unwrap()
            .is_none()
    );
    // A configuration found is used whatever else failed; a bad one is its own error.
    let good = manifest::load_bytes("n.yaml", seed_with_slack().as_bytes()).config_maps;
    assert!(
        Config::from_source(&good, &unreadable, true, &secret)
            .unwrap()
            .is_some()
    );
    let bad = manifest::load_bytes(
        "n.yaml",
        seed_with_slack()
            .replace("send: [rollout-aborted]", "send: []")
            .as_bytes(),
    )
    .config_maps;
    let error = Config::from_source(&bad, &[], true, &secret).unwrap_err();
    assert!(
        error.starts_with("n.yaml:5:3: ConfigMap argo-rollouts-notification-configmap: trigger.on-rollout-aborted: [0].send: no template to send"),
        "{error}"
    );
}

#[test]
fn templates_render_go_templates_with_sprig_and_argos_data() {
    let text = format!(
        "{}  template.rich: |\n    message: |\n      {{{{if .rollout.spec.strategy.canary}}}}Canary{{{{end}}}} {{{{range $i, $c := .rollout.spec.template.spec.containers}}}}{{{{if $i}}}},{{{{end}}}}{{{{$c.name}}}}={{{{$c.image}}}}{{{{end}}}} {{{{.rollout.metadata.name | upper | printf \"%s!\"}}}} {{{{.rollout.metadata.nothing}}}} {{{{ .flotilla.metric | default \"none\" | quote }}}} {{{{ .recipient }}}}/{{{{ .serviceType }}}} {{{{ .secrets | toJson }}}} {{{{ trunc 5 .flotilla.cluster }}}}\n    slack:\n      attachments: |\n        [{{\"title\": \"{{{{ .rollout.metadata.name}}}}\", \"color\": \"#E01E5A\"}}]\n      icon: \":rotating_light:\"\n  trigger.on-rollout-aborted: |\n    - send: [rollout-aborted, rich]\n",
        SEED_004
            .split("  trigger.on-rollout-aborted")
            .next()
            .unwrap(),
    ) + "  template.rollout-aborted: |\n    message: overridden\n  service.slack: |\n    token: $slack-token\n    disableUnfurl: true\n";
    let config = parsed(&text);
    let record = record(&[SUBSCRIBED]);
    let n = aborted(&fleet_revision(&record.specs.next));
    let out = config.outgoing(&n, &Subject::of(&record, &n));
    assert_eq!(out.len(), 1);
    let out = out[0].as_ref().unwrap();
    assert_eq!(out.request.url, "https://slack.com/api/chat.postMessage");
    let form = form(out);
    assert_eq!(
        form["text"],
        "Canary payment-api=payment-api:1.8.3 PAYMENT-API! <no value> \"error-rate\" flotilla-alerts/slack {\"slack-token\":\"xoxb-seed-004\"} canar\n"
    );
    assert_eq!(
        form["attachments"],
        "[{\"color\":\"#E01E5A\",\"title\":\"payment-api\"}]"
    );
    assert_eq!(form["blocks"], "[]");
    assert_eq!(form["icon_emoji"], ":rotating_light:");
    assert_eq!(
        (form["unfurl_links"].as_str(), form["unfurl_media"].as_str()),
        ("false", "false")
    );
    // Go's url.Values encoding, sorted by key.
    let body = out.request.body.encode();
    assert!(body.starts_with("attachments=%5B%7B%22color%22"), "{body}");
    assert!(
        body.contains("&text=Canary+payment-api%3Dpayment-api%3A1.8.3+"),
        "{body}"
    );
}

#[test]
fn sprig_functions_follow_sprig() {
    let data = template::from_json(&json!({"s": " Hi ", "n": 0, "l": ["a", "b"], "e": ""}));
    for (source, want) in [
        ("{{ trim .s | lower }}", "hi"),
        ("{{ replace \"H\" \"J\" .s }}", " Ji "),
        (
            "{{ default \"x\" .e }}|{{ default \"x\" .s }}|{{ default \"x\" .missing }}",
            "x| Hi |x",
        ),
        (
            "{{ empty .n }} {{ empty .l }} {{ coalesce .e .n .s }}",
            "true false  Hi ",
        ),
        (
            "{{ join \",\" .l }} {{ splitList \"-\" \"a-b\" | len }}",
            "a,b 2",
        ),
        ("{{ trunc -2 \"abcd\" }} {{ trunc 9 \"abcd\" }}", "cd abcd"),
        (
            "{{ indent 2 \"a\\nb\" }}|{{ nindent 1 \"c\" }}",
            "  a\n  b|\n c",
        ),
        (
            "{{ hasPrefix \"a\" \"abc\" }} {{ contains \"b\" \"abc\" }} {{ hasSuffix \"x\" \"abc\" }}",
            "true true false",
        ),
        (
            "{{ quote \"a\\\"b\" }} {{ squote \"c\" }}",
            "\"a\\\"b\" 'c'",
        ),
        (
            "{{ ternary \"y\" \"n\" true }} {{ toString 2.5 }} {{ repeat 3 \"ab\" }}",
            "y 2.5 ababab",
        ),
        (
            "{{ dict \"a\" 1 \"b\" (list 1 \"x\") | toJson }}",
            "{\"a\":1,\"b\":[1,\"x\"]}",
        ),
        (
            "{{ trimPrefix \"a\" \"abc\" }}{{ trimSuffix \"c\" \"abc\" }}",
            "bcab",
        ),
    ] {
        let t = template::Tmpl::parse("t", source).unwrap_or_else(|e| panic!("{source}: {e}"));
        assert_eq!(t.render(&data).unwrap(), want, "{source}");
    }
    for name in SPRIG {
        let source = format!("{{{{ if false }}}}{{{{ {name} }}}}{{{{ end }}}}");
        assert!(template::Tmpl::parse("t", &source).is_ok(), "{name}");
    }
}

#[test]
fn subscriptions_come_from_annotations_defaults_and_the_configuration() {
    let text = format!(
        "{}  defaultTriggers: |\n    - on-rollout-aborted\n  defaultTriggers.ops-hook: |\n    - on-rollout-completed\n  subscriptions: |\n    - recipients: [slack:fleet-wide, ops-hook]\n      triggers: [on-rollout-aborted]\n      selector: \"app=payment-api,tier notin (batch),!legacy\"\n    - recipients: [slack:other-app]\n      selector: app=other\n  service.webhook.ops-hook: |\n    url: http://127.0.0.1:9/hooks\n",
        seed_with_slack()
    );
    let config = parsed(&text);
    let mut record = record(&[
        (
            "notifications.argoproj.io/subscribe.on-rollout-aborted.slack",
            "a; b ;",
        ),
        ("notifications.argoproj.io/subscribe.slack", "by-default"),
        ("notifications.argoproj.io/subscribe.ops-hook", ""),
        (
            "notifications.argoproj.io/subscriptions",
            "- trigger: [on-rollout-aborted]\n  destinations:\n    - {service: slack, recipients: [c, a]}\n",
        ),
    ]);
    let desired = record.desired.as_mut().unwrap();
    desired.rollout.metadata.labels = Some(BTreeMap::from([("app".into(), "payment-api".into())]));
    let n = aborted(&fleet_revision(&record.specs.next));
    let subject = Subject::of(&record, &n);
    let aborted: Vec<String> = config
        .destinations("on-rollout-aborted", &subject)
        .iter()
        .map(|d| format!("{}:{}", d.service, d.recipient))
        .collect();
    assert_eq!(
        aborted,
        [
            "slack:fleet-wide",
            "ops-hook:",
            "slack:a",
            "slack:b",
            "slack:by-default",
            "slack:c"
        ]
    );
    let completed: Vec<String> = config
        .destinations("on-rollout-completed", &subject)
        .iter()
        .map(|d| format!("{}:{}", d.service, d.recipient))
        .collect();
    assert_eq!(completed, ["ops-hook:"]);
    // The webhook gets `GET` with the message; Slack one message per channel.
    let out: Vec<Outgoing> = config
        .outgoing(&n, &subject)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(out.len(), 6);
    let hook = out.iter().find(|o| o.service == "ops-hook").unwrap();
    assert_eq!(hook.request.method, "GET");
    assert_eq!(hook.request.url, "http://127.0.0.1:9/hooks");
    assert!(matches!(&hook.request.body, Body::Text(t) if t.contains("ABORTED")));
    // A label the selector excludes: the configuration's subscription no longer applies.
    record
        .desired
        .as_mut()
        .unwrap()
        .rollout
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("legacy".into(), "yes".into());
    let subject = Subject::of(&record, &n);
    assert!(
        !config
            .destinations("on-rollout-aborted", &subject)
            .iter()
            .any(|d| d.recipient == "fleet-wide")
    );
}

#[test]
fn webhooks_are_sent_as_notifications_engine_sends_them() {
    let text = format!(
        "{}  service.webhook.github: |\n    url: http://127.0.0.1:9/api/\n    headers:\n      - {{name: Content-Type, value: application/json}}\n    basicAuth: {{username: flotilla, password: $hook-password}}\n    retryMax: 2\n    retryWaitMin: 10000000\n  template.rollout-aborted-hook: |\n    webhook:\n      github:\n        method: POST\n        path: /repos/{{{{.rollout.metadata.name}}}}/statuses\n        body: |\n          {{\"state\": \"failure\", \"context\": \"{{{{.flotilla.cluster}}}}\"}}\n  trigger.on-rollout-aborted: |\n    - send: [rollout-aborted, rollout-aborted-hook]\n",
        SEED_004
            .split("  trigger.on-rollout-aborted")
            .next()
            .unwrap(),
    ) + "  template.rollout-aborted: |\n    message: aborted\n";
    let config = parsed(&text);
    let record = record(&[(
        "notifications.argoproj.io/subscribe.on-rollout-aborted.github",
        "",
    )]);
    let n = aborted(&fleet_revision(&record.specs.next));
    let out = config.outgoing(&n, &Subject::of(&record, &n));
    let out = out[0].as_ref().unwrap();
    assert_eq!(out.request.method, "POST");
    assert_eq!(
        out.request.url,
        "http://127.0.0.1:9/api/repos/payment-api/statuses"
    );
    assert_eq!(
        out.request.body,
        Body::Text("{\"state\": \"failure\", \"context\": \"canary-eu-west\"}\n".into())
    );
    assert_eq!(
        out.request.headers,
        [("Content-Type".to_owned(), "application/json".to_owned())]
    );
    assert_eq!(
        out.request.basic_auth,
        Some(("flotilla".into(), "s3cret".into()))
    );
    assert_eq!(out.transport, Transport::Webhook);
    assert_eq!(out.retry.attempts, 3);
    assert_eq!(out.retry.first, std::time::Duration::from_millis(10));
    // A subscribed service that is not configured, and one Flotilla does not deliver.
    let unsupported = config_with_email();
    let record = record_with(&[
        (
            "notifications.argoproj.io/subscribe.on-rollout-aborted.pager",
            "x",
        ),
        (
            "notifications.argoproj.io/subscribe.on-rollout-aborted.email",
            "x@example.test",
        ),
    ]);
    let n = aborted(&fleet_revision(&record.specs.next));
    let errors: Vec<String> = unsupported
        .outgoing(&n, &Subject::of(&record, &n))
        .into_iter()
        .map(|r| r.unwrap_err().error)
        .collect();
    assert!(
        errors[0].contains("type email, which Flotilla does not deliver"),
        "{errors:?}"
    );
    assert!(
        errors[1].contains("notification service 'pager' is not supported"),
        "{errors:?}"
    );
    assert!(
        unsupported
            .warnings
            .iter()
            .any(|w| w.contains("service.email")),
        "{:?}",
        unsupported.warnings
    );
}

fn config_with_email() -> Config {
    parsed(&format!(
        "{}  service.email: |\n    host: smtp.example.test\n",
        seed_with_slack()
    ))
}

fn record_with(annotations: &[(&str, &str)]) -> FleetRecord {
    record(annotations)
}

#[test]
fn secrets_replace_every_dollar_key_of_a_service_and_a_change_is_told() {
    let mut value =
        json!({"a": "Bearer $slack-token", "b": ["$ alone", "x$hook-password."], "c": 1});
    let mut seen = Vec::new();
    super::config::substitute_secrets(&mut value, &mut |k: &str| {
        seen.push(k.to_owned());
        secret(k)
    })
    .unwrap();
    assert_eq!(
        value,
        json!({"a": "Bearer xoxb-seed-004", "b": ["$ alone", "xs3cret."], "c": 1})
    );
    assert_eq!(seen, ["slack-token", "hook-password"]);
    // The configuration's Debug names the Secret's keys, never their values.
    let shown = format!("{:?}", parsed(&seed_with_slack()));
    assert!(
        shown.contains("slack-token") && !shown.contains("xoxb-seed-004"),
        "{shown}"
    );
    let current = Current::default();
    assert!(current.set(Some(parsed(&seed_with_slack()))));
    assert!(!current.set(Some(parsed(&seed_with_slack()))));
    assert!(current.set(Some(parsed(
        &seed_with_slack().replace("ABORTED", "aborted")
    ))));
    assert!(current.get().is_some());
    assert!(current.set(None));
    assert!(current.get().is_none());
}

#[test]
fn times_are_rfc3339_in_utc() {
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
    assert_eq!(rfc3339(1_767_225_600_000), "2026-01-01T00:00:00Z");
    assert_eq!(rfc3339(951_827_696_789), "2000-02-29T12:34:56Z");
    assert_eq!(rfc3339(-1_000), "1969-12-31T23:59:59Z");
}

#[test]
fn conditions_are_bounded_and_see_go_numbers() {
    let deep = format!("{}1{}", "(".repeat(80), ")".repeat(80));
    assert!(
        condition::When::compile(&deep)
            .unwrap_err()
            .contains("deeper")
    );
    let long = format!("rollout.x == \"{}\"", "a".repeat(5000));
    assert!(
        condition::When::compile(&long)
            .unwrap_err()
            .contains("bytes")
    );
    let many = vec!["1"; 250].join(" + ");
    assert!(
        condition::When::compile(&many)
            .unwrap_err()
            .contains("operators")
    );
    let when = condition::When::compile(
        "rollout.spec.replicas == 2 && rollout.metadata.name startsWith 'pay'",
    )
    .unwrap();
    assert_eq!(
        when.holds(
            &json!({"rollout": {"spec": {"replicas": 2}, "metadata": {"name": "payment-api"}}})
        ),
        Ok(true)
    );
    assert!(when.holds(&json!({})).is_err());
}
