//! Argo's `influxdb` provider: a Flux query through InfluxDB 2's `/api/v2/query` (as the Go
//! client sends it: `Authorization: Token …`, the full annotated-CSV dialect), with the settings
//! Argo reads from the `profile` Secret (`address`, `authToken`, `org`). `result` is the list of
//! every record's `_value`, across tables.

use std::collections::BTreeMap;
use std::time::Duration;

use flotilla_core::analysis::{MeasureRequest, MetricResult, Outcome, SecretStore, ServiceProxy};
use flotilla_core::spec::analysis::InfluxdbMetric;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::{Number, Value, json};

use crate::{Providers, http};

/// The Secret Argo reads when the metric names no `profile`.
const DEFAULT_PROFILE: &str = "influxdb";
/// Upstream's query timeout.
const QUERY_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest response read.
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Runs one InfluxDB measurement.
pub(crate) async fn measure(
    providers: &Providers,
    proxy: Option<&dyn ServiceProxy>,
    metric: &InfluxdbMetric,
    _request: &MeasureRequest,
) -> Outcome {
    match run(providers, proxy, metric).await {
        Ok((result, metadata)) => Outcome::Value { result, metadata },
        Err(message) => Outcome::Error(format!("influxdb: {message}")),
    }
}

/// Where the query goes and as whom.
struct Profile {
    address: String,
    token: String,
    org: String,
}

fn profile(secrets: &dyn SecretStore, metric: &InfluxdbMetric) -> Result<Profile, String> {
    let name = metric
        .profile
        .as_deref()
        .filter(|p| !p.is_empty())
        .unwrap_or(DEFAULT_PROFILE);
    let token = secrets.read(name, "authToken")?;
    let address = secrets.read(name, "address")?;
    let org = secrets.read(name, "org")?;
    if token.is_empty() || address.is_empty() || org.is_empty() {
        return Err(format!(
            "secret {name}: authToken, org, or address is empty"
        ));
    }
    Ok(Profile {
        address,
        token,
        org,
    })
}

async fn run(
    providers: &Providers,
    proxy: Option<&dyn ServiceProxy>,
    metric: &InfluxdbMetric,
) -> Result<(MetricResult, BTreeMap<String, String>), String> {
    let query = metric.query.as_deref().unwrap_or_default();
    if query.trim().is_empty() {
        return Err("the query is empty".into());
    }
    let profile = profile(providers.secrets.as_ref(), metric)?;
    let base = http::parse_http_url(&profile.address, "address")?;
    let mut url = url::Url::parse(&format!(
        "{}/api/v2/query",
        base.as_str().trim_end_matches('/')
    ))
    .map_err(|e| format!("address {:?}: {e}", http::redact(&base)))?;
    url.query_pairs_mut().append_pair("org", &profile.org);
    let shown = http::shown_endpoint(&url);
    let mut token = HeaderValue::from_str(&format!("Token {}", profile.token))
        .map_err(|_| "the authToken is not a valid HTTP header value".to_owned())?;
    token.set_sensitive(true);
    let mut headers = HeaderMap::new();
    headers.insert(AUTHORIZATION, token);
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(ACCEPT, HeaderValue::from_static("text/csv"));
    let body = json!({
        "query": query,
        "type": "flux",
        "dialect": {
            "annotations": ["datatype", "group", "default"],
            "delimiter": ",",
            "header": true,
        }
    });
    let transport = providers.transport(None, proxy);
    let builder = transport
        .client
        .post(url)
        .headers(headers)
        .timeout(QUERY_TIMEOUT)
        .body(body.to_string());
    let mut response = transport
        .send(builder, "POST", &shown, QUERY_TIMEOUT)
        .await?;
    let status = response.status();
    let bytes = http::read_body(&mut response, MAX_RESPONSE_BYTES)
        .await
        .map_err(|e| e.describe("POST", &shown, QUERY_TIMEOUT))?;
    if !status.is_success() {
        // InfluxDB answers errors as {"code": "...", "message": "..."}.
        let message = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_else(|| http::quote_body(&bytes));
        return Err(format!("POST {shown}: {status}: {message}"));
    }
    let values = values(&bytes).map_err(|e| format!("POST {shown}: {e}"))?;
    if values.is_empty() {
        return Err(format!("POST {shown}: no results returned from flux query"));
    }
    let numbers: Option<Vec<f64>> = values.iter().map(Value::as_f64).collect();
    let result = match numbers {
        Some(numbers) => MetricResult::Vector(numbers),
        None => MetricResult::Json(Value::Array(values)),
    };
    let mut metadata = BTreeMap::new();
    metadata.insert("endpoint".to_owned(), shown);
    Ok((result, metadata))
}

/// One table's columns: datatype, default and name.
#[derive(Default)]
struct Table {
    types: Vec<String>,
    defaults: Vec<String>,
    names: Vec<String>,
}

