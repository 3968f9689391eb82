//! Statistics queries resolved into the windows they read: a pure function of the query and
//! `now`, with every piece of arithmetic on request input checked and every result bounded
//! (a window at most [`MAX_WINDOW_SECS`] long ending at most [`MAX_FUTURE_SECS`] after `now`;
//! a series at most [`MAX_SERIES_POINTS`] windows). The control API's `stats` and `series`
//! endpoints answer exactly what [`plan_window`] and [`plan_series`] plan.

use flotilla_agent_backend::wire::{BUCKET_SECONDS, WindowQuery};

/// Most windows one series answers.
pub const MAX_SERIES_POINTS: u64 = 2_000;
/// The longest window a query may ask for: a day (the agent keeps 2 h 5 min of buckets; older
/// ones read as empty).
pub const MAX_WINDOW_SECS: u64 = 86_400;
/// How far after now a window given by `start` and `end` may end: a day.
pub const MAX_FUTURE_SECS: u64 = 86_400;

/// A query that cannot be answered; the message names the parameter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct QueryError(pub String);

fn refuse<T>(message: impl Into<String>) -> Result<T, QueryError> {
    Err(QueryError(message.into()))
}

/// A duration parameter in whole seconds.
fn duration_secs(text: &str, what: &str) -> Result<u64, QueryError> {
    flotilla_core::spec::common::parse_duration(text)
        .map(|ms| ms / 1000)
        .map_err(|e| QueryError(format!("{what}: {e}")))
}

/// The one window `GET …/stats` reads, `[start, end)` in Unix seconds; `now` is the end of
/// the current second. Refuses a `step` (a series parameter).
pub fn plan_window(query: &WindowQuery, now: u64) -> Result<(u64, u64), QueryError> {
    let window = resolve(query, now)?;
    if query.step.is_some() {
        return refuse("step is a parameter of /v1/subsets/{subset}/series");
    }
    Ok(window)
}

/// The consecutive windows `GET …/series` reads: `[start, end)` cut into `step`s (the last
/// one shorter when `step` does not divide it), at most [`MAX_SERIES_POINTS`] of them.
pub fn plan_series(query: &WindowQuery, now: u64) -> Result<Vec<(u64, u64)>, QueryError> {
    let (start, end) = resolve(query, now)?;
    let step = match &query.step {
        Some(step) => duration_secs(step, "step")?,
        None => return refuse("a series needs a step"),
    };
    if step < BUCKET_SECONDS {
        return refuse(format!(
            "step must be at least {BUCKET_SECONDS}s (the bucket)"
        ));
    }
    // resolve guarantees start < end.
    let points = (end - start).div_ceil(step);
    if points > MAX_SERIES_POINTS {
        return refuse(format!(
            "a series has at most {MAX_SERIES_POINTS} points; use a longer step"
        ));
    }
    let mut windows = Vec::with_capacity(points as usize);
    let mut from = start;
    while from < end {
        let to = from.saturating_add(step).min(end);
        windows.push((from, to));
        from = to;
    }
    Ok(windows)
}

