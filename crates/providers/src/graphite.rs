//! Argo's `graphite` provider: one `GET <address>/render?<query>&format=json` within 10 s, where
//! the query is the template's `query` (e.g. `target=sumSeries(app.http.*.*.count)&from=-2min`)
//! with all whitespace removed and its pairs re-encoded as Go's `url.Values` encodes them (sorted
//! by key, `format=json` set). The first series' non-null points are the result (a list), an
//! answer with no points is an Error ("no values found"), a status of 400 or more is an Error
//! quoting the body. Argo's value string (`[10.000000,5.000000]`, `%f`, nulls skipped) is kept in
//! the metadata as `value`, beside the `query` that ran.
//!
//! Deliberate differences from Argo:
//! - A query pair Go's URL parser silently drops (one holding a `;`, or a malformed `%` escape)
//!   is an Error naming the pair, not a request without it.
//! - A measurement for a past instant (a backtest) pins Graphite's `now` to that instant, so
//!   relative `from`/`until` see the past as it was; a live measurement sends no `now` (Graphite
//!   uses its own clock, as with Argo), and a query that sets `now` itself keeps it.
//! - A malformed timestamp is reported with the timestamp (Argo's message shows the value).
//! - A string value in Go's hexadecimal float syntax (`"0x1p-2"`) is refused.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flotilla_core::analysis::{MeasureRequest, MetricResult, Millis, Outcome, ServiceProxy};
use flotilla_core::spec::analysis::GraphiteMetric;
use serde::Deserialize;
use serde_json::Value;
use url::Url;

use crate::{Providers, http};

/// Upstream's client timeout (the whole request, body included).
const TIMEOUT: Duration = Duration::from_secs(10);
/// Largest response read; a bigger one is an error rather than a memory spike.
const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;
/// A measurement this long before the wall clock is for a past instant: Graphite's `now` is
/// pinned to it.
const PAST_SLACK_MS: Millis = 5_000;

/// Runs one Graphite measurement.
pub(crate) async fn measure(
    providers: &Providers,
    proxy: Option<&dyn ServiceProxy>,
    metric: &GraphiteMetric,
    request: &MeasureRequest,
) -> Outcome {
    let pinned = pinned_now(request.at, wall_clock());
    match run(providers.transport(None, proxy), metric, pinned).await {
        Ok((result, metadata)) => Outcome::Value { result, metadata },
        Err(message) => Outcome::Error(format!("graphite: {message}")),
    }
}

/// Now, in milliseconds since the epoch.
fn wall_clock() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as Millis)
}

/// Graphite's `now` (epoch seconds) for a measurement at `at`: None for a live one.
fn pinned_now(at: Millis, wall: Millis) -> Option<i64> {
    (wall - at > PAST_SLACK_MS).then(|| at.div_euclid(1000))
}

async fn run(
    transport: http::Transport<'_>,
    metric: &GraphiteMetric,
    pinned: Option<i64>,
) -> Result<(MetricResult, BTreeMap<String, String>), String> {
    let address = metric
        .address
        .as_deref()
        .filter(|a| !a.trim().is_empty())
        .ok_or("address is not configured")?;
    let base = http::parse_http_url(address, "address")?;
    let query = sanitize(metric.query.as_deref().unwrap_or_default());
    let mut url = render_endpoint(&base);
    let shown = http::shown_endpoint(&url);
    if query.is_empty() {
        return Err(format!("GET {shown}: the metric has no query"));
    }
    let pairs = parse_query(&query).map_err(|e| format!("GET {shown}: {e}"))?;
    url.set_query(Some(&encode_query(pairs, pinned)));

    let builder = transport.client.get(url).timeout(TIMEOUT);
    let mut response = transport.send(builder, "GET", &shown, TIMEOUT).await?;
    let status = response.status();
    let body = http::read_body(&mut response, MAX_RESPONSE_BYTES)
        .await
        .map_err(|e| e.describe("GET", &shown, TIMEOUT))?;
    if status.as_u16() >= 400 {
        return Err(format!(
            "GET {shown}: error response (HTTP {status}): {}",
            http::quote_body(&body)
        ));
    }
    let points = first_series(&body).map_err(|e| format!("GET {shown}: {e}"))?;
    if points.is_empty() {
        return Err(format!("GET {shown}: no values found"));
    }
    let values: Vec<f64> = points.into_iter().flatten().collect();
    let mut metadata = BTreeMap::new();
    metadata.insert("query".to_owned(), query);
    metadata.insert("value".to_owned(), argo_value(&values));
    if let Some(now) = pinned {
        metadata.insert("now".to_owned(), now.to_string());
    }
    Ok((MetricResult::Vector(values), metadata))
}

