//! A rollout gate on a Prometheus query: the fleet is healthy while every sample an instant query
//! returns is at most a threshold (an error ratio under 5 %, a p99 latency under 300 ms).
//!
//! [`PrometheusGate::check`] sends `GET {url}/api/v1/query?query=...` and reads the answer of
//! Prometheus' HTTP API: `{"status":"success","data":{"resultType":...,"result":...}}`, or
//! `{"status":"error","errorType":...,"error":...}` (with HTTP 400 or 422 for a query Prometheus
//! refuses). Sample values come as text (`"0.01"`, `"NaN"`, `"+Inf"`).
//!
//! The rule, in [`GateReading::passed`]:
//! - a `vector` passes when every sample is `<= max`; an empty vector passes (nothing measured
//!   says otherwise: the series may not exist yet), and the reading says "no samples";
//! - a `scalar` is one sample without labels;
//! - `NaN` fails (`NaN <= max` is false): a ratio of zero requests over zero is no evidence of
//!   health, and a gate should not open on it;
//! - a `matrix` or `string` result is an error ([`PrometheusError::UnsupportedResult`]): a range
//!   query has no single value to compare.
//!
//! Every failure to get a reading is a [`PrometheusError`]; the rollout engine decides what an
//! unreadable gate means for a wave.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How long one query may take, connection included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How much of an error body a [`PrometheusError::Http`] keeps.
const MAX_ERROR_BODY_CHARS: usize = 512;

/// A gate on a Prometheus instant query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PrometheusGate {
    /// Prometheus' base URL, e.g. `http://127.0.0.1:9090` (a path prefix, as behind a proxy, is
    /// kept: `/api/v1/query` is appended).
    pub url: String,
    /// The PromQL expression, evaluated as an instant query.
    pub query: String,
    /// The highest value a sample may have for the gate to pass.
    pub max: f64,
}

/// One sample of the query's result.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Sample {
    /// The series' labels (none for a scalar).
    pub labels: BTreeMap<String, String>,
    /// The value, which may be `NaN` or infinite (as text in JSON, the way Prometheus writes
    /// it: `"0.01"`, `"NaN"`, `"+Inf"`).
    #[serde(serialize_with = "serialize_value")]
    #[schema(value_type = String)]
    pub value: f64,
}

/// What a check of a [`PrometheusGate`] found.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct GateReading {
    /// The samples, in the order Prometheus returned them.
    pub samples: Vec<Sample>,
    /// The threshold they were compared with.
    #[serde(serialize_with = "serialize_value")]
    #[schema(value_type = String)]
    pub max: f64,
    /// True when every sample is `<= max` (also when there is none).
    pub passed: bool,
    /// Why, in a sentence: "no samples", the highest value against the threshold, or which
    /// sample failed.
    pub summary: String,
}

impl GateReading {
    /// Compares `samples` with `max`.
    pub fn new(samples: Vec<Sample>, max: f64) -> Self {
        let failing: Vec<&Sample> = samples.iter().filter(|s| !within(s.value, max)).collect();
        let passed = failing.is_empty();
        let summary = if samples.is_empty() {
            "no samples".to_owned()
        } else if let Some(first) = failing.first() {
            let what =
                if first.value.is_nan() { "(never passes)".to_owned() } else { format!("> {}", format_value(max)) };
            format!(
                "{} of {} fail: {} = {} {what}",
                failing.len(),
                samples.len(),
                describe_labels(&first.labels),
                format_value(first.value),
            )
        } else {
            let highest = samples.iter().map(|s| s.value).fold(f64::NEG_INFINITY, f64::max);
            let count = if samples.len() == 1 { "1 sample".to_owned() } else { format!("{} samples", samples.len()) };
            format!("{count}, highest {} <= {}", format_value(highest), format_value(max))
        };
        Self { samples, max, passed, summary }
    }

    /// The samples that made the gate fail.
    pub fn failing(&self) -> impl Iterator<Item = &Sample> {
        self.samples.iter().filter(|s| !within(s.value, self.max))
    }
}

/// The gate's rule for one sample. Not `!(value > max)`: NaN is not within any threshold.
fn within(value: f64, max: f64) -> bool {
    value <= max
}

