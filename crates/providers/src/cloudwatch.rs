//! Argo's `cloudWatch` provider: one `GetMetricData` call over `interval` (default 5m) ending at
//! the measurement's instant, with the template's `metricDataQueries` converted as Argo converts
//! them; the `MetricDataResults` reach conditions with Go's field names (`result[0].Values`).
//!
//! The SDK client is built once per [`Providers`] (on first use) from the AWS SDK's standard
//! chain, as Argo's `config.LoadDefaultConfig`: credentials from the environment, the shared
//! `~/.aws/config` and `credentials` files (`AWS_PROFILE`), web identity (`AWS_ROLE_ARN` +
//! `AWS_WEB_IDENTITY_TOKEN_FILE`), ECS and EC2 instance metadata; region from `AWS_REGION` or the
//! profile; endpoint from `AWS_ENDPOINT_URL_CLOUDWATCH` or `AWS_ENDPOINT_URL` when set. HTTPS runs
//! on rustls with ring. Each call has a 30 s operation timeout (Argo sets none).

use std::collections::BTreeMap;
use std::error::Error;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_config::timeout::TimeoutConfig;
use aws_sdk_cloudwatch::Client;
use aws_sdk_cloudwatch::config::http::HttpResponse;
use aws_sdk_cloudwatch::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_cloudwatch::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_cloudwatch::error::{BoxError, ProvideErrorMetadata, SdkError};
use aws_sdk_cloudwatch::primitives::{DateTime, DateTimeFormat};
use aws_sdk_cloudwatch::types::{
    Dimension, MessageData, Metric, MetricDataQuery, MetricDataResult, MetricStat, StandardUnit,
};
use aws_smithy_http_client::tls;
use flotilla_core::analysis::{MeasureRequest, MetricResult, Millis, Outcome};
use flotilla_core::spec::Duration as SpecDuration;
use flotilla_core::spec::analysis::{CloudWatchMetric, CloudWatchMetricDataQuery};
use flotilla_core::spec::common::IntOrString;
use serde_json::{Value, json};

use crate::Providers;

/// The SDK client the providers share, built on the first CloudWatch measurement.
pub(crate) type Shared = Arc<tokio::sync::OnceCell<Client>>;

/// Argo's default look-back window.
const DEFAULT_INTERVAL_MS: u64 = 5 * 60 * 1000;
/// Upper bound on one `GetMetricData` call, retries and credential look-ups included.
const OPERATION_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs one CloudWatch measurement.
pub(crate) async fn measure(
    providers: &Providers,
    metric: &CloudWatchMetric,
    request: &MeasureRequest,
) -> Outcome {
    match run(&providers.cloudwatch, metric, request.at).await {
        Ok(outcome) => outcome,
        Err(message) => Outcome::Error(message),
    }
}

async fn run(shared: &Shared, metric: &CloudWatchMetric, at: Millis) -> Result<Outcome, String> {
    let (start, end) = window(metric.interval.as_ref(), at)?;
    if metric.metric_data_queries.is_empty() {
        return Err("the cloudWatch provider has no metricDataQueries".into());
    }
    let queries = metric
        .metric_data_queries
        .iter()
        .enumerate()
        .map(|(i, query)| convert(i, query))
        .collect::<Result<Vec<_>, _>>()?;
    let client = shared.get_or_init(build_client).await;
    let endpoint = RecordEndpoint::default();
    let output = client
        .get_metric_data()
        .start_time(DateTime::from_millis(start))
        .end_time(DateTime::from_millis(end))
        .set_metric_data_queries(Some(queries))
        .customize()
        .interceptor(endpoint.clone())
        .send()
        .await
        .map_err(|e| describe(&e, endpoint.get().as_deref()))?;

    let mut metadata = BTreeMap::new();
    if !output.messages().is_empty() {
        metadata.insert("messages".to_owned(), messages(output.messages()));
    }
    Ok(Outcome::Value {
        result: MetricResult::Json(results(output.metric_data_results())),
        metadata,
    })
}

/// The SDK client from the standard chain, on rustls with ring.
async fn build_client() -> Client {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    let config = aws_config::defaults(BehaviorVersion::latest())
        .http_client(http)
        .timeout_config(
            TimeoutConfig::builder()
                .operation_timeout(OPERATION_TIMEOUT)
                .build(),
        )
        .load()
        .await;
    Client::new(&config)
}