/// The query with all whitespace removed (Go's `\s`: space, tab, newline, form feed, return).
fn sanitize(query: &str) -> String {
    query.chars().filter(|c| !c.is_ascii_whitespace()).collect()
}

/// The render endpoint: the address's path (a proxy prefix is kept) plus `/render`; its own
/// query and fragment are dropped, as Go's `ResolveReference` drops them.
fn render_endpoint(base: &Url) -> Url {
    let mut url = base.clone();
    url.set_fragment(None);
    url.set_query(None);
    url.set_path(&format!("{}/render", base.path().trim_end_matches('/')));
    url
}

/// Reads the query as Go's `url.Parse("./render?" + query)` then `Query()` do: a `#` starts a
/// fragment that is never sent (but must be well escaped), pairs split on `&`, `+` is a space,
/// `%XX` escapes decode. What Go would reject or silently drop is an error here.
fn parse_query(query: &str) -> Result<Vec<(String, String)>, String> {
    if query.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err(format!(
            "the query {query:?} holds a control character (invalid in a URL)"
        ));
    }
    let (raw, fragment) = query.split_once('#').unwrap_or((query, ""));
    unescape(fragment, false)
        .map_err(|e| format!("the query {query:?} is not a valid URL query: {e}"))?;
    let mut pairs = Vec::new();
    for pair in raw.split('&') {
        if pair.contains(';') {
            return Err(format!(
                "the query pair {pair:?} holds a semicolon, which Argo's Go URL parser drops \
                 (write it as %3B)"
            ));
        }
        if pair.is_empty() {
            continue;
        }
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |text: &str| {
            unescape(text, true).map_err(|e| {
                format!("the query pair {pair:?}, which Argo's Go URL parser drops: {e}")
            })
        };
        pairs.push((decode(key)?, decode(value)?));
    }
    Ok(pairs)
}

/// Go's `url.unescape`: `%XX` must be two hex digits; in a query component `+` is a space.
fn unescape(text: &str, query_component: bool) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = |b: u8| (b as char).to_digit(16);
                match (
                    bytes.get(i + 1).copied().and_then(hex),
                    bytes.get(i + 2).copied().and_then(hex),
                ) {
                    (Some(high), Some(low)) => {
                        out.push((high * 16 + low) as u8);
                        i += 3;
                    }
                    _ => {
                        let end = (i + 3).min(bytes.len());
                        return Err(format!(
                            "invalid URL escape {:?}",
                            String::from_utf8_lossy(&bytes[i..end])
                        ));
                    }
                }
            }
            b'+' if query_component => {
                out.push(b' ');
                i += 1;
            }
            other => {
                out.push(other);
                i += 1;
            }
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Go's `url.Values.Encode` after `Set("format", "json")`: keys sorted (a key's values keep
/// their order), each part escaped by `QueryEscape`. A pinned `now` is added unless the query
/// sets one.
fn encode_query(mut pairs: Vec<(String, String)>, pinned: Option<i64>) -> String {
    pairs.retain(|(key, _)| key != "format");
    pairs.push(("format".to_owned(), "json".to_owned()));
    if let Some(now) = pinned
        && !pairs.iter().any(|(key, _)| key == "now")
    {
        pairs.push(("now".to_owned(), now.to_string()));
    }
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    let mut text = String::new();
    for (key, value) in &pairs {
        if !text.is_empty() {
            text.push('&');
        }
        query_escape(&mut text, key);
        text.push('=');
        query_escape(&mut text, value);
    }
    text
}

/// Go's `url.QueryEscape`: unreserved bytes stay, a space is `+`, anything else is `%XX`.
fn query_escape(out: &mut String, text: &str) {
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(byte as char);
            }
            b' ' => out.push('+'),
            _ => {
                let _ = write!(out, "%{byte:02X}");
            }
        }
    }
}

/// One series of the render API's JSON answer.
#[derive(Deserialize)]
struct Series {
    /// Decoded to check its type, as Go's decoder does.
    #[serde(default, rename = "target")]
    _target: Option<String>,
    #[serde(default)]
    datapoints: Option<Vec<Value>>,
}

