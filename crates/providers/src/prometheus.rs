//! Argo's `prometheus` provider: an instant query at the request's instant, or a range query over
//! `rangeQuery` or the request's window, with results mapped as Argo maps them (scalar → number,
//! vector → list, matrix → flattened list, anything else an error).

use std::collections::BTreeMap;
use std::time::Duration;

use flotilla_core::analysis::{MeasureRequest, MetricResult, Millis, Outcome};
use flotilla_core::spec::Duration as SpecDuration;
use flotilla_core::spec::analysis::{PrometheusMetric, PrometheusRangeQuery};
use flotilla_core::spec::common::parse_duration;
use serde::Deserialize;
use url::Url;

use crate::http;

/// Upstream's default query timeout.
const DEFAULT_TIMEOUT_SECS: u64 = 30;
/// Largest response read; a bigger one is an error rather than a memory spike.
const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;
/// Samples a range query asks for when no step is given (window / 60, at least a second).
const DEFAULT_POINTS: u64 = 60;
const MIN_STEP_MS: u64 = 1000;

/// Runs one Prometheus measurement.
pub(crate) async fn measure(
    transport: http::Transport<'_>,
    metric: &PrometheusMetric,
    request: &MeasureRequest,
) -> Outcome {
    match run(transport, metric, request).await {
        Ok(outcome) => outcome,
        Err(message) => Outcome::Error(message),
    }
}

/// What to ask Prometheus.
#[derive(Debug, Clone, PartialEq)]
enum Plan {
    /// `/api/v1/query` at one instant.
    Instant { time: Millis },
    /// `/api/v1/query_range` over `[start, end]`.
    Range {
        start: Millis,
        end: Millis,
        step_ms: u64,
    },
}

async fn run(
    transport: http::Transport<'_>,
    metric: &PrometheusMetric,
    request: &MeasureRequest,
) -> Result<Outcome, String> {
    let address = metric
        .address
        .as_deref()
        .filter(|a| !a.trim().is_empty())
        .ok_or("prometheus address is not configured")?;
    let base = http::parse_http_url(address, "prometheus address")?;
    let query = metric
        .query
        .as_deref()
        .filter(|q| !q.trim().is_empty())
        .ok_or("the prometheus provider has no query")?;
    let timeout = match metric.timeout {
        Some(t) if t < 0 => return Err("prometheus timeout should not be negative".into()),
        Some(t) if t > 0 => Duration::from_secs(t as u64),
        _ => Duration::from_secs(DEFAULT_TIMEOUT_SECS),
    };
    let headers = http::header_map(&metric.headers)?;
    let basic_auth = http::basic_auth(metric.authentication.as_ref(), "prometheus")?;
    let own_step = metric
        .range_query
        .as_ref()
        .is_some_and(|r| r.step.is_some());
    let plan = plan(metric.range_query.as_ref(), request.at, request.window)?
        .with_step(request.step.filter(|_| !own_step));

    let url = endpoint(&base, query, &plan);
    let shown = http::shown_endpoint(&url);
    let mut builder = transport.client.get(url).headers(headers).timeout(timeout);
    if let Some((username, password)) = basic_auth {
        builder = builder.basic_auth(username, Some(password));
    }
    let mut response = transport.send(builder, "GET", &shown, timeout).await?;
    let status = response.status();
    let body = http::read_body(&mut response, MAX_RESPONSE_BYTES)
        .await
        .map_err(|e| e.describe("GET", &shown, timeout))?;

    let envelope = match serde_json::from_slice::<Envelope>(&body) {
        Ok(envelope) => envelope,
        Err(_) if !status.is_success() => {
            return Err(format!(
                "GET {shown}: HTTP {status}: {}",
                http::quote_body(&body)
            ));
        }
        Err(e) => {
            return Err(format!(
                "GET {shown}: the response is not a Prometheus API answer: {e}"
            ));
        }
    };
    if envelope.status == "error" || !status.is_success() {
        // Prometheus' own words, as its Go client reports them: "bad_data: parse error: ...".
        return Err(match (envelope.error_type, envelope.error) {
            (Some(kind), Some(message)) => format!("{kind}: {message}"),
            (kind, message) => format!(
                "GET {shown}: HTTP {status}: {}",
                message.or(kind).unwrap_or_else(|| http::quote_body(&body))
            ),
        });
    }
    let data = envelope
        .data
        .ok_or_else(|| format!("GET {shown}: the response has no data"))?;
    let result = to_result(data)?;

    let mut metadata = BTreeMap::new();
    metadata.insert("query".to_owned(), query.to_owned());
    if !envelope.warnings.is_empty() {
        let quoted: Vec<String> = envelope
            .warnings
            .iter()
            .map(|w| format!("\"{w}\""))
            .collect();
        metadata.insert("warnings".to_owned(), quoted.join(", "));
    }
    Ok(Outcome::Value { result, metadata })
}