/// `[at - interval, at]`: Argo's `[now - interval, now]` at the measurement's instant (a past
/// one in backtests).
fn window(interval: Option<&SpecDuration>, at: Millis) -> Result<(Millis, Millis), String> {
    let interval = match interval {
        None => DEFAULT_INTERVAL_MS,
        Some(SpecDuration::Millis(0)) => {
            return Err("cloudWatch interval must be longer than zero".into());
        }
        Some(SpecDuration::Millis(ms)) => *ms,
        Some(SpecDuration::Templated(text)) => {
            return Err(format!(
                "cloudWatch interval {text:?} is not a duration (an argument was not substituted)"
            ));
        }
    };
    let interval = i64::try_from(interval).unwrap_or(i64::MAX);
    Ok((at.saturating_sub(interval), at))
}

/// One query as Argo's `convertType` builds it: `id`, `metricStat.stat` and the metric's name
/// are always sent (empty when unset), `unit` only when set, `period` as a whole number of
/// seconds (an int or a numeric string), `dimensions` only when there are some.
fn convert(index: usize, query: &CloudWatchMetricDataQuery) -> Result<MetricDataQuery, String> {
    let field = |name: &str| format!("metricDataQueries[{index}].{name}");
    let metric_stat = match &query.metric_stat {
        None => None,
        Some(stat) => {
            let metric = stat.metric.clone().unwrap_or_default();
            let dimensions = (!metric.dimensions.is_empty()).then(|| {
                metric
                    .dimensions
                    .iter()
                    .map(|d| {
                        Dimension::builder()
                            .name(d.name.clone().unwrap_or_default())
                            .value(d.value.clone().unwrap_or_default())
                            .build()
                    })
                    .collect::<Vec<_>>()
            });
            let period = match &stat.period {
                Some(period) => seconds(period, &field("metricStat.period"))?,
                None => return Err(format!("{} is required", field("metricStat.period"))),
            };
            let unit = stat
                .unit
                .as_deref()
                .filter(|u| !u.is_empty())
                .map(StandardUnit::from);
            Some(
                MetricStat::builder()
                    .metric(
                        Metric::builder()
                            .metric_name(metric.metric_name.unwrap_or_default())
                            .set_namespace(metric.namespace)
                            .set_dimensions(dimensions)
                            .build(),
                    )
                    .period(period)
                    .stat(stat.stat.clone().unwrap_or_default())
                    .set_unit(unit)
                    .build(),
            )
        }
    };
    let period = match &query.period {
        Some(period) => Some(seconds(period, &field("period"))?),
        None => None,
    };
    Ok(MetricDataQuery::builder()
        .id(query.id.clone().unwrap_or_default())
        .set_expression(query.expression.clone())
        .set_label(query.label.clone())
        .set_metric_stat(metric_stat)
        .set_period(period)
        .set_return_data(query.return_data)
        .build())
}

/// A period in seconds: an int, or a string holding one.
fn seconds(period: &IntOrString, field: &str) -> Result<i32, String> {
    let value = period
        .as_int()
        .ok_or_else(|| format!("{field} {period:?} is not a whole number of seconds"))?;
    i32::try_from(value).map_err(|_| format!("{field} {value} is out of range"))
}

