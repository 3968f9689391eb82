//! Value types shared by every manifest kind: durations, int-or-string, int-or-percent, quantities.
//!
//! Each type parses strictly at deserialization time and serializes back to a form that parses to
//! the same value, so `parse → serialize → parse` is the identity on the typed model.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer, de};

/// Whether a string holds an `{{args.x}}`-style placeholder, resolved later by argument substitution.
pub fn is_templated(text: &str) -> bool {
    text.contains("{{")
}

/// Reads `null` as the type's default, as Go's JSON decoding does for a struct field
/// (`metadata:` left empty in YAML is null).
pub fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// A duration as Argo Rollouts writes it: an integer number of seconds, or a Go duration string
/// such as `"30s"`, `"5m"`, `"1h30m"` or `"500ms"`.
///
/// A string holding a `{{args.x}}` placeholder is kept as [`Duration::Templated`] and checked after
/// argument substitution (AnalysisTemplates may template their intervals).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Duration {
    /// A known length, in milliseconds.
    Millis(u64),
    /// A placeholder to be resolved by argument substitution.
    Templated(String),
}

impl schemars::JsonSchema for Duration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }

    /// A Go-style duration string (`30s`, `5m`, `1h30m`, `500ms`) or a number of seconds.
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A Go-style duration (`30s`, `5m`, `1h30m`, `500ms`) or a number of seconds.",
            "x-kubernetes-int-or-string": true
        })
    }
}

impl Duration {
    /// A duration of whole seconds.
    pub const fn from_secs(secs: u64) -> Self {
        Duration::Millis(secs * 1000)
    }

    /// The length in milliseconds, when it is known.
    pub fn as_millis(&self) -> Option<u64> {
        match self {
            Duration::Millis(ms) => Some(*ms),
            Duration::Templated(_) => None,
        }
    }

    /// The length in whole seconds (rounded down), when it is known.
    pub fn as_secs(&self) -> Option<u64> {
        self.as_millis().map(|ms| ms / 1000)
    }
}

/// Parses a Go duration string (`"1h30m"`, `"2.5s"`, `"300ms"`) or a bare integer of seconds.
///
/// Go accepts the units `ns`, `us` (`µs`), `ms`, `s`, `m` and `h`, decimal fractions, and a
/// sequence of such terms. Negative durations are rejected: no Flotilla field takes one.
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration".into());
    }
    if let Ok(secs) = text.parse::<u64>() {
        return secs
            .checked_mul(1000)
            .ok_or_else(|| format!("duration {text:?} is too large"));
    }
    if text.starts_with('-') {
        return Err(format!("duration {text:?} is negative"));
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest == "0" {
        return Ok(0);
    }
    let mut total_nanos: f64 = 0.0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if number_len == 0 {
            return Err(format!(
                "invalid duration {text:?}: expected a number before {rest:?}"
            ));
        }
        let number: f64 = rest[..number_len].parse().map_err(|_| {
            format!(
                "invalid duration {text:?}: bad number {:?}",
                &rest[..number_len]
            )
        })?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        let nanos_per_unit = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "" => {
                return Err(format!(
                    "invalid duration {text:?}: missing unit (use s, m or h)"
                ));
            }
            other => {
                return Err(format!(
                    "invalid duration {text:?}: unknown unit {other:?} (use ns, us, ms, s, m or h)"
                ));
            }
        };
        total_nanos += number * nanos_per_unit;
        rest = &rest[unit_len..];
    }
    let millis = (total_nanos / 1e6).round();
    if !millis.is_finite() || millis > u64::MAX as f64 / 2.0 {
        return Err(format!("duration {text:?} is too large"));
    }
    Ok(millis as u64)
}