/// The query URL: the address's path (a proxy prefix is kept) plus the API path and parameters.
fn endpoint(base: &Url, query: &str, plan: &Plan) -> Url {
    let mut url = base.clone();
    let prefix = base.path().trim_end_matches('/').to_owned();
    url.set_fragment(None);
    url.set_query(None);
    match plan {
        Plan::Instant { time } => {
            url.set_path(&format!("{prefix}/api/v1/query"));
            url.query_pairs_mut()
                .append_pair("query", query)
                .append_pair("time", &seconds(*time));
        }
        Plan::Range {
            start,
            end,
            step_ms,
        } => {
            url.set_path(&format!("{prefix}/api/v1/query_range"));
            url.query_pairs_mut()
                .append_pair("query", query)
                .append_pair("start", &seconds(*start))
                .append_pair("end", &seconds(*end))
                .append_pair("step", &format!("{}", *step_ms as f64 / 1000.0));
        }
    }
    url
}

/// Milliseconds since the epoch as Prometheus' fractional seconds (`1796204726.193`).
fn seconds(ms: Millis) -> String {
    format!("{}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000))
}

impl Plan {
    /// A range query at the resolution a comparison asks for (a template's own
    /// `rangeQuery.step` wins).
    fn with_step(self, step: Option<u64>) -> Plan {
        match (self, step) {
            (Plan::Range { start, end, .. }, Some(step_ms)) => Plan::Range {
                start,
                end,
                step_ms: step_ms.max(MIN_STEP_MS),
            },
            (plan, _) => plan,
        }
    }
}

/// Chooses the query: `rangeQuery` wins, then the request's window, else an instant query.
fn plan(
    range: Option<&PrometheusRangeQuery>,
    at: Millis,
    window: Option<u64>,
) -> Result<Plan, String> {
    let window_start = window.map(|w| at.saturating_sub(w.min(i64::MAX as u64) as i64));
    let (start, end, step) = match (range, window_start) {
        (None, None) => return Ok(Plan::Instant { time: at }),
        (None, Some(start)) => (start, at, None),
        (Some(range), window_start) => {
            let start = match range.start.as_deref() {
                Some(text) => eval_time(text, at, "rangeQuery.start")?,
                None => window_start.ok_or("rangeQuery.start is required")?,
            };
            let end = match range.end.as_deref() {
                Some(text) => eval_time(text, at, "rangeQuery.end")?,
                None => at,
            };
            let step = match &range.step {
                None => None,
                Some(SpecDuration::Millis(0)) => {
                    return Err("rangeQuery.step must be longer than zero".into());
                }
                Some(SpecDuration::Millis(ms)) => Some(*ms),
                Some(SpecDuration::Templated(text)) => {
                    return Err(format!(
                        "rangeQuery.step {text:?} is not a duration (an argument was not substituted)"
                    ));
                }
            };
            (start, end, step)
        }
    };
    if end < start {
        return Err(format!(
            "the range query ends ({}) before it starts ({})",
            seconds(end),
            seconds(start)
        ));
    }
    let step_ms = step.unwrap_or_else(|| ((end - start) as u64 / DEFAULT_POINTS).max(MIN_STEP_MS));
    Ok(Plan::Range {
        start,
        end,
        step_ms,
    })
}

/// Evaluates a range bound: `now()`, `now() - duration("5m")` (or `+`), or an RFC 3339
/// timestamp. `now()` is the request's instant, so backtests see the past as it was.
fn eval_time(text: &str, now: Millis, field: &str) -> Result<Millis, String> {
    let invalid = || {
        format!(
            "failed to parse {field} as time: {text:?} is not one of now(), \
             now() - duration(\"5m\"), now() + duration(\"5m\") or an RFC 3339 timestamp"
        )
    };
    let trimmed = text.trim();
    if let Some(ms) = parse_rfc3339(trimmed) {
        return Ok(ms);
    }
    let rest = trimmed
        .strip_prefix("now")
        .ok_or_else(invalid)?
        .trim_start();
    let rest = rest.strip_prefix('(').ok_or_else(invalid)?.trim_start();
    let rest = rest.strip_prefix(')').ok_or_else(invalid)?.trim_start();
    if rest.is_empty() {
        return Ok(now);
    }
    let (negative, rest) = match rest.as_bytes()[0] {
        b'-' => (true, &rest[1..]),
        b'+' => (false, &rest[1..]),
        _ => return Err(invalid()),
    };
    let rest = rest
        .trim_start()
        .strip_prefix("duration")
        .ok_or_else(invalid)?;
    let inner = rest
        .trim_start()
        .strip_prefix('(')
        .and_then(|r| r.trim_end().strip_suffix(')'))
        .ok_or_else(invalid)?
        .trim();
    let quoted = inner.len() >= 2
        && matches!(inner.as_bytes()[0], b'"' | b'\'' | b'`')
        && inner.as_bytes()[0] == inner.as_bytes()[inner.len() - 1];
    if !quoted {
        return Err(invalid());
    }
    let ms = parse_duration(&inner[1..inner.len() - 1])
        .map_err(|e| format!("failed to parse {field} as time: {e}"))?;
    let ms = i64::try_from(ms).map_err(|_| invalid())?;
    Ok(if negative {
        now.saturating_sub(ms)
    } else {
        now.saturating_add(ms)
    })
}

/// Parses `2024-02-29T11:00:00.5Z` or `…+01:00` into milliseconds since the epoch.
fn parse_rfc3339(text: &str) -> Option<Millis> {
    let b = text.as_bytes();
    if b.len() < 20 || !text.is_ascii() {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<i64> {
        let part = &text[from..to];
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let separators_ok = b[4] == b'-'
        && b[7] == b'-'
        && matches!(b[10], b'T' | b't' | b' ')
        && b[13] == b':'
        && b[16] == b':';
    if !separators_ok {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hour, minute, second) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    let mut i = 19;
    let mut millis = 0;
    if b[i] == b'.' {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
        let digits = &text[start..i.min(start + 3)];
        millis = digits.parse::<i64>().ok()? * 10_i64.pow(3 - digits.len() as u32);
    }
    let offset_secs = match &text[i..] {
        "Z" | "z" => 0,
        zone if zone.len() == 6 && matches!(zone.as_bytes()[0], b'+' | b'-') => {
            if zone.as_bytes()[3] != b':' {
                return None;
            }
            let (h, m) = (num(i + 1, i + 3)?, num(i + 4, i + 6)?);
            if h > 23 || m > 59 {
                return None;
            }
            let secs = h * 3600 + m * 60;
            if zone.starts_with('-') { -secs } else { secs }
        }
        _ => return None,
    };
    let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap(year) => 29,
        2 => 28,
        _ => return None,
    };
    if day < 1 || day > days_in_month || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    // Days from 1970-01-01 to the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    // A leap second (:60) counts as the next second's start, as Go's parser does.
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_secs;
    Some(secs * 1000 + millis)
}

/// Prometheus' answer envelope.
#[derive(Debug, Deserialize)]
struct Envelope {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    warnings: Vec<String>,
}

/// A timestamp (fractional seconds) and a value, which Prometheus sends as a string.
type Sample = (f64, String);

/// The query's result, by its `resultType`.
#[derive(Debug, Deserialize)]
#[serde(tag = "resultType", content = "result", rename_all = "lowercase")]
enum Data {
    Scalar(Sample),
    String(serde::de::IgnoredAny),
    Vector(Vec<InstantSample>),
    Matrix(Vec<Series>),
}

/// One element of a vector: a float sample, or a native histogram (which Argo cannot judge).
#[derive(Debug, Deserialize)]
struct InstantSample {
    #[serde(default)]
    value: Option<Sample>,
}

/// One series of a matrix.
#[derive(Debug, Deserialize)]
struct Series {
    #[serde(default)]
    values: Vec<Sample>,
    #[serde(default)]
    histograms: Vec<serde_json::Value>,
}

const NATIVE_HISTOGRAMS: &str = "Prometheus metric type not supported: the query returned native \
                                 histogram samples; use histogram_quantile() or similar";

fn to_result(data: Data) -> Result<MetricResult, String> {
    match data {
        Data::Scalar((_, value)) => Ok(MetricResult::Scalar(parse_sample(&value)?)),
        Data::String(_) => {
            Err("Prometheus metric type not supported: the query returned a string".into())
        }
        Data::Vector(samples) => samples
            .into_iter()
            .map(|s| match s.value {
                Some((_, value)) => parse_sample(&value),
                None => Err(NATIVE_HISTOGRAMS.to_owned()),
            })
            .collect::<Result<Vec<f64>, String>>()
            .map(MetricResult::Vector),
        Data::Matrix(series) => {
            let mut values = Vec::new();
            for s in series {
                if !s.histograms.is_empty() {
                    return Err(NATIVE_HISTOGRAMS.to_owned());
                }
                for (_, value) in s.values {
                    values.push(parse_sample(&value)?);
                }
            }
            Ok(MetricResult::Vector(values))
        }
    }
}

/// Parses a sample value as Prometheus writes it (`"0.5"`, `"NaN"`, `"+Inf"`, `"-Inf"`).
fn parse_sample(text: &str) -> Result<f64, String> {
    match text {
        "NaN" => Ok(f64::NAN),
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        other => other.parse::<f64>().map_err(|_| {
            format!("Prometheus returned a sample value that is not a number: {other:?}")
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(json: &str) -> Data {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn results_map_as_argo_maps_them() {
        let scalar = data(r#"{"resultType":"scalar","result":[1.5,"NaN"]}"#);
        assert!(matches!(to_result(scalar), Ok(MetricResult::Scalar(v)) if v.is_nan()));
        let vector = data(
            r#"{"resultType":"vector","result":[
                {"metric":{"a":"1"},"value":[1.0,"0.25"]},
                {"metric":{"a":"2"},"value":[1.0,"+Inf"]},
                {"metric":{"a":"3"},"value":[1.0,"-Inf"]}]}"#,
        );
        assert_eq!(
            to_result(vector),
            Ok(MetricResult::Vector(vec![
                0.25,
                f64::INFINITY,
                f64::NEG_INFINITY
            ]))
        );
        let matrix = data(
            r#"{"resultType":"matrix","result":[
                {"metric":{},"values":[[1,"1"],[2,"2"]]},
                {"metric":{},"values":[[1,"3"]]}]}"#,
        );
        assert_eq!(
            to_result(matrix),
            Ok(MetricResult::Vector(vec![1.0, 2.0, 3.0]))
        );
        let empty = data(r#"{"resultType":"vector","result":[]}"#);
        assert_eq!(to_result(empty), Ok(MetricResult::Vector(vec![])));
        let string = data(r#"{"resultType":"string","result":[1,"hello"]}"#);
        assert!(to_result(string).unwrap_err().contains("not supported"));
        let histogram = data(
            r#"{"resultType":"vector","result":[{"metric":{},"histogram":[1,{"count":"2"}]}]}"#,
        );
        assert!(
            to_result(histogram)
                .unwrap_err()
                .contains("native histogram")
        );
        assert!(parse_sample("abc").is_err());
    }

    #[test]
    fn range_bounds_accept_now_durations_and_rfc3339() {
        let now = 1_700_000_000_000;
        assert_eq!(eval_time("now()", now, "f"), Ok(now));
        assert_eq!(
            eval_time(" now() - duration(\"5m\") ", now, "f"),
            Ok(now - 300_000)
        );
        assert_eq!(
            eval_time("now()+duration('1h30m')", now, "f"),
            Ok(now + 5_400_000)
        );
        assert_eq!(eval_time("1970-01-01T00:00:00Z", now, "f"), Ok(0));
        // Checked with `date -u -d '2024-02-29T11:00:00Z' +%s`.
        assert_eq!(
            eval_time("2024-02-29T12:00:00.5+01:00", now, "f"),
            Ok(1_709_204_400_500)
        );
        assert_eq!(parse_rfc3339("1969-12-31T23:59:59.123456789Z"), Some(-877));
        for bad in [
            "now",
            "now() * 2",
            "now() - duration(5m)",
            "now() - duration(\"5x\")",
            "2024-02-30T00:00:00Z",
            "2024-01-01T00:00:00",
            "yesterday",
        ] {
            let err = eval_time(bad, now, "rangeQuery.start").unwrap_err();
            assert!(err.contains("rangeQuery.start"), "{bad}: {err}");
        }
    }

    #[test]
    fn plans_follow_range_query_then_window_then_instant() {
        let at = 1_000_000;
        assert_eq!(plan(None, at, None), Ok(Plan::Instant { time: at }));
        assert_eq!(
            plan(None, at, Some(300_000)),
            Ok(Plan::Range {
                start: 700_000,
                end: at,
                step_ms: 5000
            })
        );
        assert_eq!(
            plan(None, at, Some(10_000)),
            Ok(Plan::Range {
                start: 990_000,
                end: at,
                step_ms: 1000
            })
        );
        let range = PrometheusRangeQuery {
            start: Some("now() - duration(\"1m\")".into()),
            end: Some("now()".into()),
            step: Some(SpecDuration::Millis(15_000)),
        };
        assert_eq!(
            plan(Some(&range), at, Some(300_000)),
            Ok(Plan::Range {
                start: 940_000,
                end: at,
                step_ms: 15_000
            })
        );
        let backwards = PrometheusRangeQuery {
            start: Some("now()".into()),
            end: Some("now() - duration(\"1m\")".into()),
            step: None,
        };
        assert!(plan(Some(&backwards), at, None).is_err());
        let no_start = PrometheusRangeQuery::default();
        assert!(plan(Some(&no_start), at, None).is_err());
        let templated = PrometheusRangeQuery {
            start: Some("now()".into()),
            end: None,
            step: Some(SpecDuration::Templated("{{args.step}}".into())),
        };
        assert!(plan(Some(&templated), at, None).is_err());
    }

    #[test]
    fn endpoints_keep_a_path_prefix_and_encode_the_query() {
        let base = Url::parse("http://127.0.0.1:9090/prom/").unwrap();
        let url = endpoint(
            &base,
            "sum(rate(x[1m])) > 0",
            &Plan::Instant { time: 1_500 },
        );
        assert_eq!(url.path(), "/prom/api/v1/query");
        let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        assert_eq!(
            pairs,
            vec![
                ("query".into(), "sum(rate(x[1m])) > 0".into()),
                ("time".into(), "1.500".into())
            ]
        );
        let url = endpoint(
            &base,
            "up",
            &Plan::Range {
                start: 0,
                end: 60_000,
                step_ms: 1500,
            },
        );
        assert_eq!(url.path(), "/prom/api/v1/query_range");
        assert_eq!(
            url.query(),
            Some("query=up&start=0.000&end=60.000&step=1.5")
        );
    }
}