/// Why a gate could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
    /// The URL cannot be used to build a request.
    #[error("invalid Prometheus URL `{url}`: {source}")]
    InvalidUrl {
        /// The base URL as configured.
        url: String,
        /// Why reqwest refused it.
        #[source]
        source: reqwest::Error,
    },
    /// No connection, or it broke before an answer.
    #[error("cannot reach Prometheus at {url}: {}", chain(.source))]
    Unreachable {
        /// The base URL.
        url: String,
        /// The connection error.
        #[source]
        source: reqwest::Error,
    },
    /// No answer within the deadline.
    #[error("Prometheus at {url} did not answer within {timeout:?}")]
    Timeout {
        /// The base URL.
        url: String,
        /// The deadline.
        timeout: Duration,
    },
    /// An HTTP error status without the query API's error body (a proxy, a wrong path).
    #[error("Prometheus answered HTTP {status}: {body}")]
    Http {
        /// The HTTP status code.
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// Prometheus refused or failed the query (`"status":"error"`), e.g. `bad_data` for a query
    /// that does not parse, `timeout` or `execution` for one that failed.
    #[error("Prometheus refused the query ({error_type}): {error}")]
    Query {
        /// `errorType` as Prometheus sent it.
        error_type: String,
        /// `error` as Prometheus sent it.
        error: String,
    },
    /// The answer is not what the query API returns.
    #[error("Prometheus' answer is not a query API answer: {0}")]
    BadAnswer(String),
    /// The query's result is a range vector or a string, which has no single value per series.
    #[error("the query returns a {0}; a gate needs an instant vector or a scalar")]
    UnsupportedResult(String),
}

/// The error and its causes, each once (reqwest's own text omits what went wrong underneath).
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    for cause in std::iter::successors(error.source(), |e| e.source()) {
        let message = cause.to_string();
        if !text.contains(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
    }
    text
}

impl PrometheusGate {
    /// A gate passing while every sample of `query` at `url` is at most `max`.
    pub fn new(url: impl Into<String>, query: impl Into<String>, max: f64) -> Self {
        Self { url: url.into(), query: query.into(), max }
    }

    /// The query endpoint: the base URL without a trailing `/`, then `/api/v1/query`.
    fn endpoint(&self) -> String {
        format!("{}/api/v1/query", self.url.trim_end_matches('/'))
    }

    /// Runs the query once (deadline [`REQUEST_TIMEOUT`]) and compares its samples with `max`.
    pub async fn check(&self, client: &reqwest::Client) -> Result<GateReading, PrometheusError> {
        let request = client
            .get(self.endpoint())
            .query(&[("query", self.query.as_str())])
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|source| PrometheusError::InvalidUrl { url: self.url.clone(), source })?;
        let transport = |source: reqwest::Error| {
            if source.is_timeout() {
                PrometheusError::Timeout { url: self.url.clone(), timeout: REQUEST_TIMEOUT }
            } else {
                PrometheusError::Unreachable { url: self.url.clone(), source }
            }
        };
        let response = client.execute(request).await.map_err(transport)?;
        let status = response.status().as_u16();
        let body = response.bytes().await.map_err(transport)?;
        let reading = read_answer(status, &body, self.max);
        match &reading {
            Ok(reading) => tracing::debug!(
                url = %self.url,
                query = %self.query,
                passed = reading.passed,
                summary = %reading.summary,
                "Prometheus gate read."
            ),
            Err(error) => tracing::debug!(url = %self.url, query = %self.query, %error, "Prometheus gate unreadable."),
        }
        reading
    }
}

/// The query API's envelope.
#[derive(Deserialize)]
struct Envelope {
    status: String,
    data: Option<Data>,
    #[serde(rename = "errorType")]
    error_type: Option<String>,
    error: Option<String>,
}

#[derive(Deserialize)]
struct Data {
    #[serde(rename = "resultType")]
    result_type: String,
    result: serde_json::Value,
}

/// One element of a vector result. A native histogram sample carries `histogram` instead of
/// `value`, hence the option.
#[derive(Deserialize)]
struct VectorSample {
    #[serde(default)]
    metric: BTreeMap<String, String>,
    value: Option<(serde_json::Value, String)>,
}

