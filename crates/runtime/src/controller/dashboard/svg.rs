//! Plots as SVG, drawn on the server: a series over time with its condition's thresholds as
//! dashed lines and each point marked by what its measurement said (failed, inconclusive and
//! error points stand out). Presentation attributes only: no inline style (the page's CSP).

use std::fmt::Write;

use flotilla_core::analysis::condition::{Comparison, Threshold};

use super::html::esc;
use crate::controller::plots::{Mark, Point};

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 220.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 24.0;
const BOTTOM: f64 = 28.0;

fn mark_name(mark: Mark) -> &'static str {
    match mark {
        Mark::Successful => "successful",
        Mark::Failed => "failed",
        Mark::Inconclusive => "inconclusive",
        Mark::Error => "error",
    }
}

fn colour(mark: Mark) -> &'static str {
    match mark {
        Mark::Successful => "#1a7f37",
        Mark::Failed => "#cf222e",
        Mark::Inconclusive => "#bf8700",
        Mark::Error => "#6e7781",
    }
}

/// A short number for axis labels.
fn short(v: f64) -> String {
    let text = format!("{v:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text.is_empty() || text == "-" {
        "0".into()
    } else {
        text.to_owned()
    }
}

/// One plot. `id` names the figure (`data-series`); `fixed` pins the value axis (the weight's
/// 0–100).
pub fn plot(
    title: &str,
    id: &str,
    points: &[Point],
    thresholds: &[(bool, Threshold)],
    fixed: Option<(f64, f64)>,
) -> String {
    let mut out = format!(
        "<figure class=\"plot\" data-series=\"{}\"><figcaption>{}</figcaption>",
        esc(id),
        esc(title)
    );
    if points.is_empty() {
        out.push_str("<p>No points yet.</p></figure>");
        return out;
    }
    let values = points.iter().filter_map(|p| p.value().map(f64::from));
    let (mut low, mut high) = match fixed {
        Some(range) => range,
        None => {
            let mut low = f64::INFINITY;
            let mut high = f64::NEG_INFINITY;
            for v in values.chain(thresholds.iter().map(|(_, t)| t.value)) {
                low = low.min(v);
                high = high.max(v);
            }
            if !low.is_finite() {
                (0.0, 1.0)
            } else {
                (low.min(0.0), high)
            }
        }
    };
    if (high - low).abs() < f64::EPSILON {
        high = low + 1.0;
    }
    if fixed.is_none() {
        high += (high - low) * 0.1;
    }
    low = low.min(high);
    let t0 = points.first().map(|p| p.at()).unwrap_or(0);
    let t1 = points.last().map(|p| p.at()).unwrap_or(0).max(t0 + 1);
    let x = |t: i64| LEFT + (t - t0) as f64 / (t1 - t0) as f64 * (WIDTH - LEFT - RIGHT);
    let y = |v: f64| TOP + (high - v) / (high - low) * (HEIGHT - TOP - BOTTOM);
    let _ = write!(
        out,
        "<svg class=\"chart\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" role=\"img\" aria-label=\"{}\" data-low=\"{low}\" data-high=\"{high}\">",
        esc(title)
    );
    // Axes and labels.
    let _ = write!(
        out,
        "<line x1=\"{LEFT}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"#8c959f\"/><line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{b}\" stroke=\"#8c959f\"/>",
        b = HEIGHT - BOTTOM,
        r = WIDTH - RIGHT
    );
    for v in [low, (low + high) / 2.0, high] {
        let _ = write!(
            out,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"11\" fill=\"#57606a\">{}</text>",
            LEFT - 4.0,
            y(v) + 4.0,
            short(v)
        );
    }
    for (t, anchor) in [(t0, "start"), (t1, "end")] {
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"{anchor}\" font-size=\"11\" fill=\"#57606a\">{} UTC</text>",
            x(t),
            HEIGHT - 8.0,
            flotilla_core::time::time_of_day(t)
        );
    }
    // Thresholds.
    for (failure, t) in thresholds {
        let ty = y(t.value);
        let label = format!(
            "{} when result {} {}",
            if *failure { "fails" } else { "succeeds" },
            t.op.as_str(),
            short(t.value)
        );
        let _ = write!(
            out,
            "<line class=\"threshold\" data-value=\"{}\" data-op=\"{}\" data-failure=\"{failure}\" x1=\"{LEFT}\" y1=\"{ty:.2}\" x2=\"{}\" y2=\"{ty:.2}\" stroke=\"{}\" stroke-dasharray=\"6 4\"><title>{}</title></line><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"11\" fill=\"{}\">{}</text>",
            t.value,
            esc(t.op.as_str()),
            WIDTH - RIGHT,
            if *failure { "#cf222e" } else { "#1a7f37" },
            esc(&label),
            WIDTH - RIGHT,
            ty - 4.0,
            if *failure { "#cf222e" } else { "#1a7f37" },
            esc(&label)
        );
    }
    // The line through the values, then the points.
    let mut path = String::new();
    for p in points {
        if let Some(v) = p.value() {
            let _ = write!(path, "{:.1},{:.1} ", x(p.at()), y(f64::from(v)));
        }
    }
    if fixed.is_some() {
        // The weight holds until it changes: a step line.
        path.clear();
        let mut last: Option<f64> = None;
        for p in points {
            if let Some(v) = p.value().map(f64::from) {
                if let Some(l) = last {
                    let _ = write!(path, "{:.1},{:.1} ", x(p.at()), y(l));
                }
                let _ = write!(path, "{:.1},{:.1} ", x(p.at()), y(v));
                last = Some(v);
            }
        }
        if let (Some(l), Some(end)) = (last, points.last()) {
            let _ = write!(path, "{:.1},{:.1} ", x(end.at()), y(l));
        }
    }
    let _ = write!(
        out,
        "<polyline points=\"{}\" fill=\"none\" stroke=\"#0969da\" stroke-width=\"1.5\"/>",
        path.trim_end()
    );
    if fixed.is_none() {
        for p in points {
            let (cy, value) = match p.value() {
                Some(v) => (y(f64::from(v)), v.to_string()),
                // An error has no value: drawn on the axis.
                None => (HEIGHT - BOTTOM, "none".into()),
            };
            let name = mark_name(p.mark());
            let _ = write!(
                out,
                "<circle class=\"point {name}\" data-mark=\"{name}\" data-value=\"{}\" cx=\"{:.2}\" cy=\"{cy:.2}\" r=\"{}\" fill=\"{}\"><title>{} UTC: {value} ({name})</title></circle>",
                p.value().map(|v| v.to_string()).unwrap_or_default(),
                x(p.at()),
                if p.mark() == Mark::Successful {
                    2.5
                } else {
                    4.0
                },
                colour(p.mark()),
                flotilla_core::time::time_of_day(p.at()),
            );
        }
    }
    out.push_str("</svg></figure>");
    out
}

