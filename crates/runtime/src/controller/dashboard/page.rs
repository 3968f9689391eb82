//! The dashboard's HTML, rendered on the server from the daemon's views: the page shell, the
//! fleet list, a fleet's waves and clusters (as live parts with element ids), a cluster's
//! detail with its plots, a fleet's audit timeline, and the not-found page. No inline script or
//! style anywhere (the Content-Security-Policy forbids both).

use std::fmt::Write;

use flotilla_core::time::Millis;

use super::html::{esc, seg};
use super::svg;
use crate::controller::plots::ClusterPlots;
use crate::controller::record::{
    AuditEntry, AuditKind, ClusterView, FleetSummary, FleetView, RolloutView, WaveView,
};

/// Waves with more clusters than this start folded, unless current.
const OPEN_WAVE_MAX: usize = 50;

/// An element id for a name (ids of live parts).
pub fn part_id(prefix: &str, name: &str) -> String {
    format!("{prefix}-{}", seg(name))
}

fn time(ms: Option<Millis>) -> String {
    ms.map(|t| format!("{} UTC", flotilla_core::time::time_of_day(t)))
        .unwrap_or_default()
}

/// What kind of page, for the script.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The fleet list.
    List,
    /// One fleet's waves.
    Fleet,
    /// One cluster.
    Cluster,
    /// One fleet's audit timeline.
    Audit,
    /// Nothing there.
    Missing,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::List => "list",
            Kind::Fleet => "fleet",
            Kind::Cluster => "cluster",
            Kind::Audit => "audit",
            Kind::Missing => "missing",
        }
    }
}

/// The page around a body: title, navigation, the token box, the notice line and the
/// confirmation dialog.
pub fn shell(
    base: &str,
    kind: Kind,
    title: &str,
    fleet: Option<&str>,
    cluster: Option<&str>,
    body: &str,
) -> String {
    let mut nav = format!("<a href=\"{base}/\">Fleets</a>");
    if let Some(f) = fleet {
        let _ = write!(
            nav,
            " / <a href=\"{base}/fleets/{}\">{}</a> · <a href=\"{base}/fleets/{}/audit\">audit</a>",
            seg(f),
            esc(f),
            seg(f)
        );
    }
    if let Some(c) = cluster {
        let _ = write!(nav, " / {}", esc(c));
    }
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · Flotilla</title>
<link rel="stylesheet" href="{base}/assets/app.css">
<script src="{base}/assets/app.js" defer></script>
</head>
<body data-base="{base}" data-page="{kind}" data-fleet="{fleet}" data-cluster="{cluster}">
<header><span class="brand">Flotilla</span> <nav>{nav}</nav>
<form id="token-form" class="token"><span id="mode" class="mode">read-only: actions need the API token</span>
<input id="token" type="password" autocomplete="off" placeholder="API token" aria-label="API token">
<button id="token-use" type="submit">Use token</button>
<button id="token-forget" type="button" hidden>Forget token</button></form></header>
<div id="notice" role="status"></div>
<main id="live">{body}</main>
<dialog id="confirm"><p id="confirm-text"></p><button id="confirm-yes" type="button">Do it</button> <button id="confirm-no" type="button">Cancel</button></dialog>
</body></html>
"#,
        title = esc(title),
        kind = kind.as_str(),
        fleet = esc(fleet.unwrap_or("")),
        cluster = esc(cluster.unwrap_or("")),
    )
}

/// An action button, shown only with a token: the command's JSON and what the confirmation
/// says it will do.
fn action(label: &str, command: &str, confirm: &str) -> String {
    format!(
        "<button type=\"button\" class=\"action\" data-command=\"{}\" data-confirm=\"{}\">{}</button>",
        esc(command),
        esc(confirm),
        esc(label)
    )
}

fn phase_class(phase: &str) -> &'static str {
    match phase {
        "Completed" | "Validated" | "Healthy" | "Successful" => "ok",
        "Failed" | "RolledBack" | "Aborted" | "Degraded" | "Error" | "Invalid" => "bad",
        "Paused" | "Held" | "Halted" | "Inconclusive" => "warn",
        _ => "run",
    }
}