/// Reads an answer of the query API: an HTTP status and its body.
fn read_answer(status: u16, body: &[u8], max: f64) -> Result<GateReading, PrometheusError> {
    let envelope: Envelope = match serde_json::from_slice(body) {
        Ok(envelope) => envelope,
        // Not the API's JSON: an HTTP error says more than the parse error would.
        Err(_) if !(200..300).contains(&status) => {
            let text = String::from_utf8_lossy(body);
            let mut body: String = text.trim().chars().take(MAX_ERROR_BODY_CHARS).collect();
            if text.trim().chars().count() > MAX_ERROR_BODY_CHARS {
                body.push('…');
            }
            return Err(PrometheusError::Http { status, body });
        }
        Err(error) => return Err(PrometheusError::BadAnswer(error.to_string())),
    };
    match envelope.status.as_str() {
        "success" => {}
        "error" => {
            return Err(PrometheusError::Query {
                error_type: envelope.error_type.unwrap_or_default(),
                error: envelope.error.unwrap_or_default(),
            });
        }
        other => return Err(PrometheusError::BadAnswer(format!("`status` is `{other}`"))),
    }
    let data = envelope.data.ok_or_else(|| PrometheusError::BadAnswer("no `data`".to_owned()))?;
    let samples = match data.result_type.as_str() {
        "vector" => {
            let vector: Vec<VectorSample> = serde_json::from_value(data.result)
                .map_err(|e| PrometheusError::BadAnswer(format!("the vector: {e}")))?;
            vector
                .into_iter()
                .map(|sample| {
                    let (_, text) = sample.value.ok_or_else(|| {
                        PrometheusError::BadAnswer(format!(
                            "sample {} has no `value` (a native histogram?)",
                            describe_labels(&sample.metric)
                        ))
                    })?;
                    Ok(Sample { labels: sample.metric, value: parse_value(&text)? })
                })
                .collect::<Result<Vec<_>, _>>()?
        }
        "scalar" => {
            let (_, text): (serde_json::Value, String) = serde_json::from_value(data.result)
                .map_err(|e| PrometheusError::BadAnswer(format!("the scalar: {e}")))?;
            vec![Sample { labels: BTreeMap::new(), value: parse_value(&text)? }]
        }
        other => return Err(PrometheusError::UnsupportedResult(other.to_owned())),
    };
    Ok(GateReading::new(samples, max))
}

/// A sample value as Prometheus writes it: a decimal number, `NaN`, `+Inf` or `-Inf`.
fn parse_value(text: &str) -> Result<f64, PrometheusError> {
    match text {
        "NaN" => Ok(f64::NAN),
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        _ => text
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| PrometheusError::BadAnswer(format!("`{text}` is not a sample value"))),
    }
}

/// A value the way Prometheus writes it.
fn format_value(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_owned()
    } else if value == f64::INFINITY {
        "+Inf".to_owned()
    } else if value == f64::NEG_INFINITY {
        "-Inf".to_owned()
    } else {
        value.to_string()
    }
}

fn serialize_value<S: serde::Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&format_value(*value))
}

