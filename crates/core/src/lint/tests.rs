//! Every rule, triggered and not: a table of cases, each a failing input and a minimally changed
//! passing one, and a check that the table names every rule id the sources can report.
//!
//! Inputs are built from valid bases (a Rollout, an AnalysisTemplate, a Fleet with its
//! FleetRollout) by replacing one field, so that each case changes one thing.

use std::collections::BTreeSet;

use regex::Regex;

use super::{Options, lint};
use crate::diagnostic::{Diagnostic, Severity};
use crate::manifest::yaml::parse_documents;
use crate::manifest::{Budget, load_bytes};

const E: Severity = Severity::Error;
const W: Severity = Severity::Warning;
const N: Severity = Severity::Note;

const ARGO: &str = "argoproj.io/v1alpha1";
const FLOTILLA: &str = "flotilla.dev/v1alpha1";

/// Everything linting one file reports: the loader's diagnostics and the rules'.
fn diagnostics(text: &str) -> Vec<Diagnostic> {
    let load = load_bytes("case.yaml", text.as_bytes());
    let mut all = load.diagnostics.clone();
    all.extend(lint(&load.manifests, Options::default()));
    all
}

// ---------------------------------------------------------------------------------------------
// Builders
// ---------------------------------------------------------------------------------------------

/// An override value that removes the field.
const DROP: &str = "<drop>";

/// Fields with overrides applied: an override replaces the field of the same name (in place),
/// [`DROP`] removes it, and a new name is appended.
fn fields(base: &[(&str, &str)], overrides: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = base
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    for (key, value) in overrides {
        match out.iter().position(|(k, _)| k == key) {
            Some(i) if *value == DROP => {
                out.remove(i);
            }
            Some(i) => out[i].1 = value.to_string(),
            None if *value == DROP => {}
            None => out.push((key.to_string(), value.to_string())),
        }
    }
    out
}

/// A YAML flow mapping.
fn flow(base: &[(&str, &str)], overrides: &[(&str, &str)]) -> String {
    let body: Vec<String> = fields(base, overrides)
        .into_iter()
        .map(|(k, v)| [k.as_str(), ": ", v.as_str()].concat())
        .collect();
    ["{", &body.join(", "), "}"].concat()
}

/// One manifest, its spec written one field a line.
fn manifest(
    api_version: &str,
    kind: &str,
    name: &str,
    base: &[(&str, &str)],
    overrides: &[(&str, &str)],
) -> String {
    let spec = fields(base, overrides);
    let mut text = [
        "apiVersion: ",
        api_version,
        "\nkind: ",
        kind,
        "\nmetadata: {name: ",
        name,
        "}\n",
    ]
    .concat();
    if spec.is_empty() {
        text.push_str("spec: {}\n");
    } else {
        text.push_str("spec:\n");
        for (k, v) in spec {
            text.push_str(&["  ", &k, ": ", &v, "\n"].concat());
        }
    }
    text
}

/// Several documents in one file.
fn docs(parts: &[&str]) -> String {
    parts.join("---\n")
}

/// `text` with `from` (which must occur exactly once) replaced by `to`.
fn edit(text: &str, from: &str, to: &str) -> String {
    assert_eq!(
        text.matches(from).count(),
        1,
        "{from:?} must occur once in:\n{text}"
    );
    text.replacen(from, to, 1)
}

const STEPS: &str = "[{setWeight: 25}, {pause: {duration: 1m}}]";
const POD_TEMPLATE: &str =
    "{metadata: {labels: {app: app}}, spec: {containers: [{name: app, image: 'app:1'}]}}";
const ROLLOUT_SPEC: &[(&str, &str)] = &[
    ("replicas", "4"),
    ("selector", "{matchLabels: {app: app}}"),
    ("template", POD_TEMPLATE),
    (
        "strategy",
        "{canary: {steps: [{setWeight: 25}, {pause: {duration: 1m}}]}}",
    ),
];

/// A valid canary Rollout named `app` (4 replicas, two steps, no traffic routing), with spec
/// overrides.
fn rollout(overrides: &[(&str, &str)]) -> String {
    manifest(ARGO, "Rollout", "app", ROLLOUT_SPEC, overrides)
}

/// A canary strategy: the base steps, and `extra` fields before them.
fn canary_strategy(extra: &str) -> String {
    canary_strategy_steps(extra, STEPS)
}

fn canary_strategy_steps(extra: &str, steps: &str) -> String {
    let sep = if extra.is_empty() { "" } else { ", " };
    ["{canary: {", extra, sep, "steps: ", steps, "}}"].concat()
}

/// The base Rollout with a canary strategy holding `extra` fields and the base steps.
fn canary(extra: &str) -> String {
    rollout(&[("strategy", &canary_strategy(extra))])
}

/// The base Rollout with a canary strategy holding `extra` fields and `steps`.
fn canary_steps(extra: &str, steps: &str) -> String {
    rollout(&[("strategy", &canary_strategy_steps(extra, steps))])
}

fn blue_green_strategy(body: &str) -> String {
    ["{blueGreen: {", body, "}}"].concat()
}

/// The base Rollout with a blue-green strategy.
fn blue_green(body: &str) -> String {
    rollout(&[("strategy", &blue_green_strategy(body))])
}

/// Istio routing that needs no canary and stable Services.
const ISTIO: &str = "istio: {virtualService: {name: vs}, destinationRule: {name: dr, canarySubsetName: canary, stableSubsetName: stable}}";
const PLUGIN: &str = "plugins: {example/router: {}}";
const SERVICES: &str = "canaryService: canary, stableService: stable";

fn routing(router: &str, extra: &str) -> String {
    let sep = if extra.is_empty() { "" } else { ", " };
    ["trafficRouting: {", router, sep, extra, "}"].concat()
}

fn service(name: &str, selector: &str) -> String {
    [
        "apiVersion: v1\nkind: Service\nmetadata: {name: ",
        name,
        "}\nspec: {selector: ",
        selector,
        "}\n",
    ]
    .concat()
}

/// A condition that needs evidence: data, a value that is a number, and under the threshold.
const GUARDED: &str = "'len(result) > 0 && !isNaN(result[0]) && result[0] < 1'";
const WEB: &str = "{web: {url: 'http://metrics.example/{{args.cluster}}'}}";
const METRIC: &[(&str, &str)] = &[
    ("name", "m"),
    ("successCondition", GUARDED),
    ("provider", WEB),
];

/// A valid metric (web provider, guarded condition), with overrides.
fn metric(overrides: &[(&str, &str)]) -> String {
    flow(METRIC, overrides)
}

/// A valid analysis template of `kind` holding one base metric, with spec overrides.
fn analysis(kind: &str, name: &str, overrides: &[(&str, &str)]) -> String {
    let metrics = ["[", &metric(&[]), "]"].concat();
    manifest(ARGO, kind, name, &[("metrics", &metrics)], overrides)
}

/// The AnalysisTemplate `name`, with spec overrides.
fn template(name: &str, overrides: &[(&str, &str)]) -> String {
    analysis("AnalysisTemplate", name, overrides)
}

/// The AnalysisTemplate `t` with one metric: the base metric with overrides.
fn template_metric(overrides: &[(&str, &str)]) -> String {
    let metrics = ["[", &metric(overrides), "]"].concat();
    template("t", &[("metrics", &metrics)])
}

/// The AnalysisRun `run` with one metric: the base metric with overrides.
fn run_metric(overrides: &[(&str, &str)]) -> String {
    let metrics = ["[", &metric(overrides), "]"].concat();
    analysis("AnalysisRun", "run", &[("metrics", &metrics)])
}

fn experiment_template(name: &str) -> String {
    [
        "{name: ",
        name,
        ", selector: {matchLabels: {app: app}}, template: ",
        POD_TEMPLATE,
        "}",
    ]
    .concat()
}

/// The Experiment `e` with two templates, `a` and `b`, with spec overrides.
fn experiment(overrides: &[(&str, &str)]) -> String {
    let templates = [
        "[",
        &experiment_template("a"),
        ", ",
        &experiment_template("b"),
        "]",
    ]
    .concat();
    manifest(
        ARGO,
        "Experiment",
        "e",
        &[("templates", &templates)],
        overrides,
    )
}

/// Cluster `c<n>` of the base Fleet: region `eu`, label `tier`, an agent and a metrics
/// endpoint, with overrides.
fn cluster(n: u32, tier: &str, overrides: &[(&str, &str)]) -> String {
    let name = ["c", &n.to_string()].concat();
    let labels = ["{tier: ", tier, "}"].concat();
    let agent = ["{agent: 'http://127.0.0.1:710", &n.to_string(), "'}"].concat();
    let metrics = ["{address: 'http://127.0.0.1:910", &n.to_string(), "'}"].concat();
    flow(
        &[
            ("name", &name),
            ("region", "eu"),
            ("labels", &labels),
            ("endpoint", &agent),
            ("metrics", &metrics),
        ],
        overrides,
    )
}

/// The Fleet `f` with these clusters.
fn fleet_of(clusters: &[String]) -> String {
    let list = ["[", &clusters.join(", "), "]"].concat();
    manifest(FLOTILLA, "Fleet", "f", &[("clusters", &list)], &[])
}

/// The base Fleet `f`: `c1` (tier canary) and `c2` (tier prod), both in region `eu`, with
/// overrides for each.
fn fleet(c1: &[(&str, &str)], c2: &[(&str, &str)]) -> String {
    fleet_of(&[cluster(1, "canary", c1), cluster(2, "prod", c2)])
}

/// A Kubernetes endpoint driven by Flotilla (`rolloutSource: flotilla`).
const K8S_FLOTILLA: &str = "{kubernetes: {context: kind-c1, rolloutSource: flotilla}}";

const WAVES: &str = "{list: [{cluster: c1, wave: 1}, {cluster: c2, wave: 2}]}";

/// The FleetRollout `fr` of Rollout `app` over Fleet `f`, `c1` then `c2`, with spec overrides.
fn fleet_rollout(overrides: &[(&str, &str)]) -> String {
    manifest(
        FLOTILLA,
        "FleetRollout",
        "fr",
        &[("fleet", "f"), ("rollout", "app"), ("waves", WAVES)],
        overrides,
    )
}

/// The base Rollout with background analysis by template `t`.
fn gated_rollout() -> String {
    canary("analysis: {templates: [{templateName: t}]}")
}

/// The base fleet set (Fleet, FleetRollout, gated Rollout, template `t`) with FleetRollout
/// overrides.
fn fleet_set(overrides: &[(&str, &str)]) -> String {
    docs(&[
        &fleet(&[], &[]),
        &fleet_rollout(overrides),
        &gated_rollout(),
        &template_metric(&[]),
    ])
}

// ---------------------------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------------------------