/// The fleet list's live parts: one row per fleet.
pub fn list_rows(base: &str, fleets: &[FleetSummary]) -> Vec<(String, String)> {
    fleets
        .iter()
        .map(|f| {
            let id = part_id("f", &f.name);
            let reason = if f.errors.is_empty() {
                f.message.clone()
            } else {
                f.errors.join("; ")
            };
            let html = format!(
                "<tr id=\"{id}\"><td><a href=\"{base}/fleets/{}\">{}</a></td><td class=\"{}\">{}</td><td>{}</td><td>{}</td><td>{}/{}</td><td class=\"reason\">{}</td></tr>",
                seg(&f.name),
                esc(&f.name),
                phase_class(&f.phase),
                esc(&f.phase),
                esc(&f.revision),
                esc(&f.image),
                f.wave,
                f.waves,
                esc(&reason)
            );
            (id, html)
        })
        .collect()
}

/// The fleet list's body around its rows.
pub fn list_body(rows: &[(String, String)]) -> String {
    let mut out = String::from(
        "<h1>Fleet rollouts</h1><table class=\"list\"><thead><tr><th>fleet</th><th>phase</th><th>revision</th><th>image</th><th>wave</th><th>why</th></tr></thead><tbody id=\"fleets\">",
    );
    for (_, row) in rows {
        out.push_str(row);
    }
    out.push_str("</tbody></table>");
    if rows.is_empty() {
        out.push_str("<p>No fleet rollouts.</p>");
    }
    out
}

/// A fleet page's live parts, in page order: the head, then each wave's head followed by its
/// clusters' rows.
pub fn fleet_parts(base: &str, view: &FleetView) -> Vec<(String, String)> {
    let mut parts = vec![("head".to_owned(), fleet_head(base, view))];
    for wave in &view.waves {
        parts.push((format!("w-{}", wave.index), wave_head(wave)));
        for c in &wave.clusters {
            parts.push((part_id("c", &c.name), cluster_row(base, &view.name, c)));
        }
    }
    parts
}

/// The fleet page's body from its parts (as [`fleet_parts`] made them).
pub fn fleet_body(view: &FleetView, parts: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut parts = parts.iter();
    if let Some((_, head)) = parts.next() {
        out.push_str(head);
    }
    for wave in &view.waves {
        let open = wave.index == view.wave
            || wave.clusters.len() <= OPEN_WAVE_MAX
            || wave
                .clusters
                .iter()
                .any(|c| phase_class(&c.status) == "bad");
        let _ = write!(
            out,
            "<details class=\"wave\"{}>",
            if open { " open" } else { "" }
        );
        if let Some((_, head)) = parts.next() {
            out.push_str(head);
        }
        out.push_str("<table class=\"clusters\"><thead><tr><th>cluster</th><th>status</th><th>step</th><th>canary / stable</th><th>versions</th><th>why</th></tr></thead><tbody>");
        for _ in &wave.clusters {
            if let Some((_, row)) = parts.next() {
                out.push_str(row);
            }
        }
        out.push_str("</tbody></table></details>");
    }
    out
}

fn fleet_head(base: &str, view: &FleetView) -> String {
    let mut out = format!(
        "<section id=\"head\"><h1>{} <span class=\"phase {}\" id=\"fleet-phase\">{}</span></h1><p>revision <b>{}</b>: {} → <b id=\"fleet-image\">{}</b> · wave <b id=\"fleet-wave\">{}</b> of {}{}</p>",
        esc(&view.name),
        phase_class(&view.phase),
        esc(&view.phase),
        esc(&view.revision),
        esc(&view.previous_image),
        esc(&view.image),
        view.wave,
        view.waves.len(),
        if view.paused {
            " · <b class=\"warn\">paused</b>"
        } else {
            ""
        }
    );
    if !view.message.is_empty() {
        let _ = write!(out, "<p class=\"message\">{}</p>", esc(&view.message));
    }
    if let Some(git) = &view.git {
        let _ = write!(out, "<p class=\"git\">Git: {}</p>", esc(git));
    }
    for e in &view.errors {
        let _ = write!(out, "<p class=\"bad\">{}</p>", esc(e));
    }
    let _ = write!(
        out,
        "<p><a href=\"{base}/fleets/{}/audit\">audit timeline</a></p>{}</section>",
        seg(&view.name),
        fleet_actions(view)
    );
    out
}