/// Labels as PromQL writes a selector: `{code="500",job="api"}`, or `{}`.
fn describe_labels(labels: &BTreeMap<String, String>) -> String {
    let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{{{}}}", pairs.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(body: &str, max: f64) -> Result<GateReading, PrometheusError> {
        read_answer(200, body.as_bytes(), max)
    }

    fn vector(values: &[(&str, &str)]) -> String {
        let samples: Vec<String> = values
            .iter()
            .map(|(instance, v)| format!(r#"{{"metric":{{"instance":"{instance}"}},"value":[1700000000.5,"{v}"]}}"#))
            .collect();
        format!(r#"{{"status":"success","data":{{"resultType":"vector","result":[{}]}}}}"#, samples.join(","))
    }

    #[test]
    fn a_vector_passes_when_every_sample_is_at_most_max() {
        let reading = read(&vector(&[("a", "0.01"), ("b", "0.05")]), 0.05).unwrap();
        assert!(reading.passed, "{reading:?}");
        assert_eq!(reading.samples.len(), 2);
        assert_eq!(reading.samples[0].labels["instance"], "a");
        assert_eq!(reading.samples[1].value, 0.05);
        assert_eq!(reading.summary, "2 samples, highest 0.05 <= 0.05");
    }

    #[test]
    fn one_sample_above_max_fails_and_is_named() {
        let reading = read(&vector(&[("a", "0.01"), ("b", "0.2")]), 0.05).unwrap();
        assert!(!reading.passed);
        assert_eq!(reading.summary, r#"1 of 2 fail: {instance="b"} = 0.2 > 0.05"#);
        assert_eq!(reading.failing().map(|s| s.labels["instance"].as_str()).collect::<Vec<_>>(), ["b"]);
    }

    #[test]
    fn an_empty_vector_passes_with_no_samples() {
        let reading = read(&vector(&[]), 0.05).unwrap();
        assert!(reading.passed);
        assert!(reading.samples.is_empty());
        assert_eq!(reading.summary, "no samples");
    }

    #[test]
    fn nan_fails_and_infinities_compare_as_numbers() {
        let nan = read(&vector(&[("a", "NaN")]), 0.05).unwrap();
        assert!(!nan.passed);
        assert!(nan.samples[0].value.is_nan());
        assert_eq!(nan.summary, r#"1 of 1 fail: {instance="a"} = NaN (never passes)"#);
        let inf = read(&vector(&[("a", "+Inf")]), 1e9).unwrap();
        assert!(!inf.passed);
        assert_eq!(inf.samples[0].value, f64::INFINITY);
        let minus = read(&vector(&[("a", "-Inf")]), 0.0).unwrap();
        assert!(minus.passed);
    }

    #[test]
    fn a_scalar_is_one_unlabelled_sample() {
        let body = r#"{"status":"success","data":{"resultType":"scalar","result":[1700000000,"0.5"]}}"#;
        let reading = read(body, 1.0).unwrap();
        assert!(reading.passed);
        assert_eq!(reading.samples, [Sample { labels: BTreeMap::new(), value: 0.5 }]);
        assert!(!read(body, 0.4).unwrap().passed);
    }

    #[test]
    fn an_error_answer_names_its_type_and_message() {
        let body = r#"{"status":"error","errorType":"bad_data","error":"1:5: parse error: unclosed left parenthesis"}"#;
        let error = read_answer(400, body.as_bytes(), 1.0).unwrap_err();
        assert!(
            matches!(&error, PrometheusError::Query { error_type, error } if error_type == "bad_data" && error.contains("parse error")),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            "Prometheus refused the query (bad_data): 1:5: parse error: unclosed left parenthesis"
        );
    }

    #[test]
    fn a_non_api_http_error_keeps_its_status_and_the_start_of_its_body() {
        let error = read_answer(502, b"Bad Gateway\n", 1.0).unwrap_err();
        assert!(matches!(&error, PrometheusError::Http { status: 502, body } if body == "Bad Gateway"), "{error:?}");
        let long = "x".repeat(2000);
        let PrometheusError::Http { body, .. } = read_answer(503, long.as_bytes(), 1.0).unwrap_err() else {
            panic!("an HTTP error");
        };
        assert_eq!(body.chars().count(), MAX_ERROR_BODY_CHARS + 1);
    }

    #[test]
    fn answers_that_are_not_the_query_api_are_bad_answers() {
        for body in [
            "not json",
            r#"{"status":"success"}"#,
            r#"{"status":"pending","data":null}"#,
            r#"{"status":"success","data":{"resultType":"vector","result":{"a":1}}}"#,
            r#"{"status":"success","data":{"resultType":"scalar","result":[1]}}"#,
            r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"abc"]}]}}"#,
            r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"histogram":[1,{}]}]}}"#,
        ] {
            let error = read(body, 1.0).unwrap_err();
            assert!(matches!(error, PrometheusError::BadAnswer(_)), "{body}: {error:?}");
        }
    }

    #[test]
    fn range_and_string_results_are_unsupported() {
        for kind in ["matrix", "string"] {
            let body = format!(r#"{{"status":"success","data":{{"resultType":"{kind}","result":[]}}}}"#);
            let error = read(&body, 1.0).unwrap_err();
            assert!(matches!(&error, PrometheusError::UnsupportedResult(k) if k == kind), "{error:?}");
        }
    }

    #[test]
    fn values_read_and_print_as_prometheus_writes_them() {
        for text in ["0.01", "1e-05", "NaN", "+Inf", "-Inf", "42"] {
            let value = parse_value(text).unwrap();
            let printed = format_value(value);
            assert_eq!(parse_value(&printed).unwrap().to_bits(), value.to_bits(), "{text} -> {printed}");
        }
        assert!(parse_value("inf").is_err(), "only Prometheus' own spellings");
    }

    #[test]
    fn readings_serialize_values_as_text() {
        let reading = GateReading::new(vec![Sample { labels: BTreeMap::new(), value: f64::NAN }], 0.05);
        let json = serde_json::to_value(&reading).unwrap();
        assert_eq!(json["samples"][0]["value"], "NaN");
        assert_eq!(json["max"], "0.05");
        assert_eq!(json["passed"], false);
    }

    #[test]
    fn gates_round_trip_through_json_and_keep_a_path_prefix() {
        let gate = PrometheusGate::new("http://prom:9090/prefix/", "sum(rate(x[1m]))", 0.05);
        let back: PrometheusGate = serde_json::from_str(&serde_json::to_string(&gate).unwrap()).unwrap();
        assert_eq!(back, gate);
        assert_eq!(gate.endpoint(), "http://prom:9090/prefix/api/v1/query");
    }

    #[tokio::test]
    async fn a_closed_port_is_unreachable() {
        // Bound then dropped: nothing listens there now.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let gate = PrometheusGate::new(format!("http://127.0.0.1:{port}"), "up", 1.0);
        let error = gate.check(&reqwest::Client::new()).await.unwrap_err();
        assert!(matches!(error, PrometheusError::Unreachable { .. }), "{error:?}");
        assert!(error.to_string().starts_with(&format!("cannot reach Prometheus at http://127.0.0.1:{port}")));
    }

    #[tokio::test]
    async fn a_url_that_is_not_one_is_refused_before_sending() {
        let gate = PrometheusGate::new("not a url", "up", 1.0);
        let error = gate.check(&reqwest::Client::new()).await.unwrap_err();
        assert!(matches!(error, PrometheusError::InvalidUrl { .. }), "{error:?}");
    }
}
