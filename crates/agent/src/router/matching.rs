//! Routes and mirrors made usable: a [`RouteSpec`] or [`MirrorSpec`] checked against the known
//! subsets and compiled (header names parsed, regular expressions anchored and bounded), and
//! how a compiled one matches a request's headers.

use std::collections::BTreeSet;

use flotilla_agent_backend::wire::{CookieMatch, HeaderMatch, MirrorSpec, RouteSpec};
use http::header::{self, HeaderMap, HeaderName};
use regex::Regex;

/// Why a route or mirror cannot be used, with the field at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    /// The field, relative to the route (`header.regex`).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

pub(super) fn spec_error(field: &str, message: String) -> SpecError {
    SpecError {
        field: field.to_owned(),
        message,
    }
}

fn unknown_subset(field: &str, subset: &str, known: &BTreeSet<&str>) -> SpecError {
    spec_error(
        field,
        format!(
            "unknown subset {subset:?}; the subsets are {}",
            known.iter().copied().collect::<Vec<_>>().join(", ")
        ),
    )
}

#[derive(Debug, Clone)]
enum ValueMatch {
    Exact(String),
    Prefix(String),
    Regex(Regex),
}

#[derive(Debug, Clone)]
struct CompiledHeader {
    name: HeaderName,
    value: ValueMatch,
}

fn compile_header(header: &HeaderMatch, field: &str) -> Result<CompiledHeader, SpecError> {
    let name = HeaderName::from_bytes(header.name.as_bytes()).map_err(|_| {
        spec_error(
            &format!("{field}.name"),
            format!("{:?} is not a valid header name", header.name),
        )
    })?;
    let value = match (&header.exact, &header.prefix, &header.regex) {
        (Some(v), None, None) => ValueMatch::Exact(v.clone()),
        (None, Some(v), None) => ValueMatch::Prefix(v.clone()),
        (None, None, Some(v)) => {
            let anchored = format!("^(?:{v})$");
            ValueMatch::Regex(
                regex::RegexBuilder::new(&anchored)
                    .size_limit(1 << 20)
                    .build()
                    .map_err(|e| {
                        spec_error(
                            &format!("{field}.regex"),
                            format!("invalid regular expression {v:?}: {e}"),
                        )
                    })?,
            )
        }
        _ => {
            return Err(spec_error(
                field,
                "a header match has exactly one of exact, prefix or regex".into(),
            ));
        }
    };
    Ok(CompiledHeader { name, value })
}

impl CompiledHeader {
    fn matches(&self, headers: &HeaderMap) -> bool {
        headers.get_all(&self.name).iter().any(|v| {
            let Ok(v) = v.to_str() else { return false };
            match &self.value {
                ValueMatch::Exact(want) => v == want,
                ValueMatch::Prefix(want) => v.starts_with(want.as_str()),
                ValueMatch::Regex(re) => re.is_match(v),
            }
        })
    }
}

#[derive(Debug, Clone)]
enum Matcher {
    Header(CompiledHeader),
    Cookie(CookieMatch),
}

/// A usable route.
#[derive(Debug, Clone)]
pub struct Route {
    spec: RouteSpec,
    matcher: Matcher,
}

/// Checks a route against the known subsets and compiles it.
pub fn compile_route(spec: &RouteSpec, known: &BTreeSet<&str>) -> Result<Route, SpecError> {
    if spec.name.trim().is_empty() {
        return Err(spec_error("name", "a route needs a name".into()));
    }
    if !known.contains(spec.subset.as_str()) {
        return Err(unknown_subset("subset", &spec.subset, known));
    }
    let matcher = match (&spec.header, &spec.cookie) {
        (Some(h), None) => Matcher::Header(compile_header(h, "header")?),
        (None, Some(c)) => {
            if c.name.is_empty() || c.name.contains([';', '=', ' ']) {
                return Err(spec_error(
                    "cookie.name",
                    format!("{:?} is not a valid cookie name", c.name),
                ));
            }
            Matcher::Cookie(c.clone())
        }
        _ => {
            return Err(spec_error(
                "",
                "a route has exactly one of header or cookie".into(),
            ));
        }
    };
    Ok(Route {
        spec: spec.clone(),
        matcher,
    })
}

impl Route {
    /// What it was compiled from.
    pub fn spec(&self) -> &RouteSpec {
        &self.spec
    }

    /// Whether a request with these headers takes this route.
    pub fn matches(&self, headers: &HeaderMap) -> bool {
        match &self.matcher {
            Matcher::Header(h) => h.matches(headers),
            Matcher::Cookie(c) => cookie_matches(headers, c),
        }
    }

    /// Whether it matches on a header (header routes are tried before cookie routes).
    pub fn is_header(&self) -> bool {
        matches!(self.matcher, Matcher::Header(_))
    }
}

fn cookie_matches(headers: &HeaderMap, want: &CookieMatch) -> bool {
    headers.get_all(header::COOKIE).iter().any(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(';').any(|pair| {
                pair.trim()
                    .split_once('=')
                    .is_some_and(|(n, val)| n.trim() == want.name && val.trim() == want.value)
            })
        })
    })
}

/// A usable mirror route.
#[derive(Debug, Clone)]
pub struct Mirror {
    spec: MirrorSpec,
    header: Option<CompiledHeader>,
}

/// Checks a mirror against the known subsets and compiles it.
pub fn compile_mirror(spec: &MirrorSpec, known: &BTreeSet<&str>) -> Result<Mirror, SpecError> {
    if spec.name.trim().is_empty() {
        return Err(spec_error("name", "a mirror needs a name".into()));
    }
    if !known.contains(spec.subset.as_str()) {
        return Err(unknown_subset("subset", &spec.subset, known));
    }
    if spec.percentage > 100 {
        return Err(spec_error(
            "percentage",
            format!("percentage {} is above 100", spec.percentage),
        ));
    }
    let header = spec
        .header
        .as_ref()
        .map(|h| compile_header(h, "header"))
        .transpose()?;
    Ok(Mirror {
        spec: spec.clone(),
        header,
    })
}

impl Mirror {
    /// What it was compiled from.
    pub fn spec(&self) -> &MirrorSpec {
        &self.spec
    }

    /// Whether a request with these headers may be copied (it matches the header, if any).
    pub fn matches(&self, headers: &HeaderMap) -> bool {
        self.header.as_ref().is_none_or(|h| h.matches(headers))
    }
}
