//! Drawing a fleet for humans: the tree `get fleet` and the demo show (waves → clusters → step,
//! weights, analysis runs with their latest values and verdicts).

use std::fmt::Write;

use flotilla_runtime::controller::record::{ClusterView, FleetView};

fn icon(status: &str) -> &'static str {
    match status {
        "Validated" => "✔",
        "Progressing" => "◌",
        "Paused" => "॥",
        "RolledBack" => "✖",
        "Held" => "⊘",
        "Skipped" => "↷",
        "Pinned" => "⚲",
        _ => "·",
    }
}

fn clock(ms: Option<i64>) -> String {
    ms.map_or_else(String::new, |ms| {
        let s = ms / 1000;
        format!("{:02}:{:02}:{:02}", (s / 3600) % 24, (s / 60) % 60, s % 60)
    })
}

/// The tree of one fleet, as lines.
pub fn render(view: &FleetView) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Name:       {}", view.name);
    let _ = writeln!(
        out,
        "Revision:   {} ({}, from {})",
        view.revision, view.image, view.previous_image
    );
    let _ = writeln!(
        out,
        "Status:     {}{}  wave {}/{}",
        view.phase,
        if view.paused { " (paused)" } else { "" },
        view.wave,
        view.waves.len()
    );
    if !view.message.is_empty() {
        let _ = writeln!(out, "Message:    {}", view.message);
    }
    if let Some(git) = &view.git {
        let _ = writeln!(out, "Git:        {git}");
    }
    if !view.errors.is_empty() {
        let _ = writeln!(
            out,
            "Invalid:    the desired state was refused; the last valid one keeps running"
        );
        for error in &view.errors {
            let _ = writeln!(out, "  ✖ {error}");
        }
    }
    let _ = writeln!(
        out,
        "\n{:<28} {:<12} {:<6} {:<8} {:<16} INFO",
        "WAVE / CLUSTER", "STATUS", "STEP", "WEIGHT", "VERSION"
    );
    for wave in &view.waves {
        let state = match (wave.started_at, wave.completed_at) {
            (_, Some(done)) => format!("completed {}", clock(Some(done))),
            (Some(start), None) => format!("started {}", clock(Some(start))),
            _ => "not started".into(),
        };
        let lockstep = if wave.lockstep { "  lockstep" } else { "" };
        let _ = writeln!(out, "wave {}  {state}{lockstep}", wave.index);
        if let Some(b) = &wave.barrier {
            let mut line = format!(
                "  ⏸ barrier at step {}/{} ({} passed)",
                b.step, b.steps, b.passed
            );
            if !b.waiting.is_empty() {
                line.push_str(&format!("; waiting: {}", b.waiting.join(", ")));
            }
            if !b.not_there.is_empty() {
                line.push_str(&format!("; not there yet: {}", b.not_there.join(", ")));
            }
            let _ = writeln!(out, "{line}");
        }
        for cluster in &wave.clusters {
            render_cluster(&mut out, cluster);
        }
    }
    out
}

/// One cluster's lines of the tree: status, step, weights, versions, failure, analysis runs.
pub fn render_cluster(out: &mut String, c: &ClusterView) {
    let weight = c.weights.map_or_else(
        || "-".to_owned(),
        |(canary, stable)| format!("{canary}/{stable}"),
    );
    let version = match (&c.stable_version, &c.current_version) {
        (Some(s), Some(cur)) if s != cur => format!("{s}→{cur}"),
        (Some(s), _) => s.clone(),
        (None, Some(cur)) => cur.clone(),
        _ => "-".into(),
    };
    let info = if !c.reachable {
        "unreachable".to_owned()
    } else {
        c.reason.clone()
    };
    let _ = writeln!(
        out,
        "  {} {:<24} {:<12} {:<6} {:<8} {:<16} {}",
        icon(&c.status),
        c.name,
        c.status,
        c.step.as_deref().unwrap_or("-"),
        weight,
        version,
        info
    );
    if let Some(f) = &c.failure {
        let _ = writeln!(out, "      ✖ {} = {}: {}", f.metric, f.value, f.message);
    }
    if let Some(drift) = &c.drift {
        let _ = writeln!(out, "      ⚠ drift: {drift}");
    }
    for run in &c.analysis {
        let metrics: Vec<String> = run
            .metrics
            .iter()
            .map(|m| {
                let mark = match m.phase.as_str() {
                    "Successful" => "✔",
                    "Failed" => "✖",
                    "Error" => "⚠",
                    "Inconclusive" => "?",
                    _ => "…",
                };
                format!(
                    "{}={} {mark}({}{})",
                    m.name,
                    m.value.as_deref().unwrap_or("-"),
                    m.count,
                    if m.failed > 0 {
                        format!(", {} failed", m.failed)
                    } else {
                        String::new()
                    }
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "      ⎿ {} {}  {}",
            run.name,
            run.phase,
            metrics.join("  ")
        );
    }
}

#[cfg(test)]
mod tests {
    use flotilla_core::fleet::BarrierStatus;
    use flotilla_runtime::controller::record::{FleetView, WaveView};

    /// `get fleet` marks a lockstep wave and shows its barrier: the step, who waits and who is
    /// not there yet.
    #[test]
    fn a_lockstep_wave_shows_its_barrier() {
        let cluster = |name: &str, status: &str| {
            serde_json::from_value(serde_json::json!({
                "name": name, "status": status, "reason": "", "reachable": true,
                "rolloutPhase": "Paused", "rolloutMessage": "", "step": "0/2", "weights": [30, 70],
                "desiredWeight": 30, "stableVersion": "1.0", "currentVersion": "2.0",
                "failure": null, "startedAt": null, "decidedAt": null, "analysis": []
            }))
            .unwrap()
        };
        let view = FleetView {
            name: "app".into(),
            revision: "r1".into(),
            image: "app:2.0".into(),
            previous_image: "app:1.0".into(),
            phase: "Progressing".into(),
            message: String::new(),
            wave: 1,
            paused: false,
            git: None,
            waves: vec![WaveView {
                index: 1,
                started_at: Some(0),
                completed_at: None,
                clusters: vec![cluster("east", "Paused"), cluster("west", "Progressing")],
                lockstep: true,
                barrier: Some(BarrierStatus {
                    step: 1,
                    steps: 2,
                    passed: 0,
                    waiting: vec!["east".into()],
                    not_there: vec!["west".into()],
                }),
            }],
            errors: Vec::new(),
        };
        let text = super::render(&view);
        assert!(
            text.contains("wave 1  started 00:00:00  lockstep"),
            "{text}"
        );
        assert!(
            text.contains("barrier at step 1/2 (0 passed); waiting: east; not there yet: west"),
            "{text}"
        );
    }
}