/// Formats milliseconds as a canonical Go duration string (`"1h30m"`, `"1.5s"`, `"0s"`).
pub fn format_duration(millis: u64) -> String {
    if millis == 0 {
        return "0s".into();
    }
    let hours = millis / 3_600_000;
    let minutes = (millis % 3_600_000) / 60_000;
    let sub_minute = millis % 60_000;
    let mut out = String::new();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    if sub_minute > 0 {
        if sub_minute.is_multiple_of(1000) {
            out.push_str(&format!("{}s", sub_minute / 1000));
        } else if sub_minute < 1000 {
            out.push_str(&format!("{sub_minute}ms"));
        } else {
            out.push_str(&format!("{}.{:03}s", sub_minute / 1000, sub_minute % 1000));
        }
    }
    out
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Duration::Millis(ms) => f.write_str(&format_duration(*ms)),
            Duration::Templated(text) => f.write_str(text),
        }
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl de::Visitor<'_> for Visitor {
            type Value = Duration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration: integer seconds or a Go duration string such as \"5m\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
                v.checked_mul(1000)
                    .map(Duration::Millis)
                    .ok_or_else(|| E::custom("duration is too large"))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
                if v < 0 {
                    return Err(E::custom(format!("duration {v} is negative")));
                }
                self.visit_u64(v as u64)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
                if is_templated(v) {
                    return Ok(Duration::Templated(v.to_owned()));
                }
                parse_duration(v).map(Duration::Millis).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// Kubernetes' `IntOrString`: Argo uses it for counts and limits that may be templated
/// (`count: "{{args.count}}"`) and for pause durations.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum IntOrString {
    /// An integer.
    Int(i64),
    /// A string: a number in quotes or a `{{args.x}}` placeholder.
    String(String),
}

impl IntOrString {
    /// The integer value, when the field holds one (directly or as a numeric string).
    pub fn as_int(&self) -> Option<i64> {
        match self {
            IntOrString::Int(v) => Some(*v),
            IntOrString::String(s) => s.trim().parse().ok(),
        }
    }

    /// Whether the value is an unresolved placeholder.
    pub fn is_templated(&self) -> bool {
        matches!(self, IntOrString::String(s) if is_templated(s))
    }
}

impl fmt::Display for IntOrString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntOrString::Int(v) => write!(f, "{v}"),
            IntOrString::String(s) => f.write_str(s),
        }
    }
}

/// An absolute count or a percentage (`maxSurge: 25%`, `maxUpdate: 1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IntOrPercent {
    /// An absolute number.
    Int(i64),
    /// A percentage of a total, 0..=100 or more where the field allows it.
    Percent(i64),
}

impl schemars::JsonSchema for IntOrPercent {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "IntOrPercent".into()
    }

    /// A count, or a percentage written `"25%"`.
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A count, or a percentage written \"25%\".",
            "x-kubernetes-int-or-string": true
        })
    }
}

impl IntOrPercent {
    /// Resolves against a total, rounding up as Kubernetes does for maxSurge.
    pub fn resolve_ceil(self, total: i64) -> i64 {
        match self {
            IntOrPercent::Int(v) => v,
            IntOrPercent::Percent(p) => (total * p + 99) / 100,
        }
    }

    /// Resolves against a total, rounding down as Kubernetes does for maxUnavailable.
    pub fn resolve_floor(self, total: i64) -> i64 {
        match self {
            IntOrPercent::Int(v) => v,
            IntOrPercent::Percent(p) => total * p / 100,
        }
    }

    /// Whether the value is zero (either form).
    pub fn is_zero(self) -> bool {
        matches!(self, IntOrPercent::Int(0) | IntOrPercent::Percent(0))
    }
}

impl fmt::Display for IntOrPercent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntOrPercent::Int(v) => write!(f, "{v}"),
            IntOrPercent::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl Serialize for IntOrPercent {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            IntOrPercent::Int(v) => serializer.serialize_i64(*v),
            IntOrPercent::Percent(_) => serializer.collect_str(self),
        }
    }
}

