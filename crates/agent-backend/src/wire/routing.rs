//! The routing table on the wire: the weights of the stable/canary split, header and cookie
//! routes, mirror routes, and the bodies that set them.

use serde::{Deserialize, Serialize};

use super::subsets::CANARY;

/// The weights in effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Weights {
    /// The canary's weight.
    pub canary: u32,
    /// The stable's weight (`max - canary`).
    pub stable: u32,
    /// The total.
    pub max: u32,
    /// Increases with every change to weights, routes or mirrors.
    pub generation: u64,
}

/// `PUT /v1/weights`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetWeights {
    /// The canary's weight, 0..=max.
    pub canary: u32,
}

/// A header match: exactly one of `exact`, `prefix`, `regex`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeaderMatch {
    /// The header name (case-insensitive).
    pub name: String,
    /// The value, exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact: Option<String>,
    /// A prefix of the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// A regular expression the whole value must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
}

/// A cookie match: the cookie `name` has exactly `value`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CookieMatch {
    /// The cookie name.
    pub name: String,
    /// Its value.
    pub value: String,
}

/// A named route: requests that match go to `subset`, whatever the weights.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteSpec {
    /// The route's name (what removes it).
    pub name: String,
    /// The subset that matching requests go to.
    pub subset: String,
    /// Match on a header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<HeaderMatch>,
    /// Match on a cookie.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cookie: Option<CookieMatch>,
}

/// `PUT /v1/routes/{name}`: a route without its name.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteBody {
    /// Where matching requests go.
    pub subset: String,
    /// Match on a header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<HeaderMatch>,
    /// Match on a cookie.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cookie: Option<CookieMatch>,
}

/// A named mirror route: `percentage` of the requests (that match `header`, when given) are
/// copied to `subset`; the copies' responses are discarded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MirrorSpec {
    /// The mirror's name.
    pub name: String,
    /// Where copies go.
    #[serde(default = "default_mirror_subset")]
    pub subset: String,
    /// The share of requests copied, 0..=100.
    pub percentage: u32,
    /// Only requests that match this header are copied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<HeaderMatch>,
}

fn default_mirror_subset() -> String {
    CANARY.to_owned()
}

/// `PUT /v1/mirrors/{name}`: a mirror without its name.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MirrorBody {
    /// Where copies go (default canary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subset: Option<String>,
    /// The share copied, 0..=100.
    pub percentage: u32,
    /// Only requests that match this header are copied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<HeaderMatch>,
}