/// The quantile, if any, and `[start, end)` with `start < end`, ending at most a day after
/// `now`, at most a day long.
fn resolve(query: &WindowQuery, now: u64) -> Result<(u64, u64), QueryError> {
    if let Some(q) = query.quantile
        && !(0.0..=1.0).contains(&q)
    {
        return refuse(format!("quantile must be between 0 and 1, not {q}"));
    }
    let (start, end) = match (query.start, query.end, &query.window) {
        (Some(start), Some(end), None) if query.offset.is_none() => {
            if start >= end {
                return refuse(format!("start ({start}) must be before end ({end})"));
            }
            let latest = now.saturating_add(MAX_FUTURE_SECS);
            if end > latest {
                return refuse(format!(
                    "end ({end}) is more than {MAX_FUTURE_SECS}s after now ({now})"
                ));
            }
            (start, end)
        }
        (None, None, Some(window)) => {
            let length = duration_secs(window, "window")?;
            if length == 0 {
                return refuse("window must be at least 1s");
            }
            if length > MAX_WINDOW_SECS {
                return refuse(format!(
                    "window ({length}s) is longer than {MAX_WINDOW_SECS}s"
                ));
            }
            let offset = match &query.offset {
                Some(o) => duration_secs(o, "offset")?,
                None => 0,
            };
            let end = match now.checked_sub(offset) {
                Some(end) if end > 0 => end,
                _ => {
                    return refuse(format!(
                        "offset ({offset}s) reaches back before the Unix epoch"
                    ));
                }
            };
            (end.saturating_sub(length), end)
        }
        _ => return refuse("give either window (and optionally offset), or start and end"),
    };
    if end - start > MAX_WINDOW_SECS {
        return refuse(format!(
            "the window from {start} to {end} is longer than {MAX_WINDOW_SECS}s"
        ));
    }
    Ok((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_001;

    fn span(start: u64, end: u64, step: Option<&str>) -> WindowQuery {
        WindowQuery {
            start: Some(start),
            end: Some(end),
            step: step.map(str::to_owned),
            ..WindowQuery::default()
        }
    }

    #[test]
    fn the_hostile_series_of_issue_15_is_refused() {
        // It passed the point count (5 s over a 10 s step is one point), then `from + step`
        // wrapped and the loop never ended.
        let q = span(18446744073709551610, u64::MAX, Some("10s"));
        let error = plan_series(&q, NOW).unwrap_err();
        assert!(error.0.contains("after now"), "{error}");
    }

    #[test]
    fn series_cut_the_range_into_steps() {
        let q = span(NOW - 95, NOW, Some("30s"));
        assert_eq!(
            plan_series(&q, NOW).unwrap(),
            [
                (NOW - 95, NOW - 65),
                (NOW - 65, NOW - 35),
                (NOW - 35, NOW - 5),
                (NOW - 5, NOW)
            ]
        );
        // A step longer than the range is one window.
        assert_eq!(
            plan_series(&span(NOW - 20, NOW, Some("1h")), NOW).unwrap(),
            [(NOW - 20, NOW)]
        );
    }

    #[test]
    fn bad_queries_name_what_is_wrong() {
        let cases: [(WindowQuery, &str); 10] = [
            (span(NOW, NOW, Some("10s")), "must be before end"),
            (span(NOW, NOW - 1, Some("10s")), "must be before end"),
            (span(NOW - 100, NOW, Some("0s")), "at least 10s"),
            (span(NOW - 100, NOW, None), "needs a step"),
            (span(NOW - 30_000, NOW, Some("10s")), "at most 2000 points"),
            (span(0, NOW, Some("1h")), "longer than 86400s"),
            (
                WindowQuery {
                    window: Some("2m".into()),
                    offset: Some("100000000h".into()),
                    step: Some("10s".into()),
                    ..WindowQuery::default()
                },
                "before the Unix epoch",
            ),
            (
                WindowQuery {
                    window: Some("1000000h".into()),
                    step: Some("10s".into()),
                    ..WindowQuery::default()
                },
                "window (3600000000s) is longer",
            ),
            (
                WindowQuery {
                    quantile: Some(f64::NAN),
                    ..span(NOW - 100, NOW, Some("10s"))
                },
                "quantile",
            ),
            (
                WindowQuery {
                    window: Some("2m".into()),
                    start: Some(1),
                    step: Some("10s".into()),
                    ..WindowQuery::default()
                },
                "give either window",
            ),
        ];
        for (query, needle) in cases {
            let error = plan_series(&query, NOW).unwrap_err();
            assert!(error.0.contains(needle), "{query:?}: {error}");
        }
        let error = plan_window(&span(NOW - 100, NOW, Some("10s")), NOW).unwrap_err();
        assert!(error.0.contains("parameter of"), "{error}");
    }

    #[test]
    fn a_window_ends_offset_ago() {
        let q = WindowQuery {
            window: Some("2m".into()),
            offset: Some("1h".into()),
            ..WindowQuery::default()
        };
        assert_eq!(
            plan_window(&q, NOW).unwrap(),
            (NOW - 3600 - 120, NOW - 3600)
        );
        // Near the epoch the window is cut at 0.
        assert_eq!(plan_window(&q, 3700).unwrap(), (0, 100));
    }
}

#[cfg(test)]
mod proptests {
    //! Extreme values through the control API's own query parser (axum's `Query`): no panic,
    //! and whatever is answered is bounded.

    use axum::extract::Query;
    use axum::http::Uri;
    use proptest::prelude::*;

    use super::*;

    fn number() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("0".to_owned()),
            Just("1".to_owned()),
            Just(u64::MAX.to_string()),
            Just((u64::MAX - 5).to_string()),
            Just((i64::MAX as u64).to_string()),
            Just((i64::MAX as u64 + 1).to_string()),
            Just("18446744073709551616".to_owned()),
            Just("-1".to_owned()),
            any::<u64>().prop_map(|n| n.to_string()),
            (1_799_990_000u64..1_800_100_000).prop_map(|n| n.to_string()),
        ]
    }

    fn duration() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("0s".to_owned()),
            Just("0".to_owned()),
            Just("10s".to_owned()),
            Just("9s".to_owned()),
            Just("-10s".to_owned()),
            Just(format!("{}s", u64::MAX)),
            Just(format!("{}", u64::MAX)),
            Just("99999999999999999999h".to_owned()),
            Just("1e308h".to_owned()),
            Just("NaNs".to_owned()),
            Just("".to_owned()),
            (0u64..100_000).prop_map(|s| format!("{s}s")),
            (0u64..u64::MAX / 1000).prop_map(|s| format!("{s}")),
            (0u64..1_000_000).prop_map(|h| format!("{h}h")),
        ]
    }

    fn quantile() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("NaN".to_owned()),
            Just("inf".to_owned()),
            Just("-inf".to_owned()),
            Just("1e309".to_owned()),
            Just("-0".to_owned()),
            Just("1".to_owned()),
            any::<f64>().prop_map(|q| q.to_string()),
            (0.0f64..=1.0).prop_map(|q| q.to_string()),
        ]
    }

    fn now() -> impl Strategy<Value = u64> {
        prop_oneof![
            Just(0u64),
            Just(1u64),
            Just(u64::MAX),
            Just(u64::MAX - MAX_FUTURE_SECS),
            1_700_000_000u64..1_900_000_000,
            any::<u64>(),
        ]
    }

    /// The query string of some subset of the parameters.
    fn query() -> impl Strategy<Value = String> {
        (
            prop::option::of(number()),
            prop::option::of(number()),
            prop::option::of(duration()),
            prop::option::of(duration()),
            prop::option::of(duration()),
            prop::option::of(quantile()),
        )
            .prop_map(|(start, end, window, offset, step, quantile)| {
                let pairs: Vec<String> = [
                    ("start", start),
                    ("end", end),
                    ("window", window),
                    ("offset", offset),
                    ("step", step),
                    ("quantile", quantile),
                ]
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| format!("{k}={v}")))
                .collect();
                pairs.join("&")
            })
    }

    fn check_window(start: u64, end: u64, now: u64) -> Result<(), TestCaseError> {
        prop_assert!(start < end, "{start}..{end}");
        prop_assert!(end - start <= MAX_WINDOW_SECS);
        prop_assert!(end <= now.saturating_add(MAX_FUTURE_SECS));
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        #[test]
        fn any_query_is_answered_bounded_or_refused(query in query(), now in now()) {
            let uri: Uri = format!("/v1/subsets/stable/series?{query}").parse().unwrap();
            let Ok(Query(q)) = Query::<WindowQuery>::try_from_uri(&uri) else {
                // A malformed value is the parser's 400.
                return Ok(());
            };
            if let Ok((start, end)) = plan_window(&q, now) {
                check_window(start, end, now)?;
            }
            if let Ok(windows) = plan_series(&q, now) {
                prop_assert!(!windows.is_empty());
                prop_assert!(windows.len() as u64 <= MAX_SERIES_POINTS);
                let (first, last) = (windows[0].0, windows[windows.len() - 1].1);
                check_window(first, last, now)?;
                for pair in windows.windows(2) {
                    prop_assert_eq!(pair[0].1, pair[1].0, "contiguous");
                }
                for (start, end) in windows {
                    prop_assert!(start < end);
                }
            }
        }

        #[test]
        fn start_and_end_anywhere_are_safe(
            start in any::<u64>(),
            end in any::<u64>(),
            step in 0u64..u64::MAX / 1000,
            now in now(),
        ) {
            let q = span(start, end, Some(&format!("{step}s")));
            if let Ok(windows) = plan_series(&q, now) {
                prop_assert!(windows.len() as u64 <= MAX_SERIES_POINTS);
                prop_assert_eq!(windows[0].0, start);
                prop_assert_eq!(windows[windows.len() - 1].1, end);
                check_window(start, end, now)?;
            }
        }
    }

    fn span(start: u64, end: u64, step: Option<&str>) -> WindowQuery {
        WindowQuery {
            start: Some(start),
            end: Some(end),
            step: step.map(str::to_owned),
            ..WindowQuery::default()
        }
    }
}