fn fleet_actions(view: &FleetView) -> String {
    let name = &view.name;
    let wave = view.wave;
    let mut out = String::from("<section id=\"actions\" class=\"actions\">");
    out.push_str(&action(
        "Promote wave",
        &format!("{{\"command\":\"promote\",\"wave\":{wave}}}"),
        &format!("Promote wave {wave} of {name}: skip its clusters' current bake or pause."),
    ));
    out.push_str(&action(
        "Promote wave fully",
        &format!("{{\"command\":\"promote\",\"wave\":{wave},\"full\":true}}"),
        &format!("Promote wave {wave} of {name} fully: skip every remaining step of its clusters."),
    ));
    out.push_str(&action(
        "Abort fleet",
        "{\"command\":\"abort\"}",
        &format!(
            "Abort {name}: every cluster in flight returns to its stable version; the clusters not started are held."
        ),
    ));
    out.push_str(&action(
        "Retry",
        "{\"command\":\"retry\"}",
        &format!("Retry the failed clusters of {name}."),
    ));
    out.push_str(&action(
        "Pause",
        "{\"command\":\"pause\"}",
        &format!("Pause {name}: start no new cluster or wave."),
    ));
    out.push_str(&action(
        "Resume",
        "{\"command\":\"resume\"}",
        &format!("Resume {name}."),
    ));
    out.push_str(&action(
        "Undo",
        "{\"command\":\"undo\"}",
        &format!("Undo {name}: roll the fleet back to the revision before the current one."),
    ));
    out.push_str("</section>");
    out
}

fn wave_head(wave: &WaveView) -> String {
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for c in &wave.clusters {
        *counts.entry(c.status.as_str()).or_default() += 1;
    }
    let counts: Vec<String> = counts
        .iter()
        .map(|(status, n)| {
            format!(
                "<span class=\"{}\">{n} {}</span>",
                phase_class(status),
                esc(status)
            )
        })
        .collect();
    let state = match (wave.started_at, wave.completed_at) {
        (_, Some(done)) => format!("completed {}", time(Some(done))),
        (Some(start), None) => format!("started {}", time(Some(start))),
        _ => "not started".into(),
    };
    let barrier = wave
        .barrier
        .as_ref()
        .map(|b| format!(" · lockstep: {}", esc(&format!("{b:?}"))))
        .unwrap_or_default();
    format!(
        "<summary id=\"w-{}\">Wave {} · {} cluster{} · {} · {}{}</summary>",
        wave.index,
        wave.index,
        wave.clusters.len(),
        if wave.clusters.len() == 1 { "" } else { "s" },
        state,
        counts.join(" · "),
        barrier
    )
}

/// Why a cluster waits or what holds it, in one line.
fn why(c: &ClusterView) -> String {
    let mut parts = Vec::new();
    if !c.reachable && c.started_at.is_some() {
        parts.push("unreachable".to_owned());
    }
    if !c.reason.is_empty() {
        parts.push(c.reason.clone());
    }
    if let Some(condition) = &c.condition {
        parts.push(condition.clone());
    }
    if let Some(drift) = &c.drift {
        parts.push(format!("drift: {drift}"));
    }
    if let Some(f) = &c.failure {
        parts.push(format!("{} = {}: {}", f.metric, f.value, f.message));
    }
    parts.join(" · ")
}