/// The points of the first series (Argo reads only that one); every series must decode.
fn first_series(body: &[u8]) -> Result<Vec<Option<f64>>, String> {
    let answer: Option<Vec<Option<Series>>> = serde_json::from_slice(body)
        .map_err(|e| format!("the response is not Graphite's JSON: {e}"))?;
    let mut first = None;
    for (index, series) in answer.unwrap_or_default().into_iter().enumerate() {
        let points = series
            .and_then(|s| s.datapoints)
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(|(at, point)| {
                decode_point(point).map_err(|e| format!("series {index}, datapoint {at}: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        first.get_or_insert(points);
    }
    Ok(first.unwrap_or_default())
}

/// One `[value, timestamp]` pair as Argo's `dataPoint.UnmarshalJSON` reads it: the value is
/// null, a number or a numeric string; the timestamp null, a number or an integer string.
fn decode_point(point: &Value) -> Result<Option<f64>, String> {
    let pair = match point {
        Value::Array(items) if items.len() == 2 => items,
        Value::Null => return Err("error unmarshaling data point: []".to_owned()),
        other => return Err(format!("error unmarshaling data point: {}", go_v(other))),
    };
    let value = match &pair[0] {
        Value::Null => None,
        Value::Number(n) => Some(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(text) => Some(parse_float(text)?),
        other => return Err(format!("error unmarshaling value: {}", go_v(other))),
    };
    match &pair[1] {
        Value::Null | Value::Number(_) => {}
        Value::String(text) => {
            text.parse::<i64>().map_err(|e| {
                let why = match e.kind() {
                    std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                        "value out of range"
                    }
                    _ => "invalid syntax",
                };
                format!("strconv.ParseInt: parsing {text:?}: {why}")
            })?;
        }
        other => return Err(format!("error unmarshaling timestamp: {}", go_v(other))),
    }
    Ok(value)
}

/// Go's `strconv.ParseFloat(text, 64)` for decimal text: `NaN` (unsigned), `Inf`/`Infinity`
/// (signed, any case), and a range error where Rust would round to infinity.
fn parse_float(text: &str) -> Result<f64, String> {
    let invalid = || format!("strconv.ParseFloat: parsing {text:?}: invalid syntax");
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    let word = unsigned.to_ascii_lowercase();
    if word == "nan" {
        return if unsigned.len() == text.len() {
            Ok(f64::NAN)
        } else {
            Err(invalid())
        };
    }
    let value: f64 = text.parse().map_err(|_| invalid())?;
    if value.is_infinite() && word != "inf" && word != "infinity" {
        return Err(format!(
            "strconv.ParseFloat: parsing {text:?}: value out of range"
        ));
    }
    Ok(value)
}

/// Argo's measurement value: `[10.000000,5.000000]` (Go's `%f` of each non-null point).
fn argo_value(values: &[f64]) -> String {
    let mut text = String::from("[");
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        if v.is_nan() {
            text.push_str("NaN");
        } else if v.is_infinite() {
            text.push_str(if *v > 0.0 { "+Inf" } else { "-Inf" });
        } else {
            let _ = write!(text, "{v:.6}");
        }
    }
    text.push(']');
    text
}

/// A decoded JSON value as Go's `%v` prints it (for Argo's error messages).
fn go_v(value: &Value) -> String {
    match value {
        Value::Null => "<nil>".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_float(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(go_v).collect();
            format!("[{}]", items.join(" "))
        }
        Value::Object(map) => {
            let entries: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{k}:{}", go_v(v)))
                .collect();
            format!("map[{}]", entries.join(" "))
        }
    }
}

/// Go's `%v` of a float64: the shortest digits, in exponent form when the exponent is below -4
/// or at least 6 (`1e+06`, `1.62134842e+09`, `123456`, `0.0001`, `1e-05`).
fn go_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".to_owned();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    let scientific = format!("{v:e}");
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("Rust's {:e} always has an exponent");
    let exponent: i32 = exponent.parse().expect("an integer exponent");
    if !(-4..6).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url_for(base: &str, query: &str, pinned: Option<i64>) -> Result<String, String> {
        let base = Url::parse(base).unwrap();
        let pairs = parse_query(&sanitize(query))?;
        let mut url = render_endpoint(&base);
        url.set_query(Some(&encode_query(pairs, pinned)));
        Ok(url.to_string())
    }

    #[test]
    fn the_request_is_render_with_the_query_sanitized_and_encoded_as_go_encodes_it() {
        let query = "target=sumSeries(app.http.*.*.count)&from=-2min";
        let expected = "http://127.0.0.1:8080/render?format=json&from=-2min\
                        &target=sumSeries%28app.http.%2A.%2A.count%29";
        assert_eq!(
            url_for("http://127.0.0.1:8080", query, None).as_deref(),
            Ok(expected)
        );
        // Argo's "query with surrounding whitespace": all whitespace goes, inside too.
        let spaced = "\n  target = sumSeries( app.http.*.*.count )\t&from=-2min \n";
        assert_eq!(
            url_for("http://127.0.0.1:8080", spaced, None).as_deref(),
            Ok(expected)
        );
        // A proxy prefix is kept; the address's own query and fragment are not.
        assert_eq!(
            url_for("http://127.0.0.1:8080/graphite/?x=1#f", "target=a.b", None).as_deref(),
            Ok("http://127.0.0.1:8080/graphite/render?format=json&target=a.b")
        );
        // The query's own format is replaced; + is a space, re-encoded as Go does; repeated
        // keys keep their order.
        assert_eq!(
            url_for(
                "http://127.0.0.1:1",
                "target=b&format=png&target=a&k=x+y%2F~!",
                None
            )
            .as_deref(),
            Ok("http://127.0.0.1:1/render?format=json&k=x+y%2F~%21&target=b&target=a")
        );
        // A past instant pins Graphite's now, unless the query sets its own.
        assert_eq!(
            url_for(
                "http://127.0.0.1:1",
                "target=a&from=-2min",
                Some(1_700_000_000)
            )
            .as_deref(),
            Ok("http://127.0.0.1:1/render?format=json&from=-2min&now=1700000000&target=a")
        );
        assert_eq!(
            url_for(
                "http://127.0.0.1:1",
                "target=a&now=123",
                Some(1_700_000_000)
            )
            .as_deref(),
            Ok("http://127.0.0.1:1/render?format=json&now=123&target=a")
        );
        // A fragment is never sent.
        assert_eq!(
            url_for("http://127.0.0.1:1", "target=a#b", None).as_deref(),
            Ok("http://127.0.0.1:1/render?format=json&target=a")
        );
    }

    #[test]
    fn queries_go_would_reject_or_drop_pairs_of_are_errors() {
        // Argo's "invalid query": a bad escape in what Go reads as the fragment.
        let err = parse_query("target=#$%^&*(proper$#$%%^(password&from=-2min").unwrap_err();
        assert!(err.contains(r#"invalid URL escape "%^&""#), "{err}");
        let err = parse_query("target=a;b&from=-2min").unwrap_err();
        assert!(
            err.contains("\"target=a;b\"") && err.contains("semicolon"),
            "{err}"
        );
        let err = parse_query("target=a%zzb").unwrap_err();
        assert!(err.contains(r#"invalid URL escape "%zz""#), "{err}");
        let err = parse_query("target=a%2").unwrap_err();
        assert!(err.contains(r#"invalid URL escape "%2""#), "{err}");
        assert!(
            parse_query("target=a\u{b}b")
                .unwrap_err()
                .contains("control character")
        );
        assert_eq!(
            parse_query("&&target=a%28b%29&x"),
            Ok(vec![
                ("target".to_owned(), "a(b)".to_owned()),
                ("x".to_owned(), String::new())
            ])
        );
    }

    #[test]
    fn now_is_pinned_only_for_past_instants() {
        let wall = 1_700_000_000_000;
        assert_eq!(pinned_now(wall, wall), None);
        assert_eq!(pinned_now(wall - PAST_SLACK_MS, wall), None);
        assert_eq!(pinned_now(wall + 60_000, wall), None);
        assert_eq!(pinned_now(wall - 60_500, wall), Some(1_699_999_939));
    }

    fn points(body: &str) -> Result<Vec<Option<f64>>, String> {
        first_series(body.as_bytes())
    }

    #[test]
    fn data_points_decode_as_argos_unmarshal_json_reads_them() {
        let ok = r#"[{"datapoints": [[100.000000, 1621348430]],
                      "target": "sumSeries(app.http.*.*.count)",
                      "tags": {"aggregatedBy": "sum", "name": "sumSeries(app.http.*.*.count)"}}]"#;
        assert_eq!(points(ok), Ok(vec![Some(100.0)]));
        // A string value and a string timestamp.
        let strings = r#"[{"datapoints": [["100.000000", "1621348430"]], "target": "x"}]"#;
        assert_eq!(points(strings), Ok(vec![Some(100.0)]));
        // A null value is kept as a point without a value; a null timestamp is accepted.
        let nulls = r#"[{"datapoints": [[null, 1621348430], [1, null]], "target": "x"}]"#;
        assert_eq!(points(nulls), Ok(vec![None, Some(1.0)]));
        assert_eq!(points("[]"), Ok(vec![]));
        assert_eq!(points("null"), Ok(vec![]));
        assert_eq!(points(r#"[{"target": "x", "datapoints": []}]"#), Ok(vec![]));
        // Only the first series counts, but every series must decode.
        let two = r#"[{"datapoints": [[1, 1]]}, {"datapoints": [[2, 1]]}]"#;
        assert_eq!(points(two), Ok(vec![Some(1.0)]));
        let bad_second = r#"[{"datapoints": [[1, 1]]}, {"datapoints": [[2]]}]"#;
        assert!(
            points(bad_second)
                .unwrap_err()
                .contains("series 1, datapoint 0")
        );
        // Special values in strings, as Go's ParseFloat reads them.
        let special =
            r#"[{"datapoints": [["NaN", 1], ["+Inf", 2], ["-infinity", 3], ["1e-2", 4]]}]"#;
        let decoded = points(special).unwrap();
        assert!(decoded[0].unwrap().is_nan());
        assert_eq!(
            &decoded[1..],
            &[Some(f64::INFINITY), Some(f64::NEG_INFINITY), Some(0.01)]
        );
    }

    #[test]
    fn malformed_data_points_are_errors_with_argos_messages() {
        let cases = [
            ("invalid JSON", "the response is not Graphite's JSON"),
            (r#"{"target": "x"}"#, "the response is not Graphite's JSON"),
            (
                r#"[{"target": 1, "datapoints": []}]"#,
                "the response is not Graphite's JSON",
            ),
            (
                r#"[{"datapoints": [[10]]}]"#,
                "error unmarshaling data point: [10]",
            ),
            (
                r#"[{"datapoints": [[10, 1621348420, 3]]}]"#,
                "error unmarshaling data point: [10 1.62134842e+09 3]",
            ),
            (
                r#"[{"datapoints": [null]}]"#,
                "error unmarshaling data point: []",
            ),
            (
                r#"[{"datapoints": [{"v": 1}]}]"#,
                "error unmarshaling data point: map[v:1]",
            ),
            (
                r#"[{"datapoints": [[100, "f"]]}]"#,
                r#"strconv.ParseInt: parsing "f": invalid syntax"#,
            ),
            (
                r#"[{"datapoints": [[100, "99999999999999999999"]]}]"#,
                r#"strconv.ParseInt: parsing "99999999999999999999": value out of range"#,
            ),
            (
                r#"[{"datapoints": [[[], 1621348420]]}]"#,
                "error unmarshaling value: []",
            ),
            (
                r#"[{"datapoints": [[true, 1]]}]"#,
                "error unmarshaling value: true",
            ),
            // Argo prints the value here (a bug); Flotilla prints the timestamp.
            (
                r#"[{"datapoints": [[100, []]]}]"#,
                "error unmarshaling timestamp: []",
            ),
            (
                r#"[{"datapoints": [["ten", 1]]}]"#,
                r#"strconv.ParseFloat: parsing "ten": invalid syntax"#,
            ),
            (
                r#"[{"datapoints": [["+nan", 1]]}]"#,
                r#"strconv.ParseFloat: parsing "+nan": invalid syntax"#,
            ),
            (
                r#"[{"datapoints": [["1e400", 1]]}]"#,
                r#"strconv.ParseFloat: parsing "1e400": value out of range"#,
            ),
        ];
        for (body, expected) in cases {
            let err = points(body).unwrap_err();
            assert!(err.contains(expected), "{body}: {err}");
        }
    }

    #[test]
    fn the_value_is_argos_percent_f_list_without_nulls() {
        assert_eq!(argo_value(&[10.0, 5.0]), "[10.000000,5.000000]");
        assert_eq!(argo_value(&[]), "[]");
        assert_eq!(
            argo_value(&[0.0078125, 1e21]),
            "[0.007812,1000000000000000000000.000000]"
        );
        assert_eq!(
            argo_value(&[f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.5]),
            "[NaN,+Inf,-Inf,-1.500000]"
        );
    }

    #[test]
    fn go_v_prints_floats_as_go_does() {
        // Checked against Go 1.2x: fmt.Printf("%v", []any{...}) of decoded JSON.
        let decoded: Value = serde_json::from_str(
            r#"[10, 1621348420, 1e6, 123456, 0.00001, 0.0001, "s", null, true, [], {"b":1,"a":[2]}, -0.0, 1.5e300]"#,
        )
        .unwrap();
        assert_eq!(
            go_v(&decoded),
            "[10 1.62134842e+09 1e+06 123456 1e-05 0.0001 s <nil> true [] map[a:[2] b:1] -0 1.5e+300]"
        );
    }
}