impl<'de> Deserialize<'de> for IntOrPercent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl de::Visitor<'_> for Visitor {
            type Value = IntOrPercent;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an integer or a percentage such as \"25%\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<IntOrPercent, E> {
                i64::try_from(v)
                    .map(IntOrPercent::Int)
                    .map_err(|_| E::custom("value is too large"))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<IntOrPercent, E> {
                if v < 0 {
                    return Err(E::custom(format!("{v} is negative")));
                }
                Ok(IntOrPercent::Int(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<IntOrPercent, E> {
                let trimmed = v.trim();
                if let Some(number) = trimmed.strip_suffix('%') {
                    return number
                        .trim()
                        .parse::<i64>()
                        .ok()
                        .filter(|p| *p >= 0)
                        .map(IntOrPercent::Percent)
                        .ok_or_else(|| E::custom(format!("invalid percentage {v:?}")));
                }
                trimmed.parse::<i64>().ok().filter(|n| *n >= 0).map(IntOrPercent::Int).ok_or_else(|| {
                    E::custom(format!(
                        "invalid value {v:?}: expected an integer or a percentage such as \"25%\""
                    ))
                })
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// Checks a Kubernetes resource quantity (`"500m"`, `"1Gi"`, `"1e3"`, `"0.5"`).
///
/// The grammar is Kubernetes' `resource.Quantity`: a signed decimal number followed by a binary
/// suffix (`Ki` … `Ei`), a decimal suffix (`n`, `u`, `m`, `k`, `M`, `G`, `T`, `P`, `E`) or a
/// decimal exponent (`e3`, `E-2`).
pub fn validate_quantity(text: &str) -> Result<(), String> {
    let bad = || {
        format!(
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text:?}"
        )
    };
    let s = text.strip_prefix(['+', '-']).unwrap_or(text);
    let number_len = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let number = &s[..number_len];
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return Err(bad());
    }
    let suffix = &s[number_len..];
    let ok = match suffix {
        "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" | "n" | "u" | "m" | "k" | "M" | "G" | "T"
        | "P" | "E" => true,
        _ => {
            let exponent = suffix.strip_prefix(['e', 'E']);
            match exponent {
                Some(exp) => {
                    let digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
                    !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
                }
                None => false,
            }
        }
    };
    if ok { Ok(()) } else { Err(bad()) }
}

/// Whether `text` is a DNS label (RFC 1123), as Kubernetes names namespaces and Services:
/// lower-case letters, digits and `-`, at most 63, not starting or ending with `-`.
pub fn is_dns_label(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 63
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !text.starts_with('-')
        && !text.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_like_go() {
        assert_eq!(parse_duration("30"), Ok(30_000));
        assert_eq!(parse_duration("30s"), Ok(30_000));
        assert_eq!(parse_duration("5m"), Ok(300_000));
        assert_eq!(parse_duration("1h30m"), Ok(5_400_000));
        assert_eq!(parse_duration("1.5s"), Ok(1_500));
        assert_eq!(parse_duration("300ms"), Ok(300));
        assert_eq!(parse_duration("0"), Ok(0));
        assert!(parse_duration("5 minutes").is_err());
        assert!(parse_duration("-5s").is_err());
        assert!(parse_duration("5").is_ok());
        assert!(parse_duration("m").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn formatted_durations_parse_back_to_the_same_length() {
        for ms in [0, 1, 999, 1000, 1500, 59_999, 60_000, 5_400_000, 86_400_123] {
            assert_eq!(parse_duration(&format_duration(ms)), Ok(ms), "{ms}");
        }
    }

    #[test]
    fn int_or_percent_accepts_both_forms_and_rejects_junk() {
        let parse = |v: serde_json::Value| serde_json::from_value::<IntOrPercent>(v);
        assert_eq!(parse(serde_json::json!(3)).unwrap(), IntOrPercent::Int(3));
        assert_eq!(
            parse(serde_json::json!("25%")).unwrap(),
            IntOrPercent::Percent(25)
        );
        assert!(parse(serde_json::json!("25 percent")).is_err());
        assert!(parse(serde_json::json!(-1)).is_err());
        assert_eq!(IntOrPercent::Percent(25).resolve_ceil(10), 3);
        assert_eq!(IntOrPercent::Percent(25).resolve_floor(10), 2);
    }

    #[test]
    fn quantities_follow_the_kubernetes_grammar() {
        for ok in ["1", "500m", "1Gi", "0.5", "1e3", "2E-2", "+1k", "128Mi"] {
            assert!(validate_quantity(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Gi", "1GB", "one", "1.2.3", "1e", "--1"] {
            assert!(validate_quantity(bad).is_err(), "{bad}");
        }
    }
}