fn cluster_row(base: &str, fleet: &str, c: &ClusterView) -> String {
    let id = part_id("c", &c.name);
    let weights = match c.weights {
        Some((canary, stable)) => format!(
            "<svg class=\"bar\" width=\"60\" height=\"8\" role=\"img\" aria-label=\"canary {canary}%\"><rect width=\"60\" height=\"8\" fill=\"#d8dee4\"/><rect width=\"{}\" height=\"8\" fill=\"#1f6feb\"/></svg> <span class=\"weights\">{canary} / {stable}</span>",
            (canary.clamp(0, 100) * 60 / 100)
        ),
        None => c
            .desired_weight
            .map(|w| format!("<span class=\"weights\">wants {w}</span>"))
            .unwrap_or_default(),
    };
    let versions = match (&c.stable_version, &c.current_version) {
        (Some(s), Some(n)) if s != n => format!("{} → {}", esc(s), esc(n)),
        (Some(s), _) => esc(s),
        (None, Some(n)) => esc(n),
        _ => String::new(),
    };
    format!(
        "<tr id=\"{id}\" data-status=\"{status}\"><td><a href=\"{base}/fleets/{}/clusters/{}\">{}</a></td><td class=\"{}\">{status}</td><td>{}</td><td>{weights}</td><td>{versions}</td><td class=\"reason\">{}</td></tr>",
        seg(fleet),
        seg(&c.name),
        esc(&c.name),
        phase_class(&c.status),
        esc(c.step.as_deref().unwrap_or("")),
        esc(&why(c)),
        status = esc(&c.status),
    )
}