/// The results as Go's `[]types.MetricDataResult` reads in conditions: `Id`, `Label`,
/// `StatusCode`, `Timestamps` (RFC 3339), `Values` and `Messages` (`Code`, `Value`).
fn results(results: &[MetricDataResult]) -> Value {
    Value::Array(
        results
            .iter()
            .map(|r| {
                json!({
                    "Id": r.id(),
                    "Label": r.label(),
                    "StatusCode": r.status_code().map(|s| s.as_str()),
                    "Timestamps": r.timestamps().iter().map(rfc3339).collect::<Vec<_>>(),
                    "Values": r.values(),
                    "Messages": r.messages().iter().map(|m| json!({
                        "Code": m.code(),
                        "Value": m.value(),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

/// `2024-02-29T11:00:00Z` (fractions of a second when there are some).
fn rfc3339(time: &DateTime) -> String {
    time.fmt(DateTimeFormat::DateTime)
        .unwrap_or_else(|_| format!("{}s since the epoch", time.secs()))
}

/// The call's `Messages` as Argo records them in metadata, in Go's `%+v` shape:
/// `[{Code:MaxQueryTimeRangeExceed Value:...}]`.
fn messages(messages: &[MessageData]) -> String {
    let items: Vec<String> = messages
        .iter()
        .map(|m| {
            format!(
                "{{Code:{} Value:{}}}",
                m.code().unwrap_or_default(),
                m.value().unwrap_or_default()
            )
        })
        .collect();
    format!("[{}]", items.join(" "))
}

/// Describes a failed call: `CloudWatch GetMetricData at https://host: HTTP 403:
/// InvalidClientTokenId: The security token ...`. AWS error messages and the SDK's causes never
/// carry the secret key.
fn describe<E>(error: &SdkError<E, HttpResponse>, endpoint: Option<&str>) -> String
where
    E: ProvideErrorMetadata + Error + 'static,
{
    let place = match endpoint {
        Some(endpoint) => format!("CloudWatch GetMetricData at {endpoint}"),
        None => "CloudWatch GetMetricData (no endpoint resolved)".to_owned(),
    };
    match error {
        SdkError::ServiceError(service) => {
            let raw = service.raw();
            let status = raw.status().as_u16();
            match (error.code(), error.message()) {
                (Some(code), Some(message)) => format!("{place}: HTTP {status}: {code}: {message}"),
                (Some(code), None) => format!("{place}: HTTP {status}: {code}"),
                _ => match crate::http::quote_body(raw.body().bytes().unwrap_or_default()) {
                    body if body.is_empty() => format!("{place}: HTTP {status}"),
                    body => format!("{place}: HTTP {status}: {body}"),
                },
            }
        }
        SdkError::TimeoutError(_) => {
            format!("{place}: timed out after {}s", OPERATION_TIMEOUT.as_secs())
        }
        other => format!("{place}: {}", crate::http::error_chain(other)),
    }
}

/// Records the endpoint (scheme, host and port) a call resolved, for its error message.
#[derive(Debug, Clone, Default)]
struct RecordEndpoint(Arc<Mutex<Option<String>>>);

impl RecordEndpoint {
    fn get(&self) -> Option<String> {
        self.0.lock().ok().and_then(|e| e.clone())
    }
}

impl Intercept for RecordEndpoint {
    fn name(&self) -> &'static str {
        "RecordEndpoint"
    }

    fn read_before_signing(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let uri = context.request().uri();
        // The origin only: no user info, path or query.
        let shown = url::Url::parse(uri)
            .map(|u| u.origin().ascii_serialization())
            .unwrap_or_else(|_| "an unparseable endpoint".to_owned());
        if let Ok(mut endpoint) = self.0.lock() {
            *endpoint = Some(shown);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_cloudwatch::error::{ConnectorError, ErrorMetadata};
    use aws_sdk_cloudwatch::operation::get_metric_data::GetMetricDataError;
    use aws_sdk_cloudwatch::types::StatusCode;
    use aws_smithy_types::body::SdkBody;
    use flotilla_core::analysis::Condition;
    use flotilla_core::spec::analysis::{
        CloudWatchMetricDimension, CloudWatchMetricStat, CloudWatchMetricStatMetric,
    };

    fn stat(namespace: &str, name: &str, stat: &str, unit: &str) -> CloudWatchMetricStat {
        CloudWatchMetricStat {
            metric: Some(CloudWatchMetricStatMetric {
                dimensions: vec![],
                metric_name: Some(name.into()),
                namespace: Some(namespace.into()),
            }),
            period: Some(IntOrString::Int(300)),
            stat: Some(stat.into()),
            unit: Some(unit.into()),
        }
    }

    /// Argo's `TestConvertType`, plus a string period and a label.
    #[test]
    fn queries_convert_as_argo_converts_them() {
        let rate = CloudWatchMetricDataQuery {
            id: Some("rate".into()),
            expression: Some("errors / requests".into()),
            label: Some("error rate".into()),
            period: Some(IntOrString::String("60".into())),
            ..Default::default()
        };
        let mut errors_stat = stat("app1", "errors", "Max", "Count");
        errors_stat.metric.as_mut().unwrap().dimensions = vec![
            CloudWatchMetricDimension {
                name: Some("hoge".into()),
                value: Some("fuga".into()),
            },
            CloudWatchMetricDimension {
                name: Some("poge".into()),
                value: Some("doge".into()),
            },
        ];
        let errors = CloudWatchMetricDataQuery {
            id: Some("errors".into()),
            metric_stat: Some(errors_stat),
            return_data: Some(false),
            ..Default::default()
        };
        let requests = CloudWatchMetricDataQuery {
            id: Some("requests".into()),
            metric_stat: Some(stat("app2", "requests", "Sum", "Bytes/Second")),
            return_data: Some(true),
            ..Default::default()
        };

        let expected_rate = MetricDataQuery::builder()
            .id("rate")
            .expression("errors / requests")
            .label("error rate")
            .period(60)
            .build();
        assert_eq!(convert(0, &rate), Ok(expected_rate));
        let expected_errors = MetricDataQuery::builder()
            .id("errors")
            .metric_stat(
                MetricStat::builder()
                    .metric(
                        Metric::builder()
                            .namespace("app1")
                            .metric_name("errors")
                            .dimensions(Dimension::builder().name("hoge").value("fuga").build())
                            .dimensions(Dimension::builder().name("poge").value("doge").build())
                            .build(),
                    )
                    .period(300)
                    .stat("Max")
                    .unit(StandardUnit::Count)
                    .build(),
            )
            .return_data(false)
            .build();
        assert_eq!(convert(1, &errors), Ok(expected_errors));
        let expected_requests = MetricDataQuery::builder()
            .id("requests")
            .metric_stat(
                MetricStat::builder()
                    .metric(
                        Metric::builder()
                            .namespace("app2")
                            .metric_name("requests")
                            .build(),
                    )
                    .period(300)
                    .stat("Sum")
                    .unit(StandardUnit::BytesSecond)
                    .build(),
            )
            .return_data(true)
            .build();
        assert_eq!(convert(2, &requests), Ok(expected_requests));

        // An unset unit is not sent (Go's SDK skips an empty enum).
        let mut no_unit = stat("app", "m", "Sum", "");
        no_unit.unit = None;
        let query = CloudWatchMetricDataQuery {
            id: Some("m".into()),
            metric_stat: Some(no_unit),
            ..Default::default()
        };
        let converted = convert(0, &query).unwrap();
        assert_eq!(converted.metric_stat().unwrap().unit(), None);
        assert_eq!(
            converted
                .metric_stat()
                .unwrap()
                .metric()
                .unwrap()
                .dimensions(),
            &[]
        );
        assert_eq!(converted.return_data(), None);
    }

    #[test]
    fn periods_must_be_whole_seconds() {
        let mut bad = stat("app", "m", "Sum", "Count");
        bad.period = Some(IntOrString::String("5m".into()));
        let query = CloudWatchMetricDataQuery {
            id: Some("m".into()),
            metric_stat: Some(bad),
            ..Default::default()
        };
        let err = convert(3, &query).unwrap_err();
        assert!(
            err.contains("metricDataQueries[3].metricStat.period") && err.contains("5m"),
            "{err}"
        );
        let huge = CloudWatchMetricDataQuery {
            id: Some("e".into()),
            expression: Some("m".into()),
            period: Some(IntOrString::Int(1 << 40)),
            ..Default::default()
        };
        let err = convert(0, &huge).unwrap_err();
        assert!(err.contains("metricDataQueries[0].period") && err.contains("out of range"));
        let mut missing = stat("app", "m", "Sum", "Count");
        missing.period = None;
        let query = CloudWatchMetricDataQuery {
            metric_stat: Some(missing),
            ..Default::default()
        };
        assert!(convert(0, &query).unwrap_err().contains("is required"));
    }

    #[test]
    fn the_window_ends_at_the_measurement_instant() {
        let at = 1_700_000_000_000;
        assert_eq!(window(None, at), Ok((at - 300_000, at)));
        assert_eq!(
            window(Some(&SpecDuration::Millis(3_600_000)), at),
            Ok((at - 3_600_000, at))
        );
        assert!(window(Some(&SpecDuration::Millis(0)), at).is_err());
        let err = window(Some(&SpecDuration::Templated("{{args.i}}".into())), at).unwrap_err();
        assert!(err.contains("{{args.i}}"), "{err}");
    }

    fn sample_results() -> Vec<MetricDataResult> {
        vec![
            MetricDataResult::builder()
                .id("rate")
                .label("error rate")
                .status_code(StatusCode::Complete)
                .timestamps(DateTime::from_secs(1_709_204_400))
                .timestamps(DateTime::from_millis(1_709_204_340_500))
                .values(0.03)
                .values(0.01)
                .build(),
            MetricDataResult::builder()
                .id("idle")
                .status_code(StatusCode::Complete)
                .messages(
                    MessageData::builder()
                        .code("ArithmeticError")
                        .value("division by zero")
                        .build(),
                )
                .build(),
        ]
    }

    #[test]
    fn results_keep_go_field_names() {
        assert_eq!(
            results(&sample_results()),
            json!([
                {
                    "Id": "rate",
                    "Label": "error rate",
                    "StatusCode": "Complete",
                    "Timestamps": ["2024-02-29T11:00:00Z", "2024-02-29T10:59:00.5Z"],
                    "Values": [0.03, 0.01],
                    "Messages": [],
                },
                {
                    "Id": "idle",
                    "Label": null,
                    "StatusCode": "Complete",
                    "Timestamps": [],
                    "Values": [],
                    "Messages": [{"Code": "ArithmeticError", "Value": "division by zero"}],
                },
            ])
        );
        assert_eq!(results(&[]), json!([]));
    }

    fn holds(condition: &str, result: &MetricResult) -> bool {
        Condition::compile(condition)
            .unwrap()
            .evaluate(result)
            .unwrap_or_else(|e| panic!("{condition}: {e}"))
    }

    #[test]
    fn conditions_read_the_results_as_argo_writes_them() {
        let result = MetricResult::Json(results(&sample_results()));
        assert!(holds("all(result[0].Values, {# < 0.05})", &result));
        assert!(!holds("all(result[0].Values, {# < 0.02})", &result));
        assert!(holds("result[0].Values[0] < 5", &result));
        assert!(!holds("result[0].Values[0] < 0.03", &result));
        assert!(holds("result[0].Id == 'rate'", &result));
        assert!(holds("result[0].Label == 'error rate'", &result));
        assert!(holds("result[0].StatusCode == 'Complete'", &result));
        assert!(holds(
            "result[0].Timestamps[0] == '2024-02-29T11:00:00Z'",
            &result
        ));
        assert!(holds("len(result[1].Values) == 0", &result));
        assert!(holds(
            "result[1].Messages[0].Code == 'ArithmeticError'",
            &result
        ));
        assert!(result.is_evidence());
    }

    #[test]
    fn messages_take_go_shape_in_metadata() {
        let both = [
            MessageData::builder()
                .code("MaxQueryTimeRangeExceed")
                .value("too long")
                .build(),
            MessageData::builder().code("Other").build(),
        ];
        assert_eq!(
            messages(&both),
            "[{Code:MaxQueryTimeRangeExceed Value:too long} {Code:Other Value:}]"
        );
    }

    #[test]
    fn errors_name_cloudwatch_the_endpoint_and_the_cause() {
        let timeout: SdkError<GetMetricDataError, HttpResponse> =
            SdkError::timeout_error("operation timeout (all attempts including retries)");
        assert_eq!(
            describe(&timeout, Some("https://monitoring.eu-west-1.amazonaws.com")),
            "CloudWatch GetMetricData at https://monitoring.eu-west-1.amazonaws.com: timed out \
             after 30s"
        );
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused here");
        let dispatch: SdkError<GetMetricDataError, HttpResponse> =
            SdkError::dispatch_failure(ConnectorError::io(Box::new(refused)));
        let text = describe(&dispatch, Some("http://127.0.0.1:9"));
        assert!(
            text.starts_with("CloudWatch GetMetricData at http://127.0.0.1:9: dispatch failure")
                && text.contains("refused here"),
            "{text}"
        );
        let answered = |status: u16, body: &'static str, code: Option<&str>| {
            let mut meta = ErrorMetadata::builder();
            if let Some(code) = code {
                meta = meta
                    .code(code)
                    .message("The security token included in the request is invalid.");
            }
            let raw = HttpResponse::new(status.try_into().unwrap(), SdkBody::from(body));
            let error: SdkError<GetMetricDataError, HttpResponse> =
                SdkError::service_error(GetMetricDataError::generic(meta.build()), raw);
            describe(&error, Some("https://monitoring.us-east-1.amazonaws.com"))
        };
        assert_eq!(
            answered(403, "<ErrorResponse/>", Some("InvalidClientTokenId")),
            "CloudWatch GetMetricData at https://monitoring.us-east-1.amazonaws.com: HTTP 403: \
             InvalidClientTokenId: The security token included in the request is invalid."
        );
        // An answer the SDK could not read is quoted (moto's XML errors, a proxy's page).
        let quoted = answered(403, "<Code>SignatureDoesNotMatch</Code>\n", None);
        assert!(
            quoted.ends_with("HTTP 403: <Code>SignatureDoesNotMatch</Code>"),
            "{quoted}"
        );
        assert!(answered(502, "", None).ends_with("amazonaws.com: HTTP 502"));
        let unresolved: SdkError<GetMetricDataError, HttpResponse> =
            SdkError::construction_failure("no region");
        let text = describe(&unresolved, None);
        assert!(
            text.contains("(no endpoint resolved)") && text.contains("no region"),
            "{text}"
        );
    }
}