/// Whether a value is beyond a failure threshold (as drawn: above a `>`, below a `<`).
pub fn beyond(value: f64, threshold: &Threshold) -> bool {
    match threshold.op {
        Comparison::Greater => value > threshold.value,
        Comparison::GreaterOrEqual => value >= threshold.value,
        Comparison::Less => value < threshold.value,
        Comparison::LessOrEqual => value <= threshold.value,
        Comparison::Equal => value == threshold.value,
        Comparison::NotEqual => value != threshold.value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn y_of(svg: &str, marker: &str, attr: &str) -> Vec<f64> {
        svg.match_indices(marker)
            .map(|(i, _)| {
                let rest = &svg[i..];
                let at = rest.find(&format!("{attr}=\"")).unwrap() + attr.len() + 2;
                rest[at..at + rest[at..].find('"').unwrap()]
                    .parse()
                    .unwrap()
            })
            .collect()
    }

    #[test]
    fn points_beyond_a_failure_threshold_are_drawn_above_its_line() {
        let points: Vec<Point> = (0..10)
            .map(|i| {
                let v = if i >= 7 { 0.4 } else { 0.1 };
                let mark = if v > 0.25 {
                    Mark::Failed
                } else {
                    Mark::Successful
                };
                Point::new(i * 1000, Some(v), mark)
            })
            .collect();
        let t = Threshold {
            op: Comparison::Greater,
            value: 0.25,
        };
        let svg = plot("latency", "m", &points, &[(true, t)], None);
        let line = y_of(&svg, "class=\"threshold\"", "y1")[0];
        let failed = y_of(&svg, "class=\"point failed\"", "cy");
        let ok = y_of(&svg, "class=\"point successful\"", "cy");
        assert_eq!(failed.len(), 3);
        assert!(failed.iter().all(|cy| *cy < line), "{failed:?} vs {line}");
        assert!(ok.iter().all(|cy| *cy > line));
        assert!(svg.contains("fails when result &gt; 0.25"));
        assert!(!svg.contains("style="));
        assert!(beyond(0.4, &t) && !beyond(0.1, &t));
    }

    #[test]
    fn an_empty_series_says_so() {
        assert!(plot("w", "w", &[], &[], Some((0.0, 100.0))).contains("No points yet"));
    }
}