struct Case {
    rule: &'static str,
    severity: Severity,
    /// The field path the diagnostic must name.
    path: &'static str,
    /// Triggers the rule.
    fail: String,
    /// A minimal change of `fail` that does not.
    pass: String,
    /// `path` names a field absent from `fail` (a missing field): the diagnostic is then
    /// located at its nearest ancestor.
    absent: bool,
}

fn case(
    rule: &'static str,
    severity: Severity,
    path: &'static str,
    fail: String,
    pass: String,
) -> Case {
    Case {
        rule,
        severity,
        path,
        fail,
        pass,
        absent: false,
    }
}

impl Case {
    fn absent(mut self) -> Self {
        self.absent = true;
        self
    }
}

fn cases() -> Vec<Case> {
    let base = rollout(&[]);
    let mut cases = Vec::new();

    // ----- Input and schema (the loader) -----
    cases.extend([
        case("input", E, "", [base.as_str(), "\0"].concat(), base.clone()),
        case(
            "yaml",
            E,
            "",
            edit(&base, "kind: Rollout\n", "kind: Rollout\nkind: Rollout\n"),
            base.clone(),
        ),
        case(
            "schema",
            E,
            "spec.replicas",
            rollout(&[("replicas", "four")]),
            base.clone(),
        ),
        case(
            "schema",
            E,
            "spec.template.spec.containers[0].imagePullPolicyy",
            edit(
                &base,
                "image: 'app:1'",
                "image: 'app:1', imagePullPolicyy: Always",
            ),
            edit(
                &base,
                "image: 'app:1'",
                "image: 'app:1', imagePullPolicy: Always",
            ),
        ),
        case(
            "schema",
            E,
            "apiVersion",
            edit(&base, ARGO, "argoproj.io/v1alpha2"),
            base.clone(),
        ),
        // Lint's own schema check of integer-or-placeholder limits.
        case(
            "schema",
            E,
            "spec.metrics[0].count",
            template_metric(&[("count", "many")]),
            template_metric(&[("count", "'1'")]),
        ),
        case(
            "ignored-kind",
            N,
            "",
            edit(&base, ARGO, "example.com/v1alpha1"),
            base.clone(),
        ),
        // Every Experiment that decodes gets the note; the same document under another group
        // is not an Argo Experiment.
        case(
            "experiment-not-executed",
            N,
            "",
            experiment(&[]),
            edit(&experiment(&[]), ARGO, "example.com/v1alpha1"),
        ),
    ]);

    // ----- Argo's validation -----
    cases.extend([
        case(
            "argo/non-negative",
            E,
            "spec.replicas",
            rollout(&[("replicas", "-1")]),
            rollout(&[("replicas", "0")]),
        ),
        case(
            "argo/non-negative",
            E,
            "spec.minReadySeconds",
            rollout(&[("minReadySeconds", "-1")]),
            rollout(&[("minReadySeconds", "0")]),
        ),
        case(
            "argo/non-negative",
            E,
            "spec.revisionHistoryLimit",
            rollout(&[("revisionHistoryLimit", "-1")]),
            rollout(&[("revisionHistoryLimit", "0")]),
        ),
        case(
            "argo/workload-ref",
            E,
            "spec.template",
            rollout(&[("workloadRef", "{apiVersion: apps/v1, kind: Deployment, name: app}")]),
            rollout(&[
                ("workloadRef", "{apiVersion: apps/v1, kind: Deployment, name: app}"),
                ("template", DROP),
            ]),
        ),
        case(
            "argo/selector-required",
            E,
            "spec.selector",
            rollout(&[("selector", DROP)]),
            base.clone(),
        )
        .absent(),
        case(
            "argo/selector-required",
            E,
            "spec.selector",
            rollout(&[("selector", "{}")]),
            base.clone(),
        ),
        case(
            "argo/containers-required",
            E,
            "spec.template.spec.containers",
            edit(&base, "[{name: app, image: 'app:1'}]", "[]"),
            base.clone(),
        ),
        case(
            "argo/containers-required",
            E,
            "spec.template.spec.containers",
            rollout(&[("template", DROP)]),
            base.clone(),
        )
        .absent(),
        case(
            "argo/containers-required",
            E,
            "spec.templates[0].template.spec.containers",
            experiment(&[(
                "templates",
                &["[", &edit(&experiment_template("a"), "[{name: app, image: 'app:1'}]", "[]"), "]"].concat(),
            )]),
            experiment(&[("templates", &["[", &experiment_template("a"), "]"].concat())]),
        ),
        case(
            "argo/selector-matches-template",
            E,
            "spec.template.metadata.labels",
            edit(&base, "labels: {app: app}", "labels: {app: other}"),
            edit(&base, "labels: {app: app}", "labels: {app: app, tier: web}"),
        ),
        case(
            "argo/progress-deadline",
            E,
            "spec.progressDeadlineSeconds",
            rollout(&[("minReadySeconds", "30"), ("progressDeadlineSeconds", "30")]),
            rollout(&[("minReadySeconds", "30"), ("progressDeadlineSeconds", "31")]),
        ),
        // The default deadline is 600 seconds.
        case(
            "argo/progress-deadline",
            E,
            "spec.progressDeadlineSeconds",
            rollout(&[("minReadySeconds", "600")]),
            rollout(&[("minReadySeconds", "599")]),
        )
        .absent(),
        case(
            "argo/strategy",
            E,
            "spec.strategy",
            rollout(&[("strategy", DROP)]),
            base.clone(),
        )
        .absent(),
        case(
            "argo/strategy",
            E,
            "spec.strategy",
            rollout(&[("strategy", "{}")]),
            base.clone(),
        ),
        case(
            "argo/strategy",
            E,
            "spec.strategy",
            rollout(&[(
                "strategy",
                "{canary: {steps: [{setWeight: 25}]}, blueGreen: {activeService: active}}",
            )]),
            rollout(&[("strategy", "{canary: {steps: [{setWeight: 25}]}}")]),
        ),
        case(
            "argo/max-surge-unavailable",
            E,
            "spec.strategy.canary.maxSurge",
            canary("maxSurge: 0, maxUnavailable: '0%'"),
            canary("maxSurge: 0, maxUnavailable: '10%'"),
        ),
        case(
            "argo/distinct-services",
            E,
            "spec.strategy.blueGreen.activeService",
            blue_green("activeService: active, previewService: active"),
            blue_green("activeService: active, previewService: preview"),
        ),
        case(
            "argo/distinct-services",
            E,
            "spec.strategy.canary.stableService",
            canary("canaryService: app, stableService: app"),
            canary("canaryService: canary, stableService: app"),
        ),
        // The pod-template hash is Argo's own label, never in the template.
        case(
            "argo/service-selector",
            E,
            "spec.strategy.blueGreen.activeService",
            docs(&[
                &blue_green("activeService: active"),
                &service("active", "{app: other, rollouts-pod-template-hash: abc}"),
            ]),
            docs(&[
                &blue_green("activeService: active"),
                &service("active", "{app: app, rollouts-pod-template-hash: abc}"),
            ]),
        ),
        case(
            "argo/service-selector",
            E,
            "spec.strategy.canary.stableService",
            docs(&[
                &canary("stableService: stable"),
                &service("stable", "{app: other}"),
            ]),
            docs(&[
                &canary("stableService: stable"),
                &service("stable", "{app: app}"),
            ]),
        ),
        case(
            "argo/revision-limit",
            E,
            "spec.strategy.canary.scaleDownDelayRevisionLimit",
            rollout(&[
                ("revisionHistoryLimit", "2"),
                ("strategy", &canary_strategy("scaleDownDelayRevisionLimit: 3")),
            ]),
            rollout(&[
                ("revisionHistoryLimit", "2"),
                ("strategy", &canary_strategy("scaleDownDelayRevisionLimit: 2")),
            ]),
        ),
        case(
            "argo/revision-limit",
            E,
            "spec.strategy.blueGreen.scaleDownDelayRevisionLimit",
            rollout(&[
                ("revisionHistoryLimit", "2"),
                (
                    "strategy",
                    &blue_green_strategy("activeService: active, scaleDownDelayRevisionLimit: 3"),
                ),
            ]),
            rollout(&[
                ("revisionHistoryLimit", "3"),
                (
                    "strategy",
                    &blue_green_strategy("activeService: active, scaleDownDelayRevisionLimit: 3"),
                ),
            ]),
        ),
        case(
            "argo/anti-affinity",
            E,
            "spec.strategy.canary.antiAffinity",
            canary("antiAffinity: {}"),
            canary("antiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {}}"),
        ),
        case(
            "argo/anti-affinity",
            E,
            "spec.strategy.blueGreen.antiAffinity.preferredDuringSchedulingIgnoredDuringExecution.weight",
            blue_green("activeService: active, antiAffinity: {preferredDuringSchedulingIgnoredDuringExecution: {weight: 0}}"),
            blue_green("activeService: active, antiAffinity: {preferredDuringSchedulingIgnoredDuringExecution: {weight: 1}}"),
        ),
        case(
            "argo/ping-pong",
            E,
            "spec.strategy.canary.pingPong.pingService",
            canary(&[
                &routing("alb: {ingress: ing, servicePort: 80, rootService: root}", ""),
                ", pingPong: {pingService: ping, pongService: ping}",
            ]
            .concat()),
            canary(&[
                &routing("alb: {ingress: ing, servicePort: 80, rootService: root}", ""),
                ", pingPong: {pingService: ping, pongService: pong}",
            ]
            .concat()),
        ),
        case(
            "argo/ping-pong",
            E,
            "spec.strategy.canary.trafficRouting.alb.rootService",
            canary(&[
                &routing("alb: {ingress: ing, servicePort: 80}", ""),
                ", pingPong: {pingService: ping, pongService: pong}",
            ]
            .concat()),
            canary(&[
                &routing("alb: {ingress: ing, servicePort: 80, rootService: root}", ""),
                ", pingPong: {pingService: ping, pongService: pong}",
            ]
            .concat()),
        )
        .absent(),
        case(
            "argo/ping-pong",
            E,
            "spec.strategy.canary.trafficRouting.alb",
            canary(&[
                SERVICES,
                ", ",
                &routing("nginx: {stableIngress: ing}", ""),
                ", pingPong: {pingService: ping, pongService: pong}",
            ]
            .concat()),
            canary(&[
                SERVICES,
                ", ",
                &routing(PLUGIN, ""),
                ", pingPong: {pingService: ping, pongService: pong}",
            ]
            .concat()),
        )
        .absent(),
        case(
            "argo/routing-services",
            E,
            "spec.strategy.canary.stableService",
            canary(&routing("nginx: {stableIngress: ing}", "")),
            canary(&[SERVICES, ", ", &routing("nginx: {stableIngress: ing}", "")].concat()),
        )
        .absent(),
        case(
            "argo/dynamic-stable-scale",
            E,
            "spec.strategy.canary.dynamicStableScale",
            canary(&[&routing(PLUGIN, ""), ", scaleDownDelaySeconds: 30, dynamicStableScale: true"].concat()),
            canary(&[&routing(PLUGIN, ""), ", scaleDownDelaySeconds: 30, dynamicStableScale: false"].concat()),
        ),
        case(
            "argo/max-traffic-weight",
            E,
            "spec.strategy.canary.trafficRouting.maxTrafficWeight",
            canary(&routing(ISTIO, "maxTrafficWeight: 1000")),
            canary(&routing(PLUGIN, "maxTrafficWeight: 1000")),
        ),
        case(
            "argo/needs-traffic-routing",
            E,
            "spec.strategy.canary.scaleDownDelaySeconds",
            canary("scaleDownDelaySeconds: 30"),
            canary(&["scaleDownDelaySeconds: 30, ", &routing(PLUGIN, "")].concat()),
        ),
        case(
            "argo/needs-traffic-routing",
            E,
            "spec.strategy.canary.dynamicStableScale",
            canary("dynamicStableScale: true"),
            canary(&["dynamicStableScale: true, ", &routing(PLUGIN, "")].concat()),
        ),
        case(
            "argo/needs-traffic-routing",
            E,
            "spec.strategy.canary.trafficRouting",
            canary_steps("", "[{setCanaryScale: {replicas: 1}}, {setWeight: 25}]"),
            canary_steps(&routing(PLUGIN, ""), "[{setCanaryScale: {replicas: 1}}, {setWeight: 25}]"),
        )
        .absent(),
        case(
            "argo/needs-traffic-routing",
            E,
            "spec.strategy.canary.steps[0].setHeaderRoute",
            canary_steps(
                &[SERVICES, ", ", &routing("nginx: {stableIngress: ing}", "managedRoutes: [{name: h}]")].concat(),
                "[{setHeaderRoute: {name: h}}, {setWeight: 25}]",
            ),
            canary_steps(
                &[SERVICES, ", ", &routing(ISTIO, "managedRoutes: [{name: h}]")].concat(),
                "[{setHeaderRoute: {name: h}}, {setWeight: 25}]",
            ),
        ),
        case(
            "argo/needs-traffic-routing",
            E,
            "spec.strategy.canary.steps[0].setMirrorRoute",
            canary_steps(
                &[SERVICES, ", ", &routing("nginx: {stableIngress: ing}", "managedRoutes: [{name: m}]")].concat(),
                "[{setMirrorRoute: {name: m}}, {setWeight: 25}]",
            ),
            canary_steps(
                &[SERVICES, ", ", &routing(ISTIO, "managedRoutes: [{name: m}]")].concat(),
                "[{setMirrorRoute: {name: m}}, {setWeight: 25}]",
            ),
        ),
        case(
            "argo/starting-step",
            E,
            "spec.strategy.canary.analysis.startingStep",
            docs(&[
                &canary("analysis: {templates: [{templateName: t}], startingStep: 3}"),
                &template_metric(&[]),
            ]),
            docs(&[
                &canary("analysis: {templates: [{templateName: t}], startingStep: 2}"),
                &template_metric(&[]),
            ]),
        ),
        case(
            "argo/step-one-field",
            E,
            "spec.strategy.canary.steps[0]",
            canary_steps("", "[{}, {pause: {duration: 1m}}]"),
            canary_steps("", "[{setWeight: 25}, {pause: {duration: 1m}}]"),
        ),
        case(
            "argo/step-one-field",
            E,
            "spec.strategy.canary.steps[0]",
            canary_steps("", "[{setWeight: 25, pause: {duration: 1m}}]"),
            canary_steps("", "[{setWeight: 25}, {pause: {duration: 1m}}]"),
        ),
        case(
            "argo/set-weight-range",
            E,
            "spec.strategy.canary.steps[0].setWeight",
            canary_steps("", "[{setWeight: 101}]"),
            canary_steps("", "[{setWeight: 100}]"),
        ),
        case(
            "argo/set-weight-range",
            E,
            "spec.strategy.canary.steps[0].setWeight",
            canary_steps(&routing(PLUGIN, "maxTrafficWeight: 10"), "[{setWeight: 25}]"),
            canary_steps(&routing(PLUGIN, "maxTrafficWeight: 10"), "[{setWeight: 10}]"),
        ),
        case(
            "argo/string-match",
            E,
            "spec.strategy.canary.steps[0].setHeaderRoute.match[0].headerValue",
            canary_steps(
                &routing(ISTIO, "managedRoutes: [{name: h}]"),
                "[{setHeaderRoute: {name: h, match: [{headerName: x, headerValue: {}}]}}]",
            ),
            canary_steps(
                &routing(ISTIO, "managedRoutes: [{name: h}]"),
                "[{setHeaderRoute: {name: h, match: [{headerName: x, headerValue: {exact: y}}]}}]",
            ),
        ),
        case(
            "argo/string-match",
            E,
            "spec.strategy.canary.steps[0].setHeaderRoute.match[0].headerValue",
            canary_steps(
                &routing(ISTIO, "managedRoutes: [{name: h}]"),
                "[{setHeaderRoute: {name: h, match: [{headerName: x, headerValue: {exact: y, prefix: y}}]}}]",
            ),
            canary_steps(
                &routing(ISTIO, "managedRoutes: [{name: h}]"),
                "[{setHeaderRoute: {name: h, match: [{headerName: x, headerValue: {prefix: y}}]}}]",
            ),
        ),
        case(
            "argo/string-match",
            E,
            "spec.strategy.canary.steps[0].setHeaderRoute.match[0].headerValue",
            canary_steps(
                &[SERVICES, ", ", &routing("alb: {ingress: ing, servicePort: 80}", "managedRoutes: [{name: h}]")].concat(),
                "[{setHeaderRoute: {name: h, match: [{headerName: x, headerValue: {prefix: y}}]}}]",
            ),
            canary_steps(
                &[SERVICES, ", ", &routing("alb: {ingress: ing, servicePort: 80}", "managedRoutes: [{name: h}]")].concat(),
                "[{setHeaderRoute: {name: h, match: [{headerName: x, headerValue: {exact: y}}]}}]",
            ),
        ),
        case(
            "argo/string-match",
            E,
            "spec.strategy.canary.steps[0].setMirrorRoute.match[0].method",
            canary_steps(
                &routing(ISTIO, "managedRoutes: [{name: m}]"),
                "[{setMirrorRoute: {name: m, match: [{method: {exact: GET, regex: 'G.*'}}]}}]",
            ),
            canary_steps(
                &routing(ISTIO, "managedRoutes: [{name: m}]"),
                "[{setMirrorRoute: {name: m, match: [{method: {exact: GET}}]}}]",
            ),
        ),
        case(
            "argo/mirror-percentage",
            E,
            "spec.strategy.canary.steps[0].setMirrorRoute.percentage",
            canary_steps(
                &routing(ISTIO, "managedRoutes: [{name: m}]"),
                "[{setMirrorRoute: {name: m, percentage: 101}}]",
            ),
            canary_steps(
                &routing(ISTIO, "managedRoutes: [{name: m}]"),
                "[{setMirrorRoute: {name: m, percentage: 100}}]",
            ),
        ),
        case(
            "argo/managed-routes",
            E,
            "spec.strategy.canary.trafficRouting.managedRoutes",
            canary_steps(&routing(ISTIO, ""), "[{setHeaderRoute: {name: h}}]"),
            canary_steps(&routing(ISTIO, "managedRoutes: [{name: h}]"), "[{setHeaderRoute: {name: h}}]"),
        )
        .absent(),
        case(
            "argo/managed-routes",
            E,
            "spec.strategy.canary.steps[0].setHeaderRoute.name",
            canary_steps(&routing(ISTIO, "managedRoutes: [{name: other}]"), "[{setHeaderRoute: {name: h}}]"),
            canary_steps(&routing(ISTIO, "managedRoutes: [{name: h}]"), "[{setHeaderRoute: {name: h}}]"),
        ),
        case(
            "argo/experiment-weight",
            E,
            "spec.strategy.canary.steps[0].experiment.templates[0].weight",
            canary_steps("", "[{experiment: {templates: [{name: e, specRef: canary, weight: 10}]}}]"),
            canary_steps("", "[{experiment: {templates: [{name: e, specRef: canary}]}}]"),
        ),
        case(
            "argo/experiment-weight",
            E,
            "spec.strategy.canary.steps[0].experiment.templates[0].weight",
            canary_steps(
                &[SERVICES, ", ", &routing("nginx: {stableIngress: ing}", "")].concat(),
                "[{experiment: {templates: [{name: e, specRef: canary, weight: 10}]}}]",
            ),
            canary_steps(
                &[SERVICES, ", ", &routing(ISTIO, "")].concat(),
                "[{experiment: {templates: [{name: e, specRef: canary, weight: 10}]}}]",
            ),
        ),
        case(
            "argo/experiment-templates",
            E,
            "spec.templates[1].name",
            edit(&experiment(&[]), "{name: b,", "{name: a,"),
            experiment(&[]),
        ),
        case(
            "argo/experiment-templates",
            E,
            "spec.templates",
            experiment(&[("templates", "[]")]),
            experiment(&[]),
        ),
    ]);

    // ----- Single-cluster anti-patterns -----
    cases.extend([
        case(
            "rollout/weight-finer-than-replica",
            W,
            "spec.strategy.canary.steps[0].setWeight",
            canary_steps("", "[{setWeight: 10}]"),
            canary_steps("", "[{setWeight: 25}]"),
        ),
        // One replica by default; traffic routing makes any weight exact.
        case(
            "rollout/weight-finer-than-replica",
            W,
            "spec.strategy.canary.steps[0].setWeight",
            rollout(&[("replicas", DROP)]),
            rollout(&[
                ("replicas", DROP),
                ("strategy", &canary_strategy(&routing(PLUGIN, ""))),
            ]),
        ),
        case(
            "rollout/unguarded-indefinite-pause",
            W,
            "spec.strategy.canary.steps[1].pause",
            canary_steps("", "[{setWeight: 25}, {pause: {}}]"),
            canary_steps("", "[{setWeight: 25}, {pause: {duration: 1h}}]"),
        ),
        case(
            "rollout/unguarded-indefinite-pause",
            W,
            "spec.strategy.canary.steps[1].pause",
            docs(&[
                &canary_steps("", "[{setWeight: 25}, {pause: {}}]"),
                &template_metric(&[]),
            ]),
            docs(&[
                &canary_steps(
                    "analysis: {templates: [{templateName: t}]}",
                    "[{setWeight: 25}, {pause: {}}]",
                ),
                &template_metric(&[]),
            ]),
        ),
    ]);

    // ----- Cross-references and arguments -----
    let bg_t = "analysis: {templates: [{templateName: t}]}";
    cases.extend([
        case(
            "ref/template-not-found",
            W,
            "spec.strategy.canary.analysis.templates[0].templateName",
            canary(bg_t),
            docs(&[&canary(bg_t), &template_metric(&[])]),
        ),
        case(
            "ref/template-not-found",
            W,
            "spec.strategy.canary.analysis.templates[0].templateName",
            docs(&[
                &canary("analysis: {templates: [{templateName: t, clusterScope: true}]}"),
                &template_metric(&[]),
            ]),
            docs(&[
                &canary("analysis: {templates: [{templateName: t, clusterScope: true}]}"),
                &analysis("ClusterAnalysisTemplate", "t", &[]),
            ]),
        ),
        case(
            "ref/template-not-found",
            W,
            "spec.strategy.canary.steps[1].analysis.templates[0].templateName",
            canary_steps("", "[{setWeight: 25}, {analysis: {templates: [{templateName: t}]}}]"),
            docs(&[
                &canary_steps("", "[{setWeight: 25}, {analysis: {templates: [{templateName: t}]}}]"),
                &template_metric(&[]),
            ]),
        ),
        case(
            "ref/template-not-found",
            W,
            "spec.strategy.canary.steps[0].experiment.analyses[0].templateName",
            canary_steps(
                "",
                "[{experiment: {templates: [{name: e, specRef: canary}], analyses: [{name: a, templateName: t}]}}]",
            ),
            docs(&[
                &canary_steps(
                    "",
                    "[{experiment: {templates: [{name: e, specRef: canary}], analyses: [{name: a, templateName: t}]}}]",
                ),
                &template_metric(&[]),
            ]),
        ),
        case(
            "ref/template-not-found",
            W,
            "spec.strategy.blueGreen.prePromotionAnalysis.templates[0].templateName",
            blue_green("activeService: active, prePromotionAnalysis: {templates: [{templateName: t}]}"),
            docs(&[
                &blue_green("activeService: active, prePromotionAnalysis: {templates: [{templateName: t}]}"),
                &template_metric(&[]),
            ]),
        ),
        case(
            "ref/template-not-found",
            W,
            "spec.analyses[0].templateName",
            experiment(&[("analyses", "[{name: a, templateName: t}]")]),
            docs(&[
                &experiment(&[("analyses", "[{name: a, templateName: t}]")]),
                &template_metric(&[]),
            ]),
        ),
        case(
            "ref/template-not-found",
            W,
            "spec.templates[0].templateName",
            template("composite", &[("templates", "[{templateName: t}]")]),
            docs(&[
                &template("composite", &[("templates", "[{templateName: t}]")]),
                &template_metric(&[]),
            ]),
        ),
        case(
            "ref/fleet-not-found",
            W,
            "spec.fleet",
            docs(&[&fleet_rollout(&[]), &gated_rollout(), &template_metric(&[])]),
            fleet_set(&[]),
        ),
        case(
            "ref/rollout-not-found",
            W,
            "spec.rollout",
            docs(&[&fleet(&[], &[]), &fleet_rollout(&[]), &template_metric(&[])]),
            fleet_set(&[]),
        ),
        case(
            "args/undeclared",
            E,
            "spec.metrics[0]",
            template_metric(&[("successCondition", "'len(result) > 0 && result[0] < {{args.max}}'")]),
            edit(
                &template_metric(&[("successCondition", "'len(result) > 0 && result[0] < {{args.max}}'")]),
                "spec:\n",
                "spec:\n  args: [{name: max, value: '1'}]\n",
            ),
        ),
        case(
            "args/undeclared",
            E,
            "spec.metrics[0]",
            run_metric(&[("provider", "{web: {url: 'http://{{args.host}}/rate'}}")]),
            edit(
                &run_metric(&[("provider", "{web: {url: 'http://{{args.host}}/rate'}}")]),
                "spec:\n",
                "spec:\n  args: [{name: host, value: metrics.example}]\n",
            ),
        ),
    ]);
    let needs_max = edit(
        &template_metric(&[(
            "successCondition",
            "'len(result) > 0 && result[0] < {{args.max}}'",
        )]),
        "spec:\n",
        "spec:\n  args: [{name: max}]\n",
    );
    let overrides_max = "[{cluster: c1, args: [{name: max, value: '1'}]}, {cluster: c2, args: [{name: max, value: '2'}]}]";
    cases.extend([
        case(
            "args/unresolved",
            E,
            "spec.strategy.canary.analysis.templates[0]",
            docs(&[&canary(bg_t), &needs_max]),
            docs(&[
                &canary(
                    "analysis: {templates: [{templateName: t}], args: [{name: max, value: '1'}]}",
                ),
                &needs_max,
            ]),
        ),
        case(
            "args/unresolved",
            E,
            "spec.strategy.canary.analysis.templates[0]",
            docs(&[
                &fleet(&[], &[]),
                &fleet_rollout(&[]),
                &gated_rollout(),
                &needs_max,
            ]),
            docs(&[
                &fleet(&[], &[]),
                &fleet_rollout(&[("clusterOverrides", overrides_max)]),
                &gated_rollout(),
                &needs_max,
            ]),
        ),
        case(
            "args/unresolved",
            E,
            "spec.analyses[0]",
            docs(&[
                &experiment(&[("analyses", "[{name: a, templateName: t}]")]),
                &needs_max,
            ]),
            docs(&[
                &experiment(&[(
                    "analyses",
                    "[{name: a, templateName: t, args: [{name: max, value: '1'}]}]",
                )]),
                &needs_max,
            ]),
        ),
    ]);

    // ----- Analysis templates -----
    cases.extend([
        case(
            "analysis/metrics-required",
            E,
            "spec.metrics",
            template("t", &[("metrics", "[]")]),
            template("t", &[]),
        ),
        case(
            "analysis/metrics-required",
            E,
            "spec.metrics",
            template("t", &[("metrics", DROP)]),
            template("t", &[]),
        )
        .absent(),
        case(
            "analysis/metrics-required",
            E,
            "spec.metrics",
            analysis("AnalysisRun", "run", &[("metrics", "[]")]),
            analysis("AnalysisRun", "run", &[]),
        ),
        case(
            "analysis/unique-metric-names",
            E,
            "spec.metrics[1].name",
            template("t", &[("metrics", &["[", &metric(&[]), ", ", &metric(&[]), "]"].concat())]),
            template(
                "t",
                &[("metrics", &["[", &metric(&[]), ", ", &metric(&[("name", "m2")]), "]"].concat())],
            ),
        ),
        case(
            "analysis/one-provider",
            E,
            "spec.metrics[0].provider",
            template_metric(&[("provider", "{}")]),
            template_metric(&[]),
        ),
        case(
            "analysis/one-provider",
            E,
            "spec.metrics[0].provider",
            template_metric(&[(
                "provider",
                "{web: {url: 'http://metrics.example'}, prometheus: {query: 'sum(canary)'}}",
            )]),
            template_metric(&[("provider", "{web: {url: 'http://metrics.example'}}")]),
        ),
        case(
            "analysis/limits",
            E,
            "spec.metrics[0].count",
            template_metric(&[("count", "-1")]),
            template_metric(&[("count", "0")]),
        ),
        case(
            "analysis/limits",
            E,
            "spec.metrics[0].failureLimit",
            template_metric(&[("failureLimit", "-2")]),
            template_metric(&[("failureLimit", "0")]),
        ),
        case(
            "analysis/limits",
            E,
            "spec.metrics[0].failureLimit",
            template_metric(&[("failureLimit", "-1")]),
            template_metric(&[("failureLimit", "-1"), ("consecutiveSuccessLimit", "1")]),
        ),
        // Flotilla's consecutiveFailureLimit lets a never-failing failureLimit complete.
        case(
            "analysis/limits",
            E,
            "spec.metrics[0].failureLimit",
            template_metric(&[("failureLimit", "-1")]),
            template_metric(&[("failureLimit", "-1"), ("consecutiveFailureLimit", "3")]),
        ),
        case(
            "analysis/limits",
            E,
            "spec.metrics[0].inconclusiveLimit",
            template_metric(&[("inconclusiveLimit", "-1")]),
            template_metric(&[("inconclusiveLimit", "0")]),
        ),
        case(
            "analysis/limits",
            E,
            "spec.metrics[0].consecutiveErrorLimit",
            template_metric(&[("consecutiveErrorLimit", "'-1'")]),
            template_metric(&[("consecutiveErrorLimit", "'0'")]),
        ),
        case(
            "analysis/limits",
            E,
            "spec.metrics[0].consecutiveSuccessLimit",
            template_metric(&[("consecutiveSuccessLimit", "-1")]),
            template_metric(&[("consecutiveSuccessLimit", "0")]),
        ),
        case(
            "analysis/limits",
            E,
            "spec.metrics[0].consecutiveFailureLimit",
            template_metric(&[("consecutiveFailureLimit", "0")]),
            template_metric(&[("consecutiveFailureLimit", "1")]),
        ),
        case(
            "analysis/count-interval",
            E,
            "spec.metrics[0].interval",
            template_metric(&[("count", "2")]),
            template_metric(&[("count", "2"), ("interval", "1m")]),
        )
        .absent(),
        case(
            "analysis/count-limits",
            E,
            "spec.metrics[0].count",
            template_metric(&[
                ("count", "2"),
                ("interval", "1m"),
                ("failureLimit", "2"),
                ("consecutiveSuccessLimit", "1"),
            ]),
            template_metric(&[
                ("count", "3"),
                ("interval", "1m"),
                ("failureLimit", "2"),
                ("consecutiveSuccessLimit", "1"),
            ]),
        ),
        case(
            "analysis/count-limits",
            E,
            "spec.metrics[0].count",
            template_metric(&[("count", "2"), ("interval", "1m"), ("inconclusiveLimit", "3")]),
            template_metric(&[("count", "3"), ("interval", "1m"), ("inconclusiveLimit", "3")]),
        ),
        case(
            "analysis/condition",
            E,
            "spec.metrics[0].successCondition",
            template_metric(&[("successCondition", "'len(result) > 0 && result[0] <'")]),
            template_metric(&[("successCondition", "'len(result) > 0 && result[0] < 1'")]),
        ),
        case(
            "analysis/condition",
            E,
            "spec.metrics[0].failureCondition",
            template_metric(&[("failureCondition", "'result[0] >> 2'")]),
            template_metric(&[("failureCondition", "'result[0] > 2'")]),
        ),
        case(
            "analysis/metric-name-pattern",
            E,
            "spec.dryRun[0].metricName",
            template("t", &[("dryRun", "[{metricName: '('}]")]),
            template("t", &[("dryRun", "[{metricName: '(m)'}]")]),
        ),
        case(
            "analysis/metric-name-pattern",
            E,
            "spec.measurementRetention[0].metricName",
            template("t", &[("measurementRetention", "[{metricName: other, limit: 5}]")]),
            template("t", &[("measurementRetention", "[{metricName: 'm.*', limit: 5}]")]),
        ),
        case(
            "analysis/passes-without-evidence",
            W,
            "spec.metrics[0].provider",
            template_metric(&[("successCondition", DROP)]),
            template_metric(&[]),
        ),
        // Argo passes a failure condition alone on NaN.
        case(
            "analysis/passes-without-evidence",
            W,
            "spec.metrics[0].failureCondition",
            template_metric(&[("successCondition", DROP), ("failureCondition", "'result[0] > 1'")]),
            template_metric(&[
                ("successCondition", DROP),
                ("failureCondition", "'len(result) == 0 || isNaN(result[0]) || result[0] > 1'"),
            ]),
        ),
        case(
            "analysis/passes-without-evidence",
            W,
            "spec.metrics[0].successCondition",
            run_metric(&[("successCondition", "'!(result[0] > 1)'")]),
            run_metric(&[]),
        ),
        case(
            "analysis/query-selects-canary",
            W,
            "spec.metrics[0].provider.prometheus.query",
            template_metric(&[(
                "provider",
                "{prometheus: {address: 'http://prometheus.example', query: 'sum(rate(errors_total[1m]))'}}",
            )]),
            template_metric(&[(
                "provider",
                "{prometheus: {address: 'http://prometheus.example', query: 'sum(rate(errors_total{rollouts_pod_template_hash=\"abc\"}[1m]))'}}",
            )]),
        ),
        case(
            "provider/fields",
            E,
            "spec.metrics[0].provider.datadog",
            template_metric(&[("provider", "{datadog: {queries: {a: 'sum:errors{*}'}}}")]),
            template_metric(&[(
                "provider",
                "{datadog: {apiVersion: v2, queries: {a: 'sum:errors{*}'}}}",
            )]),
        ),
        case(
            "provider/fields",
            E,
            "spec.metrics[0].provider.cloudWatch.metricDataQueries[0].metricStat",
            template_metric(&[(
                "provider",
                "{cloudWatch: {metricDataQueries: [{id: e, metricStat: {metric: {namespace: Shop, metricName: Errors}, period: 60}}]}}",
            )]),
            template_metric(&[(
                "provider",
                "{cloudWatch: {metricDataQueries: [{id: e, metricStat: {metric: {namespace: Shop, metricName: Errors}, period: 60, stat: Sum}}]}}",
            )]),
        ),
        // An address the providers would refuse at run time is an error before it runs.
        case(
            "provider/fields",
            E,
            "spec.metrics[0].provider.web.url",
            template_metric(&[("provider", "{web: {url: 'file:///etc/passwd'}}")]),
            template_metric(&[("provider", "{web: {url: '{{args.scheme}}://metrics.example/rate'}}")]),
        ),
        case(
            "provider/fields",
            E,
            "spec.metrics[0].provider.prometheus.address",
            template_metric(&[(
                "provider",
                "{prometheus: {address: 'prometheus:9090', query: 'sum(canary)'}}",
            )]),
            template_metric(&[(
                "provider",
                "{prometheus: {address: 'http://prometheus:9090', query: 'sum(canary)'}}",
            )]),
        ),
        case(
            "provider/fields",
            E,
            "spec.metrics[0].provider.graphite.address",
            template_metric(&[(
                "provider",
                "{graphite: {address: 'graphite.example', query: 'target=errors'}}",
            )]),
            template_metric(&[(
                "provider",
                "{graphite: {address: 'https://graphite.example', query: 'target=errors'}}",
            )]),
        ),
        case(
            "provider/credentials",
            N,
            "spec.metrics[0].provider.influxdb",
            template_metric(&[("provider", "{influxdb: {query: 'from(bucket: \"b\")'}}")]),
            template_metric(&[]),
        ),
        case(
            "provider/not-executable",
            W,
            "spec.metrics[0].provider.wavefront",
            template_metric(&[("provider", "{wavefront: {query: 'ts(errors)'}}")]),
            template_metric(&[]),
        ),
        case(
            "flotilla/extension",
            N,
            "spec.metrics[0].consecutiveFailureLimit",
            template_metric(&[("consecutiveFailureLimit", "2")]),
            template_metric(&[]),
        ),
        case(
            "flotilla/extension",
            N,
            "spec.metrics[0].onInconclusive",
            template_metric(&[("onInconclusive", "abort")]),
            template_metric(&[]),
        ),
        case(
            "flotilla/composite-metric",
            E,
            "spec.metrics[0].provider.compare.reference",
            template_metric(&[
                ("successCondition", DROP),
                ("provider", "{compare: {canary: {builtin: {metric: latency}}, reference: {offset: 24h, beforeStart: 30m}}}"),
            ]),
            template_metric(&[
                ("successCondition", DROP),
                ("provider", "{compare: {canary: {builtin: {metric: latency}}, reference: {offset: 24h}}}"),
            ]),
        ),
        case(
            "flotilla/composite-metric",
            E,
            "spec.metrics[0].provider.sequential",
            template_metric(&[
                ("successCondition", DROP),
                ("provider", "{sequential: {alpha: 0.5, beta: 0.5}}"),
            ]),
            template_metric(&[
                ("successCondition", DROP),
                ("provider", "{sequential: {alpha: 0.01}}"),
            ]),
        ),
        case(
            "flotilla/zero-inflated",
            W,
            "spec.metrics[0].provider.compare.canary",
            template_metric(&[
                ("successCondition", DROP),
                ("provider", "{compare: {canary: {builtin: {metric: error-rate}}}}"),
            ]),
            template_metric(&[
                ("successCondition", DROP),
                ("provider", "{sequential: {}}"),
            ]),
        ),
        case(
            "flotilla/composite-conditions",
            W,
            "spec.metrics[0].successCondition",
            template_metric(&[("provider", "{sequential: {}}")]),
            template_metric(&[("successCondition", DROP), ("provider", "{sequential: {}}")]),
        ),
        case(
            "flotilla/baseline",
            E,
            "spec.metrics[0].successCondition",
            template_metric(&[
                ("successCondition", "'len(result) > 0 && result[0] <= baseline.p95 * 1.2'"),
                ("provider", "{builtin: {metric: latency}}"),
            ]),
            template_metric(&[
                ("successCondition", "'len(result) > 0 && result[0] <= baseline.p95 * 1.2'"),
                ("provider", "{builtin: {metric: latency}}"),
                ("baseline", "{window: 30m}"),
            ]),
        ),
    ]);

    // ----- Fleet structure -----
    cases.extend([
        case(
            "fleet/clusters",
            E,
            "spec.clusters",
            manifest(FLOTILLA, "Fleet", "f", &[("clusters", "[]")], &[]),
            fleet_of(&[cluster(1, "canary", &[])]),
        ),
        case(
            "fleet/clusters",
            E,
            "spec.clusters[1].name",
            fleet(&[], &[("name", "c1")]),
            fleet(&[], &[]),
        ),
        case(
            "fleet/clusters",
            E,
            "spec.clusters[0].name",
            fleet(&[("name", "' '")], &[]),
            fleet(&[], &[]),
        ),
        case(
            "fleet/endpoint",
            W,
            "spec.clusters[0].endpoint",
            fleet(&[("endpoint", DROP)], &[]),
            fleet(&[], &[]),
        )
        .absent(),
        case(
            "fleet/endpoint",
            E,
            "spec.clusters[0].endpoint",
            fleet(&[("endpoint", "{}")], &[]),
            fleet(&[], &[]),
        ),
        case(
            "fleet/endpoint",
            E,
            "spec.clusters[0].endpoint",
            fleet(
                &[(
                    "endpoint",
                    "{agent: 'http://127.0.0.1:7101', kubernetes: {server: 'https://k8s.example'}}",
                )],
                &[],
            ),
            fleet(&[("endpoint", "{agent: 'http://127.0.0.1:7101'}")], &[]),
        ),
        case(
            "fleet/endpoint-url",
            E,
            "spec.clusters[0].endpoint.agent",
            fleet(&[("endpoint", "{agent: '127.0.0.1:7101'}")], &[]),
            fleet(&[("endpoint", "{agent: 'http://127.0.0.1:7101'}")], &[]),
        ),
        // No host: an empty authority before the port, or before the query.
        case(
            "fleet/endpoint-url",
            E,
            "spec.clusters[0].endpoint.agent",
            fleet(&[("endpoint", "{agent: 'http://:7101'}")], &[]),
            fleet(&[("endpoint", "{agent: 'http://127.0.0.1:7101'}")], &[]),
        ),
        case(
            "fleet/endpoint-url",
            E,
            "spec.clusters[0].endpoint.agent",
            fleet(&[("endpoint", "{agent: 'http://?x'}")], &[]),
            fleet(&[("endpoint", "{agent: 'http://127.0.0.1:7101'}")], &[]),
        ),
        // Credentials are not a host; a bracketed IPv6 address is one.
        case(
            "fleet/endpoint-url",
            E,
            "spec.clusters[0].endpoint.agent",
            fleet(&[("endpoint", "{agent: 'http://user:pass@:7101/x'}")], &[]),
            fleet(&[("endpoint", "{agent: 'http://user:pass@[::1]:7101/x'}")], &[]),
        ),
        case(
            "fleet/endpoint-url",
            E,
            "spec.clusters[0].endpoint.agent",
            fleet(&[("endpoint", "{agent: 'http://[]:7101'}")], &[]),
            fleet(&[("endpoint", "{agent: 'https://[::1]'}")], &[]),
        ),
        // A port is a number from 1 to 65535.
        case(
            "fleet/endpoint-url",
            E,
            "spec.clusters[1].metrics.address",
            fleet(&[], &[("metrics", "{address: 'http://127.0.0.1:65536'}")]),
            fleet(&[], &[("metrics", "{address: 'http://127.0.0.1:65535'}")]),
        ),
        case(
            "fleet/endpoint-url",
            E,
            "spec.clusters[1].metrics.address",
            fleet(&[], &[("metrics", "{address: 'http://metrics.example:0#x'}")]),
            fleet(&[], &[("metrics", "{address: 'http://metrics.example:9102#x'}")]),
        ),
        case(
            "fleet/endpoint-url",
            E,
            "spec.clusters[1].metrics.address",
            fleet(&[], &[("metrics", "{address: 'http://metrics.example:http'}")]),
            fleet(&[], &[("metrics", "{address: 'http://metrics.example'}")]),
        ),
        case(
            "fleet/endpoint-url",
            E,
            "spec.clusters[1].metrics.address",
            fleet(&[], &[("metrics", "{address: 'ftp://127.0.0.1:9102'}")]),
            fleet(&[], &[("metrics", "{address: 'https://127.0.0.1:9102'}")]),
        ),
        case(
            "fleet/endpoint-url",
            E,
            "spec.clusters[0].endpoint.kubernetes.server",
            fleet(&[("endpoint", "{kubernetes: {server: 'https://'}}")], &[]),
            fleet(&[("endpoint", "{kubernetes: {server: 'https://k8s.example'}}")], &[]),
        ),
        // The server is optional (the kubeconfig context's server stands in for it).
        case(
            "fleet/endpoint-url",
            E,
            "spec.clusters[0].endpoint.kubernetes.server",
            fleet(&[("endpoint", "{kubernetes: {context: kind-c1, server: 'k8s.example'}}")], &[]),
            fleet(&[("endpoint", "{kubernetes: {context: kind-c1}}")], &[]),
        ),
        // A Kubernetes cluster's analysis runs from the controller, outside the cluster.
        case(
            "fleet/kubernetes-metrics",
            W,
            "spec.clusters[0]",
            fleet(&[("endpoint", K8S_FLOTILLA), ("metrics", DROP)], &[]),
            fleet(&[("endpoint", K8S_FLOTILLA)], &[]),
        ),
        // Only Kubernetes clusters: an agent cluster without metrics is not reported.
        case(
            "fleet/kubernetes-metrics",
            W,
            "spec.clusters[1]",
            fleet(&[], &[("endpoint", K8S_FLOTILLA), ("metrics", DROP)]),
            fleet(&[], &[("metrics", DROP)]),
        ),
        // `via: apiserver` reaches the template's in-cluster addresses: no warning without an
        // address; on a cluster with no API server it is an error.
        case(
            "fleet/kubernetes-metrics",
            W,
            "spec.clusters[0]",
            fleet(&[("endpoint", K8S_FLOTILLA), ("metrics", DROP)], &[]),
            fleet(&[("endpoint", K8S_FLOTILLA), ("metrics", "{via: apiserver}")], &[]),
        ),
        case(
            "fleet/kubernetes-metrics",
            E,
            "spec.clusters[1].metrics.via",
            fleet(&[], &[("metrics", "{via: apiserver}")]),
            fleet(&[], &[("endpoint", K8S_FLOTILLA), ("metrics", "{via: apiserver}")]),
        ),
        case(
            "fleet/kubernetes-metrics",
            E,
            "spec.clusters[1].metrics",
            fleet(&[], &[("endpoint", K8S_FLOTILLA), ("metrics", "{}")]),
            fleet(&[], &[("endpoint", K8S_FLOTILLA), ("metrics", "{via: apiserver, address: 'http://prometheus.monitoring:9090'}")]),
        ),
        case(
            "fleet/waves",
            E,
            "spec.waves",
            fleet_set(&[("waves", "{}")]),
            fleet_set(&[]),
        ),
        case(
            "fleet/waves",
            E,
            "spec.waves",
            fleet_set(&[(
                "waves",
                "{list: [{cluster: c1, wave: 1}, {cluster: c2, wave: 2}], steps: [{matchLabels: {tier: canary}}]}",
            )]),
            fleet_set(&[]),
        ),
        case(
            "fleet/waves",
            E,
            "spec.waves.list",
            docs(&[&fleet_rollout(&[("waves", "{list: []}")])]),
            docs(&[&fleet_rollout(&[("waves", "{list: [{cluster: c1, wave: 1}]}")])]),
        ),
        case(
            "fleet/waves",
            E,
            "spec.waves.steps",
            docs(&[&fleet_rollout(&[("waves", "{steps: []}")])]),
            docs(&[&fleet_rollout(&[("waves", "{steps: [{}]}")])]),
        ),
        case(
            "fleet/waves",
            E,
            "spec.waves.list[0].wave",
            fleet_set(&[("waves", "{list: [{cluster: c1, wave: 0}, {cluster: c2, wave: 2}]}")]),
            fleet_set(&[("waves", "{list: [{cluster: c1, wave: 1}, {cluster: c2, wave: 2}]}")]),
        ),
        case(
            "fleet/waves",
            E,
            "spec.waves.list[2].cluster",
            fleet_set(&[(
                "waves",
                "{list: [{cluster: c1, wave: 1}, {cluster: c2, wave: 2}, {cluster: c1, wave: 3}]}",
            )]),
            fleet_set(&[]),
        ),
        case(
            "fleet/unknown-cluster",
            E,
            "spec.waves.list[1].cluster",
            fleet_set(&[("waves", "{list: [{cluster: c1, wave: 1}, {cluster: c3, wave: 2}]}")]),
            fleet_set(&[("waves", "{list: [{cluster: c1, wave: 1}, {cluster: c2, wave: 2}]}")]),
        ),
        case(
            "fleet/unknown-cluster",
            E,
            "spec.clusterOverrides[0].cluster",
            fleet_set(&[("clusterOverrides", "[{cluster: c3, args: [{name: x, value: '1'}]}]")]),
            fleet_set(&[("clusterOverrides", "[{cluster: c2, args: [{name: x, value: '1'}]}]")]),
        ),
        case(
            "fleet/untargeted-cluster",
            W,
            "spec.waves.list",
            fleet_set(&[("waves", "{list: [{cluster: c1, wave: 1}]}")]),
            fleet_set(&[]),
        ),
        case(
            "fleet/untargeted-cluster",
            W,
            "spec.waves.steps",
            fleet_set(&[("waves", "{steps: [{matchLabels: {tier: canary}}]}")]),
            fleet_set(&[(
                "waves",
                "{steps: [{matchLabels: {tier: canary}}, {matchLabels: {tier: prod}}]}",
            )]),
        ),
        case(
            "fleet/empty-wave",
            W,
            "spec.waves.steps[1]",
            fleet_set(&[(
                "waves",
                "{steps: [{matchLabels: {tier: canary}}, {matchLabels: {tier: canary}}, {matchLabels: {tier: prod}}]}",
            )]),
            fleet_set(&[(
                "waves",
                "{steps: [{matchLabels: {tier: canary}}, {matchLabels: {tier: prod}}]}",
            )]),
        ),
        case(
            "fleet/max-update",
            E,
            "spec.waves.steps[0].maxUpdate",
            fleet_set(&[(
                "waves",
                "{steps: [{matchLabels: {tier: canary}, maxUpdate: 0}, {matchLabels: {tier: prod}}]}",
            )]),
            fleet_set(&[(
                "waves",
                "{steps: [{matchLabels: {tier: canary}, maxUpdate: 1}, {matchLabels: {tier: prod}}]}",
            )]),
        ),
        case(
            "fleet/max-update",
            E,
            "spec.waves.steps[1].maxUpdate",
            fleet_set(&[(
                "waves",
                "{steps: [{matchLabels: {tier: canary}}, {matchLabels: {tier: prod}, maxUpdate: '0%'}]}",
            )]),
            fleet_set(&[(
                "waves",
                "{steps: [{matchLabels: {tier: canary}}, {matchLabels: {tier: prod}, maxUpdate: '50%'}]}",
            )]),
        ),
        case(
            "fleet/lockstep-max-update",
            W,
            "spec.waves.steps[0].maxUpdate",
            fleet_set(&[("waves", "{steps: [{lockstep: true, maxUpdate: 1}]}")]),
            fleet_set(&[("waves", "{steps: [{lockstep: true}]}")]),
        ),
        case(
            "fleet/lockstep-single-cluster",
            W,
            "spec.waves.steps[1].lockstep",
            fleet_set(&[(
                "waves",
                "{steps: [{matchLabels: {tier: canary}}, {matchLabels: {tier: prod}, lockstep: true}]}",
            )]),
            fleet_set(&[("waves", "{steps: [{lockstep: true}]}")]),
        ),
        case(
            "fleet/lockstep-single-cluster",
            W,
            "spec.waves.lockstep",
            fleet_set(&[("waves", "{list: [{cluster: c1, wave: 1}, {cluster: c2, wave: 2}], lockstep: true}")]),
            fleet_set(&[("waves", "{list: [{cluster: c1, wave: 1}, {cluster: c2, wave: 1}], lockstep: true}")]),
        ),
        case(
            "fleet/lockstep-no-steps",
            W,
            "spec.waves.steps",
            docs(&[
                &fleet(&[], &[]),
                &fleet_rollout(&[("waves", "{steps: [{lockstep: true}]}")]),
                &canary_steps("analysis: {templates: [{templateName: t}]}", "[]"),
                &template_metric(&[]),
            ]),
            docs(&[
                &fleet(&[], &[]),
                &fleet_rollout(&[("waves", "{steps: [{lockstep: true}]}")]),
                &gated_rollout(),
                &template_metric(&[]),
            ]),
        ),
        case(
            "fleet/selector",
            E,
            "spec.waves.steps[0].matchExpressions[0].values",
            fleet_set(&[(
                "waves",
                "{steps: [{matchExpressions: [{key: tier, operator: In}]}, {}]}",
            )]),
            fleet_set(&[(
                "waves",
                "{steps: [{matchExpressions: [{key: tier, operator: In, values: [canary]}]}, {}]}",
            )]),
        )
        .absent(),
        case(
            "fleet/selector",
            E,
            "spec.waves.steps[0].matchExpressions[0].values",
            fleet_set(&[(
                "waves",
                "{steps: [{matchExpressions: [{key: tier, operator: DoesNotExist, values: [canary]}]}, {}]}",
            )]),
            fleet_set(&[(
                "waves",
                "{steps: [{matchExpressions: [{key: tier, operator: NotIn, values: [canary]}]}, {}]}",
            )]),
        ),
        case(
            "fleet/overrides",
            E,
            "spec.clusterOverrides[1].cluster",
            fleet_set(&[(
                "clusterOverrides",
                "[{cluster: c1, args: [{name: x, value: '1'}]}, {cluster: c1, args: [{name: y, value: '1'}]}]",
            )]),
            fleet_set(&[(
                "clusterOverrides",
                "[{cluster: c1, args: [{name: x, value: '1'}]}, {cluster: c2, args: [{name: y, value: '1'}]}]",
            )]),
        ),
        case(
            "fleet/duration",
            E,
            "spec.bakeTime",
            fleet_set(&[("bakeTime", "'{{args.bake}}'")]),
            fleet_set(&[("bakeTime", "2m")]),
        ),
        case(
            "fleet/duration",
            E,
            "spec.failurePolicy.unreachable.timeout",
            fleet_set(&[("failurePolicy", "{unreachable: {timeout: '{{args.timeout}}', action: halt}}")]),
            fleet_set(&[("failurePolicy", "{unreachable: {timeout: 5m, action: halt}}")]),
        ),
    ]);
    let region_template = template_metric(&[(
        "provider",
        "{web: {url: 'http://metrics.example/{{args.region}}/{{args.cluster}}'}}",
    )]);
    let address_template =
        template_metric(&[("provider", "{web: {url: '{{args.metrics-address}}/rate'}}")]);
    cases.extend([
        case(
            "fleet/injected-arg",
            E,
            "spec.fleet",
            docs(&[
                &fleet(&[], &[("region", DROP)]),
                &fleet_rollout(&[]),
                &gated_rollout(),
                &region_template,
            ]),
            docs(&[
                &fleet(&[], &[]),
                &fleet_rollout(&[]),
                &gated_rollout(),
                &region_template,
            ]),
        ),
        case(
            "fleet/injected-arg",
            E,
            "spec.fleet",
            docs(&[
                &fleet(&[("metrics", DROP)], &[]),
                &fleet_rollout(&[]),
                &gated_rollout(),
                &address_template,
            ]),
            docs(&[
                &fleet(&[], &[]),
                &fleet_rollout(&[]),
                &gated_rollout(),
                &address_template,
            ]),
        ),
    ]);

    // ----- Istio across clusters: routing that would mix clusters' canaries -----
    let meshed = |c1: &str, c2: &str, router: &str| {
        let endpoint = |istio: &str| {
            if istio.is_empty() {
                "{kubernetes: {context: kind-c1}}".to_owned()
            } else {
                ["{kubernetes: {context: kind-c1, istio: ", istio, "}}"].concat()
            }
        };
        docs(&[
            &fleet(
                &[("endpoint", &endpoint(c1))],
                &[("endpoint", &endpoint(c2))],
            ),
            &fleet_rollout(&[]),
            &canary(router),
        ])
    };
    let host_based = [
        SERVICES,
        ", ",
        &routing("istio: {virtualService: {name: vs}}", ""),
    ]
    .concat();
    let subset_based = routing(ISTIO, "");
    cases.extend([
        case(
            "fleet/istio-multicluster",
            E,
            "spec.clusters[0].endpoint.kubernetes.istio",
            meshed("", "{meshId: m2}", &host_based),
            meshed("{meshId: m1}", "{meshId: m2}", &host_based),
        )
        .absent(),
        case(
            "fleet/istio-multicluster",
            E,
            "spec.clusters[1].endpoint.kubernetes.istio",
            meshed(
                "{meshId: m, clusterLocal: true}",
                "{meshId: m}",
                &host_based,
            ),
            meshed(
                "{meshId: m, clusterLocal: true}",
                "{meshId: m, clusterLocal: true}",
                &host_based,
            ),
        ),
        case(
            "fleet/istio-multicluster",
            E,
            "spec.clusters[0].endpoint.kubernetes.istio.cluster",
            meshed("{meshId: m}", "{meshId: m, cluster: east}", &subset_based),
            meshed(
                "{meshId: m, cluster: west}",
                "{meshId: m, cluster: east}",
                &subset_based,
            ),
        )
        .absent(),
        case(
            "fleet/istio-multicluster",
            E,
            "spec.clusters[1].endpoint.kubernetes.istio.cluster",
            meshed(
                "{meshId: m, cluster: east}",
                "{meshId: m, cluster: east}",
                &subset_based,
            ),
            meshed(
                "{meshId: m, cluster: west}",
                "{meshId: m, cluster: east}",
                &subset_based,
            ),
        ),
    ]);

    // ----- Kubernetes clusters: who owns the Rollout's spec -----
    // ----- Multi-cluster anti-patterns -----
    let ungated = |waves_extra: &[(&str, &str)], rollout_text: &str| {
        docs(&[
            &fleet(&[], &[]),
            &fleet_rollout(waves_extra),
            rollout_text,
            &template_metric(&[]),
        ])
    };
    let literal = template_metric(&[]);
    let by_arg = edit(
        &template_metric(&[(
            "successCondition",
            "'len(result) > 0 && !isNaN(result[0]) && result[0] < {{args.max}}'",
        )]),
        "spec:\n",
        "spec:\n  args: [{name: max}]\n",
    );
    let two_regions = fleet(&[], &[("region", "us")]);
    cases.extend([
        case(
            "fleet/single-wave",
            W,
            "spec.waves",
            fleet_set(&[("waves", "{list: [{cluster: c1, wave: 1}, {cluster: c2, wave: 1}]}")]),
            fleet_set(&[("waves", "{list: [{cluster: c1, wave: 1}, {cluster: c2, wave: 2}]}")]),
        ),
        case(
            "fleet/single-wave",
            W,
            "spec.waves",
            fleet_set(&[("waves", "{steps: [{}]}")]),
            fleet_set(&[("waves", "{steps: [{matchLabels: {tier: canary}}, {}]}")]),
        ),
        case(
            "fleet/wave-without-gate",
            W,
            "spec.waves",
            ungated(&[], &base),
            ungated(&[("waveAnalysis", "{templates: [{templateName: t}]}")], &base),
        ),
        case(
            "fleet/wave-without-gate",
            W,
            "spec.waves",
            ungated(&[], &base),
            ungated(&[], &canary_steps("", "[{setWeight: 25}, {analysis: {templates: [{templateName: t}]}}]")),
        ),
        // An experiment step's analyses run with the rollout, so they gate too.
        case(
            "fleet/wave-without-gate",
            W,
            "spec.waves",
            ungated(&[], &base),
            ungated(
                &[],
                &canary_steps(
                    "",
                    "[{experiment: {templates: [{name: e, specRef: canary}], analyses: [{name: a, templateName: t}]}}]",
                ),
            ),
        ),
        case(
            "fleet/wave-without-gate",
            W,
            "spec.waves",
            ungated(&[], &blue_green("activeService: active")),
            ungated(
                &[],
                &blue_green("activeService: active, postPromotionAnalysis: {templates: [{templateName: t}]}"),
            ),
        ),
        // Reported on the template's condition.
        case(
            "fleet/global-threshold",
            W,
            "spec.metrics[0].successCondition",
            docs(&[&two_regions, &fleet_rollout(&[]), &gated_rollout(), &literal]),
            docs(&[
                &two_regions,
                &fleet_rollout(&[("clusterOverrides", overrides_max)]),
                &gated_rollout(),
                &by_arg,
            ]),
        ),
        case(
            "fleet/global-threshold",
            W,
            "spec.metrics[0].successCondition",
            docs(&[&two_regions, &fleet_rollout(&[]), &gated_rollout(), &literal]),
            docs(&[&fleet(&[], &[]), &fleet_rollout(&[]), &gated_rollout(), &literal]),
        ),
        // An argument set for one cluster only is still one value for the other.
        case(
            "fleet/global-threshold",
            W,
            "spec.metrics[0].successCondition",
            docs(&[
                &two_regions,
                &fleet_rollout(&[("clusterOverrides", "[{cluster: c1, args: [{name: max, value: '1'}]}]")]),
                &gated_rollout(),
                &by_arg,
            ]),
            docs(&[
                &two_regions,
                &fleet_rollout(&[("clusterOverrides", overrides_max)]),
                &gated_rollout(),
                &by_arg,
            ]),
        ),
    ]);

    // ----- Scenarios (flotilla simulate) -----
    let scen = |overrides: &[(&str, &str)]| scenario_set(overrides);
    let events = |list: &str| scenario_set(&[("events", list)]);
    let canary = |share: &str| {
        format!(
            "canary: {{errorRate: 0.01, latency: {{p50: 0.1, p95: 0.2}}, trafficShare: {share}}}"
        )
    };
    cases.extend([
        case(
            "scenario/events",
            E,
            "spec.events[0].at",
            events("[{at: 3h, command: pause}]"),
            events("[{at: 1h, command: pause}]"),
        ),
        case(
            "scenario/events",
            E,
            "spec.events[0].cluster",
            events("[{at: 1m, command: abort, cluster: c9}]"),
            events("[{at: 1m, command: abort, cluster: c2}]"),
        ),
        case(
            "scenario/events",
            E,
            "spec.events[0]",
            events("[{at: 1m, command: pause, leave: c2}]"),
            events("[{at: 1m, leave: c2}]"),
        ),
        case(
            "scenario/events",
            E,
            "spec.events[0].cluster",
            events("[{at: 1m, command: retry, cluster: c2}]"),
            events("[{at: 1m, command: retry}]"),
        ),
        case(
            "scenario/events",
            E,
            "spec.events[0].wave",
            events("[{at: 1m, command: promote, wave: 3}]"),
            events("[{at: 1m, command: promote, wave: 2}]"),
        ),
        case(
            "scenario/events",
            E,
            "spec.events[1].join",
            events("[{at: 1m, join: c2}, {at: 2m, join: c2}]"),
            events("[{at: 1m, join: c2}, {at: 2m, leave: c2}]"),
        ),
        case(
            "schema",
            E,
            "spec.events[0].command",
            events("[{at: 1m, command: rollback}]"),
            events("[{at: 1m, command: undo}]"),
        ),
        case(
            "scenario/traffic",
            E,
            "spec.clusters[1].canary.trafficShare",
            scen(&[("clusters", &scenario_clusters(&canary("1.5")))]),
            scen(&[("clusters", &scenario_clusters(&canary("0")))]),
        ),
        case(
            "scenario/traffic",
            E,
            "spec.clusters[1].name",
            edit(
                &scen(&[]),
                "name: c2, requestsPerSecond",
                "name: c9, requestsPerSecond",
            ),
            scen(&[]),
        ),
        case(
            "scenario/faults",
            E,
            "spec.clusters[1].faults[0].to",
            scen(&[(
                "clusters",
                &scenario_clusters("faults: [{kind: unreachable, from: 5m, to: 4m}]"),
            )]),
            scen(&[(
                "clusters",
                &scenario_clusters(
                    "faults: [{kind: unreachable, from: {afterClusterStart: 5m}, for: 1m}]",
                ),
            )]),
        ),
    ]);
    cases
}