/// Reads InfluxDB's annotated CSV as the Go client does and returns each record's `_value`
/// (null where a record has none). An error table is an error carrying its message.
fn values(body: &[u8]) -> Result<Vec<Value>, String> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(body);
    let mut table: Option<Table> = None;
    // Between a table's annotations and its first record: the next plain row is the header.
    let mut expecting_header = false;
    let mut in_error = false;
    let mut out = Vec::new();
    for row in reader.records() {
        let row = row.map_err(|e| format!("the answer is not CSV: {e}"))?;
        if row.len() <= 1 {
            // Blank lines separate tables.
            continue;
        }
        let first = row.get(0).unwrap_or_default();
        let cells: Vec<String> = row.iter().skip(1).map(str::to_owned).collect();
        if first.starts_with('#') {
            if !expecting_header {
                table = Some(Table::default());
                expecting_header = true;
                in_error = false;
            }
            let t = table.as_mut().expect("just set");
            match first {
                "#datatype" => t.types = cells,
                "#default" => t.defaults = cells,
                _ => {}
            }
            continue;
        }
        let Some(t) = table.as_mut() else {
            return Err("parsing error, annotations not found".into());
        };
        if expecting_header {
            if t.types.is_empty() {
                return Err("parsing error, datatype annotation not found".into());
            }
            expecting_header = false;
            if cells.first().map(String::as_str) == Some("error") {
                in_error = true;
            } else {
                t.names = cells;
            }
            continue;
        }
        if in_error {
            let message = cells
                .first()
                .filter(|m| !m.is_empty())
                .cloned()
                .unwrap_or_else(|| "unknown query error".to_owned());
            return Err(match cells.get(1).filter(|r| !r.is_empty()) {
                Some(reference) => format!("{message},{reference}"),
                None => message,
            });
        }
        if cells.len() != t.types.len() {
            return Err(format!(
                "parsing error, row has different number of columns than the table: {} vs {}",
                cells.len(),
                t.types.len()
            ));
        }
        let Some(index) = t.names.iter().position(|n| n == "_value") else {
            out.push(Value::Null);
            continue;
        };
        let mut text = cells[index].as_str();
        if text.is_empty() {
            text = t
                .defaults
                .get(index)
                .map(String::as_str)
                .unwrap_or_default();
        }
        out.push(typed(text, &t.types[index])?);
    }
    Ok(out)
}

/// One cell by its Flux datatype.
fn typed(text: &str, datatype: &str) -> Result<Value, String> {
    if text.is_empty() {
        return Ok(Value::Null);
    }
    let bad = |e: &dyn std::fmt::Display| format!("_value {text:?} is not a {datatype}: {e}");
    Ok(match datatype {
        "double" => {
            let v: f64 = text.parse().map_err(|e| bad(&e))?;
            Number::from_f64(v).map_or(Value::Null, Value::Number)
        }
        "long" => Value::from(text.parse::<i64>().map_err(|e| bad(&e))?),
        "unsignedLong" => Value::from(text.parse::<u64>().map_err(|e| bad(&e))?),
        "boolean" => Value::Bool(!text.eq_ignore_ascii_case("false")),
        "string" | "dateTime:RFC3339" | "dateTime:RFC3339Nano" | "duration" | "base64Binary" => {
            Value::String(text.to_owned())
        }
        other => return Err(format!("_value has unknown data type {other}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// InfluxDB's documented answer shape: two tables, then a blank line.
    const TWO_TABLES: &str = "#datatype,string,long,dateTime:RFC3339,dateTime:RFC3339,dateTime:RFC3339,double,string,string\r\n\
#group,false,false,true,true,false,false,true,true\r\n\
#default,_result,,,,,,,\r\n\
,result,table,_start,_stop,_time,_value,_field,_measurement\r\n\
,,0,2026-12-04T00:00:00Z,2026-12-04T00:05:00Z,2026-12-04T00:01:00Z,0.012,error_rate,http\r\n\
,,0,2026-12-04T00:00:00Z,2026-12-04T00:05:00Z,2026-12-04T00:02:00Z,0.02,error_rate,http\r\n\
\r\n\
#datatype,string,long,dateTime:RFC3339,long,string\r\n\
#group,false,false,false,false,true\r\n\
#default,_result,,,,\r\n\
,result,table,_time,_value,_field\r\n\
,,1,2026-12-04T00:01:00Z,7,count\r\n\
\r\n";

    #[test]
    fn every_records_value_across_tables_by_its_datatype() {
        let values = values(TWO_TABLES.as_bytes()).unwrap();
        assert_eq!(values, vec![json!(0.012), json!(0.02), json!(7)]);
    }

    #[test]
    fn an_error_table_is_an_error_with_its_message() {
        let body = "#datatype,string,string\r\n#group,true,true\r\n#default,,\r\n,error,reference\r\n,\"type error: expected float\",897\r\n\r\n";
        assert_eq!(
            values(body.as_bytes()).unwrap_err(),
            "type error: expected float,897"
        );
    }

    #[test]
    fn malformed_answers_are_errors_and_an_empty_answer_has_no_values() {
        assert!(
            values(b",a,b\r\n,1,2\r\n")
                .unwrap_err()
                .contains("annotations")
        );
        let ragged = "#datatype,string,double\r\n,result,_value\r\n,,1,extra\r\n";
        assert!(
            values(ragged.as_bytes())
                .unwrap_err()
                .contains("number of columns")
        );
        let bad = "#datatype,string,double\r\n,result,_value\r\n,,abc\r\n";
        assert!(values(bad.as_bytes()).unwrap_err().contains("not a double"));
        assert_eq!(values(b"\r\n").unwrap(), Vec::<Value>::new());
    }

    #[test]
    fn defaults_fill_empty_cells_and_booleans_read_as_go_reads_them() {
        let body = "#datatype,string,boolean\r\n#default,_result,true\r\n,result,_value\r\n,,\r\n,,FALSE\r\n,,yes\r\n";
        assert_eq!(
            values(body.as_bytes()).unwrap(),
            vec![json!(true), json!(false), json!(true)]
        );
    }
}