/// A cluster page's body: its state, actions, steps, plots and analysis.
pub fn cluster_body(
    base: &str,
    fleet: &str,
    rollout: &RolloutView,
    plots: Option<&ClusterPlots>,
) -> String {
    let c = &rollout.cluster;
    let mut out = format!(
        "<section id=\"cluster-head\"><h1>{} <span class=\"phase {}\" id=\"cluster-status\">{}</span></h1><p>rollout {} · step {} · weights {} · {}</p>",
        esc(&c.name),
        phase_class(&c.status),
        esc(&c.status),
        esc(&c.rollout_phase),
        esc(c.step.as_deref().unwrap_or("-")),
        c.weights
            .map(|(a, b)| format!("canary {a} / stable {b}"))
            .unwrap_or_else(|| "not observed".into()),
        match (&c.stable_version, &c.current_version) {
            (Some(s), Some(n)) => format!("stable {} · current {}", esc(s), esc(n)),
            _ => String::new(),
        }
    );
    let _ = write!(
        out,
        "<p><a href=\"{base}/fleets/{}\">the fleet's waves</a></p>",
        seg(fleet)
    );
    let reason = why(c);
    if !reason.is_empty() {
        let _ = write!(out, "<p class=\"reason\">{}</p>", esc(&reason));
    }
    if !c.rollout_message.is_empty() {
        let _ = write!(out, "<p class=\"message\">{}</p>", esc(&c.rollout_message));
    }
    out.push_str("</section><section class=\"actions\">");
    out.push_str(&action(
        "Abort this cluster",
        &format!(
            "{{\"command\":\"abort\",\"cluster\":{}}}",
            serde_json::to_string(&c.name).unwrap_or_default()
        ),
        &format!(
            "Abort {} in {fleet}: its canary returns to its stable version; the other clusters go on.",
            c.name
        ),
    ));
    out.push_str("</section>");
    // The steps as a timeline.
    if !rollout.steps.is_empty() {
        let current: usize = c
            .step
            .as_deref()
            .and_then(|s| s.split('/').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        out.push_str("<section><h2>Steps</h2><ol class=\"steps\">");
        for (i, step) in rollout.steps.iter().enumerate() {
            let class = if i < current {
                "done"
            } else if i == current && c.status != "Validated" {
                "now"
            } else {
                "later"
            };
            let _ = write!(out, "<li class=\"{class}\"><code>{}</code></li>", esc(step));
        }
        out.push_str("</ol></section>");
    }
    out.push_str("<section id=\"plots\"><h2>Plots</h2>");
    match plots {
        Some(p) => {
            out.push_str(&svg::plot(
                "canary weight",
                "weight",
                &p.weight,
                &[],
                Some((0.0, 100.0)),
            ));
            for (metric, series) in &p.metrics {
                out.push_str("<div class=\"metric\">");
                out.push_str(&svg::plot(
                    metric,
                    &format!("metric-{}", seg(metric)),
                    &series.points,
                    &series.thresholds,
                    None,
                ));
                if !series.explanation.is_empty() {
                    out.push_str(
                        "<table class=\"explain\"><caption>the judge's last verdict</caption>",
                    );
                    for (k, v) in &series.explanation {
                        let _ = write!(out, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(v));
                    }
                    out.push_str("</table>");
                }
                out.push_str("</div>");
            }
        }
        None => out.push_str("<p>No measurements yet.</p>"),
    }
    out.push_str("</section><section><h2>Analysis runs</h2>");
    for run in &c.analysis {
        let _ = write!(
            out,
            "<h3>{} <span class=\"{}\">{}</span></h3>",
            esc(&run.name),
            phase_class(&run.phase),
            esc(&run.phase)
        );
        if !run.message.is_empty() {
            let _ = write!(out, "<p class=\"message\">{}</p>", esc(&run.message));
        }
        out.push_str("<table><thead><tr><th>metric</th><th>phase</th><th>measured</th><th>failed</th><th>last value</th><th>message</th></tr></thead><tbody>");
        for m in &run.metrics {
            let _ = write!(
                out,
                "<tr><td>{}</td><td class=\"{}\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&m.name),
                phase_class(&m.phase),
                esc(&m.phase),
                m.count,
                m.failed,
                esc(m.value.as_deref().unwrap_or("")),
                esc(m.message.as_deref().unwrap_or(""))
            );
        }
        out.push_str("</tbody></table>");
    }
    if c.analysis.is_empty() {
        out.push_str("<p>No analysis run now.</p>");
    }
    out.push_str("</section>");
    out
}

/// A fleet's audit timeline, newest first.
pub fn audit_body(fleet: &str, entries: &[AuditEntry]) -> String {
    let mut out = format!(
        "<h1>{} · audit timeline</h1><p>Every decision with its inputs, the controller's Git commits and the notifications sent; newest first.</p><table class=\"audit\"><thead><tr><th>#</th><th>time</th><th>kind</th><th>cluster</th><th>decision</th></tr></thead><tbody>",
        esc(fleet)
    );
    for e in entries.iter().rev() {
        let mut detail = esc(&e.message);
        if let Some(op) = &e.operator {
            let _ = write!(detail, " <span class=\"who\">by {}</span>", esc(op));
        }
        if !e.evidence.is_empty() {
            let _ = write!(
                detail,
                "<details><summary>evidence ({})</summary><ul>",
                e.evidence.len()
            );
            for ev in &e.evidence {
                let _ = write!(
                    detail,
                    "<li><code>{}</code></li>",
                    esc(&serde_json::to_string(ev).unwrap_or_default())
                );
            }
            detail.push_str("</ul></details>");
        }
        let kind = e.kind.as_str();
        let _ = write!(
            out,
            "<tr class=\"kind-{kind}{}\"><td>{}</td><td>{}</td><td>{kind}</td><td>{}</td><td>{detail}</td></tr>",
            if matches!(e.kind, AuditKind::Rollback | AuditKind::Invalid) {
                " bad"
            } else {
                ""
            },
            e.seq,
            time(Some(e.time)),
            esc(e.cluster.as_deref().unwrap_or("")),
        );
    }
    out.push_str("</tbody></table>");
    out
}

/// The body of a page that names something that is not there.
pub fn missing_body(base: &str, what: &str) -> String {
    format!(
        "<h1>Not found</h1><p id=\"missing\">{}</p><p><a href=\"{base}/\">All fleet rollouts</a></p>",
        esc(what)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shell_escapes_names_and_has_no_inline_script_or_style() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(seg("a b/c"), "a%20b%2Fc");
        let page = shell("/d", Kind::Missing, "<x>", Some("f\""), None, "");
        assert!(page.contains("<title>&lt;x&gt; · Flotilla</title>"));
        assert!(page.contains("data-fleet=\"f&quot;\""));
        assert!(
            !page.contains("style="),
            "no inline style: the CSP forbids it"
        );
        assert!(!page.contains("<script>"), "no inline script");
    }
}