/// The clusters of [`scenario_set`], with `extra` fields on c2.
fn scenario_clusters(extra: &str) -> String {
    let profile = "{errorRate: 0.01, latency: {p50: 0.1, p95: 0.2}}";
    format!(
        "[{{name: c1, requestsPerSecond: 10, stable: {profile}}}, {{name: c2, requestsPerSecond: 10, stable: {profile}, {extra}}}]"
    )
}

/// The base fleet set and a Scenario over it, with Scenario spec overrides.
fn scenario_set(overrides: &[(&str, &str)]) -> String {
    let clusters = scenario_clusters("noise: 0.05");
    docs(&[
        &fleet_set(&[]),
        &manifest(
            FLOTILLA,
            "Scenario",
            "s",
            &[
                ("previousImage", "app:0"),
                ("duration", "2h"),
                ("clusters", &clusters),
            ],
            overrides,
        ),
    ])
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

fn show(diagnostics: &[Diagnostic]) -> String {
    diagnostics
        .iter()
        .map(|d| format!("  {d}\n"))
        .collect::<String>()
}

/// Whether `d` is located exactly at `path` in one of the documents of `text`.
fn located_at_path(text: &str, d: &Diagnostic) -> bool {
    let documents = parse_documents(text, Budget::default()).expect("the case parses");
    documents.iter().any(|doc| {
        doc.locations
            .get(&d.path)
            .is_some_and(|l| l.line == d.line && l.column == d.column)
    })
}

fn path_in_source(text: &str, path: &str) -> bool {
    let documents = parse_documents(text, Budget::default()).expect("the case parses");
    documents
        .iter()
        .any(|doc| doc.locations.get(path).is_some())
}

#[test]
fn the_bases_are_clean() {
    for text in [
        rollout(&[]),
        blue_green("activeService: active, previewService: preview"),
        template_metric(&[]),
        run_metric(&[]),
        analysis("ClusterAnalysisTemplate", "t", &[]),
        fleet_set(&[]),
    ] {
        let found = diagnostics(&text);
        assert!(
            found.is_empty(),
            "a base reports:\n{}\n{text}",
            show(&found)
        );
    }
    let found = diagnostics(&experiment(&[]));
    assert!(
        found.iter().all(|d| d.rule == "experiment-not-executed"),
        "the base Experiment reports:\n{}",
        show(&found)
    );
}

#[test]
fn every_case_fails_then_passes() {
    let mut problems = Vec::new();
    for (i, case) in cases().iter().enumerate() {
        let id = format!("case {i} ({} at {:?})", case.rule, case.path);
        let fail = diagnostics(&case.fail);
        let hits: Vec<&Diagnostic> = fail.iter().filter(|d| d.rule == case.rule).collect();
        match hits
            .iter()
            .find(|d| d.severity == case.severity && d.path == case.path)
        {
            None => problems.push(format!(
                "{id}: the failing input does not report {} {} at {:?}; it reports:\n{}--- input:\n{}",
                case.severity,
                case.rule,
                case.path,
                show(&fail),
                case.fail
            )),
            Some(d) => {
                if d.file != "case.yaml" || d.line == 0 || d.column == 0 {
                    problems.push(format!("{id}: not located in the file: {d}"));
                }
                if !case.path.is_empty() {
                    if case.absent {
                        if path_in_source(&case.fail, case.path) {
                            problems.push(format!("{id}: marked absent, but the path is in the source"));
                        }
                    } else if !located_at_path(&case.fail, d) {
                        problems.push(format!(
                            "{id}: {d} is not located at its path in the source\n--- input:\n{}",
                            case.fail
                        ));
                    }
                }
            }
        }
        let pass = diagnostics(&case.pass);
        let wrong: Vec<Diagnostic> = pass
            .iter()
            .filter(|d| d.rule == case.rule || matches!(d.rule, "schema" | "yaml" | "input"))
            .cloned()
            .collect();
        if !wrong.is_empty() {
            problems.push(format!(
                "{id}: the passing input reports:\n{}--- input:\n{}",
                show(&wrong),
                case.pass
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// Rule ids the loader reports (manifest/mod.rs), which have no common prefix.
const LOADER_RULES: &[&str] = &[
    "input",
    "yaml",
    "schema",
    "ignored-kind",
    "experiment-not-executed",
];

/// Rule ids left out of the table, each with the reason. None: every rule has a case.
///
/// Two behaviours once at odds with docs/lint.md are documented there now and asserted by the
/// table: `fleet/wave-without-gate` counts an experiment step's analyses as a gate, and
/// `analysis/limits` accepts `failureLimit: -1` without `consecutiveSuccessLimit` when
/// `consecutiveFailureLimit` is set.
const UNCOVERED: &[(&str, &str)] = &[
    (
        "fleet/lockstep-steps",
        "reported by lint_held over the Rollouts the clusters hold, not by lint: see the held tests below",
    ),
    (
        "fleet/held-unread",
        "reported by lint_held over the Rollouts the clusters hold, not by lint: see the held tests below",
    ),
];

#[test]
fn the_table_covers_every_rule() {
    let sources = [
        ("lint/mod.rs", include_str!("mod.rs")),
        ("lint/rollout.rs", include_str!("rollout.rs")),
        ("lint/rollout/canary.rs", include_str!("rollout/canary.rs")),
        ("lint/rollout/checks.rs", include_str!("rollout/checks.rs")),
        ("lint/analysis.rs", include_str!("analysis.rs")),
        ("lint/fleet.rs", include_str!("fleet.rs")),
        ("lint/scenario.rs", include_str!("scenario.rs")),
        ("lint/held.rs", include_str!("held.rs")),
        ("lint/mesh.rs", include_str!("mesh.rs")),
        ("manifest/mod.rs", include_str!("../manifest/mod.rs")),
    ];
    let prefixed = Regex::new(
        r#""((?:argo|analysis|args|ref|fleet|rollout|provider|flotilla|scenario)/[a-z-]+)""#,
    )
    .expect("valid regex");
    // The rule is the first string literal of every call that reports.
    let reported =
        Regex::new(r#"sink\s*\.\s*(?:error|warn|push)\(\s*[^"]*?"([^"]*)""#).expect("valid regex");
    let mut in_sources = BTreeSet::new();
    for (_, source) in sources {
        for re in [&prefixed, &reported] {
            in_sources.extend(re.captures_iter(source).map(|c| c[1].to_owned()));
        }
    }
    let loader = sources
        .iter()
        .find(|(path, _)| *path == "manifest/mod.rs")
        .expect("the loader is scanned")
        .1;
    for rule in LOADER_RULES {
        assert!(
            loader.contains(&format!("\"{rule}\"")),
            "{rule} is no longer reported by the loader"
        );
        in_sources.insert(rule.to_string());
    }
    assert!(
        in_sources.len() > 50,
        "the scan found too few rules: {in_sources:?}"
    );

    let in_table: BTreeSet<String> = cases().iter().map(|c| c.rule.to_owned()).collect();
    let uncovered: BTreeSet<String> = UNCOVERED.iter().map(|(r, _)| r.to_string()).collect();
    let missing: Vec<&String> = in_sources
        .iter()
        .filter(|r| !in_table.contains(*r) && !uncovered.contains(*r))
        .collect();
    assert!(missing.is_empty(), "rules with no case: {missing:?}");
    let unknown: Vec<&String> = in_table
        .iter()
        .filter(|r| !in_sources.contains(*r))
        .collect();
    assert!(
        unknown.is_empty(),
        "cases for rules the sources never report: {unknown:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Over the Rollouts the clusters hold (`flotilla lint --live`)
// ---------------------------------------------------------------------------------------------

/// The Rollout of a one-manifest text.
fn rollout_of(text: &str) -> crate::spec::rollout::Rollout {
    match &load_bytes("held.yaml", text.as_bytes()).manifests[0].manifest {
        crate::spec::Manifest::Rollout(r) => (**r).clone(),
        other => panic!("not a Rollout: {other:?}"),
    }
}

/// What `lint_held` reports for `fleet_rollout_overrides`, c1 holding `c1` and c2 `c2`.
fn held_diagnostics(
    fleet_rollout_overrides: &[(&str, &str)],
    c1: Result<&str, &str>,
    c2: Result<&str, &str>,
) -> Vec<Diagnostic> {
    let text = fleet_set(fleet_rollout_overrides);
    let load = load_bytes("case.yaml", text.as_bytes());
    let read = |held: Result<&str, &str>| held.map(rollout_of).map_err(str::to_owned);
    let held = super::HeldRollouts::from([(
        "fr".to_owned(),
        std::collections::BTreeMap::from([
            ("c1".to_owned(), read(c1)),
            ("c2".to_owned(), read(c2)),
        ]),
    )]);
    super::lint_held(&load.manifests, &held, false)
}

const ONE_WAVE_LOCKSTEP: &str =
    "{list: [{cluster: c1, wave: 1}, {cluster: c2, wave: 1}], lockstep: true}";
const THREE_STEPS: &str = "[{setWeight: 10}, {pause: {}}, {setWeight: 50}]";
const TWO_STEPS: &str = "[{setWeight: 10}, {pause: {}}]";

#[test]
fn a_lockstep_wave_whose_clusters_hold_different_steps_is_an_error_at_its_lockstep_field() {
    let three = canary_steps("", THREE_STEPS);
    let two = canary_steps("", TWO_STEPS);
    let found = held_diagnostics(&[("waves", ONE_WAVE_LOCKSTEP)], Ok(&three), Ok(&two));
    assert_eq!(found.len(), 1, "{found:?}");
    let d = &found[0];
    assert_eq!(
        (d.severity, d.rule, d.path.as_str()),
        (E, "fleet/lockstep-steps", "spec.waves.lockstep")
    );
    assert_eq!(d.file, "case.yaml");
    let text = fleet_set(&[("waves", ONE_WAVE_LOCKSTEP)]);
    let line = text.lines().nth(d.line as usize - 1).unwrap_or_default();
    assert!(line.contains("lockstep: true"), "line {}: {line}", d.line);
    assert!(
        d.message.contains("wave 1")
            && d.message.contains("c1: 3 canary steps; c2: 2 canary steps"),
        "{}",
        d.message
    );
    // The same steps: nothing. Not lockstep: nothing (the runtime names the disagreement).
    assert!(held_diagnostics(&[("waves", ONE_WAVE_LOCKSTEP)], Ok(&three), Ok(&three)).is_empty());
    let one_wave = "{list: [{cluster: c1, wave: 1}, {cluster: c2, wave: 1}]}";
    assert!(held_diagnostics(&[("waves", one_wave)], Ok(&three), Ok(&two)).is_empty());
    // Clusters in different waves are not compared.
    let two_waves = "{list: [{cluster: c1, wave: 1}, {cluster: c2, wave: 2}], lockstep: true}";
    assert!(held_diagnostics(&[("waves", two_waves)], Ok(&three), Ok(&two)).is_empty());
}

#[test]
fn a_step_of_its_own_names_its_lockstep_field_and_a_blue_green_has_no_steps() {
    let steps = "{steps: [{lockstep: true}]}";
    let found = held_diagnostics(
        &[("waves", steps)],
        Ok(&canary_steps("", TWO_STEPS)),
        Ok(&blue_green("activeService: active")),
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].path, "spec.waves.steps[0].lockstep");
    assert!(
        found[0].message.contains("c2: blue-green"),
        "{}",
        found[0].message
    );
}

#[test]
fn a_cluster_whose_rollout_could_not_be_read_is_a_warning_and_is_not_compared() {
    let found = held_diagnostics(
        &[("waves", ONE_WAVE_LOCKSTEP)],
        Ok(&canary_steps("", THREE_STEPS)),
        Err("connection refused"),
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].severity, found[0].rule), (W, "fleet/held-unread"));
    assert!(found[0].message.contains("c2") && found[0].message.contains("connection refused"));
}
