//! The header fields a decision is told in: the IETF draft's `RateLimit-Policy` and
//! `RateLimit` (draft-ietf-httpapi-ratelimit-headers-11), the legacy
//! `X-RateLimit-Limit/Remaining/Reset`, and `Retry-After`.
//!
//! `RateLimit-Policy` names each limit and says its quota (`q`), the quota's unit when
//! it is not requests (`qu`) and its window (`w`, whole seconds); it is the same on every
//! response, so it is made once. `RateLimit` says,
//! for each limit, the permits remaining (`r`) and the seconds until it is whole again
//! (`t`), read in the decision itself.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};

use crate::observe::http::RefusedBy;
use crate::quota::{Policy, Quota};

/// `RateLimit-Policy`: each limit's name, quota and window.
pub(crate) const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`: each limit's remaining permits and seconds until it is whole again.
pub(crate) const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// The legacy fields, opt-in: the limit that binds first.
const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// Whole seconds, rounded up: a client that waits that long is never early. `Duration::MAX`
/// (the crate's "never") saturates at `u64::MAX` seconds.
pub(crate) fn seconds_rounded_up(duration: Duration) -> u64 {
    (duration.as_secs()).saturating_add(u64::from(duration.subsec_nanos() > 0))
}

/// The largest Integer a Structured Field carries (RFC 9651, 3.3.1): fifteen digits. The
/// draft's `q`, `w`, `r` and `t` are such Integers, and a field with a longer one is
/// malformed as a whole, so each is said at most this: a quota or a remainder told
/// short, a time told as 31 million years, rather than a field a client must ignore.
const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

/// `Retry-After` for a refusal that could pass after `retry_after`: whole seconds,
/// rounded up, and at least 1, since a refusal told to come back at once would be refused
/// again by the same line.
pub(crate) fn retry_after_value(retry_after: Duration) -> HeaderValue {
    HeaderValue::from(retry_after_seconds(retry_after))
}

/// The seconds `Retry-After` says for `retry_after`, which a refusal's text says too.
pub(crate) fn retry_after_seconds(retry_after: Duration) -> u64 {
    seconds_rounded_up(retry_after).max(1)
}

/// Whether `name` can stand as a policy's name: a Structured Field string holds visible
/// ASCII and spaces. Quotes and backslashes are escaped when written.
pub(crate) fn is_valid_policy_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|byte| (0x20..=0x7e).contains(&byte))
}

/// `name` as a Structured Field string: quoted, its quotes and backslashes escaped.
fn quoted(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    out.push('"');
    for character in name.chars() {
        if matches!(character, '"' | '\\') {
            out.push('\\');
        }
        out.push(character);
    }
    out.push('"');
    out
}

/// Appends `number` in decimal. By hand: `core::fmt` cost most of a request's header
/// work, and these fields are written on every response.
fn push_decimal(out: &mut Vec<u8>, mut number: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (number % 10) as u8;
        number /= 10;
        if number == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[start..]);
}

/// The unit a layer's quotas are counted in: the `qu` parameter of `RateLimit-Policy`
/// (draft-11, section 3.1.2), set with
/// [`quota_unit`](super::RateLimitBuilder::quota_unit) beside a
/// [`cost`](super::RateLimitBuilder::cost) function.
///
/// ```
/// use token_bucket::http::QuotaUnit;
///
/// assert_eq!(QuotaUnit::ContentBytes.as_str(), "content-bytes");
/// assert_eq!(QuotaUnit::Custom("llm-tokens".into()).as_str(), "llm-tokens");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuotaUnit {
    /// `requests`: each request counts one, the draft's default, so never sent.
    Requests,
    /// `content-bytes`: the bytes of the request's content.
    ContentBytes,
    /// `concurrent-requests`: requests under way at once. True only of a cost that
    /// stands for requests in flight, which none of the crate's limiters counts.
    ConcurrentRequests,
    /// A unit of your own, such as `llm-tokens`, in the characters of a Structured Field
    /// token (RFC 9651, 3.3.4): a letter or `*`, then letters, digits and
    /// ``!#$%&'*+-.^_`|~:/``. Sent, like the others, as an sf-string.
    Custom(String),
}

impl QuotaUnit {
    /// The unit as `qu` says it.
    pub fn as_str(&self) -> &str {
        match self {
            QuotaUnit::Requests => "requests",
            QuotaUnit::ContentBytes => "content-bytes",
            QuotaUnit::ConcurrentRequests => "concurrent-requests",
            QuotaUnit::Custom(unit) => unit,
        }
    }

    /// Whether the unit is in a Structured Field token's characters, as the draft's
    /// registered units are.
    pub(crate) fn is_valid(&self) -> bool {
        let mut bytes = self.as_str().bytes();
        let first_ok = bytes
            .next()
            .is_some_and(|first| first.is_ascii_alphabetic() || first == b'*');
        first_ok
            && bytes
                .all(|byte| byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(&byte))
    }
}

/// Which header fields a layer sends with each decided response.
#[derive(Debug, Clone)]
pub(crate) struct FieldSettings {
    /// `RateLimit-Policy` and `RateLimit` (on by default).
    pub(crate) standard: bool,
    /// The legacy `X-RateLimit-*` (off by default).
    pub(crate) legacy: bool,
    /// The `qu` of every policy, when its requests cost other than one each.
    pub(crate) unit: Option<QuotaUnit>,
}

/// What every response of one layer says the same way, made once.
#[derive(Debug, Clone)]
pub(crate) struct Fields {
    /// Each limit's name quoted, in the order of the decision's quotas (per key, then
    /// global), as the `RateLimit` field writes it.
    names: Vec<String>,
    /// Each limit's name as given, for a refusal to say which one refused.
    policy_names: Vec<Arc<str>>,
    /// The limits, for the legacy `X-RateLimit-Limit`.
    limits: Vec<u64>,
    /// `RateLimit-Policy`, or `None` when no limit reports a policy.
    policy: Option<HeaderValue>,
    standard: bool,
    legacy: bool,
}

impl Fields {
    /// The fields of `policies` (`None` for a limit that reports no policy), as
    /// `settings` says. Names were checked with [`is_valid_policy_name`], the unit with
    /// [`QuotaUnit::is_valid`].
    pub(crate) fn new(policies: &[(String, Option<Policy>)], settings: &FieldSettings) -> Fields {
        let mut value = String::new();
        for (name, policy) in policies {
            let Some(policy) = policy else { continue };
            if !value.is_empty() {
                value.push_str(", ");
            }
            value.push_str(&quoted(name));
            // `w` is whole seconds, at least 1: a window under a second is said as 1.
            let window = seconds_rounded_up(policy.window).clamp(1, SF_INTEGER_MAX);
            let quota = policy.limit.min(SF_INTEGER_MAX);
            let _ = write!(value, ";q={quota}");
            // The draft's default unit goes unsaid.
            if let Some(unit) =
                (settings.unit.as_ref()).filter(|unit| **unit != QuotaUnit::Requests)
            {
                let _ = write!(value, ";qu={}", quoted(unit.as_str()));
            }
            let _ = write!(value, ";w={window}");
        }
        Fields {
            names: policies.iter().map(|(name, _)| quoted(name)).collect(),
            policy_names: policies
                .iter()
                .map(|(name, _)| Arc::from(&**name))
                .collect(),
            limits: (policies.iter())
                .map(|(_, policy)| policy.map_or(0, |policy| policy.limit))
                .collect(),
            policy: HeaderValue::from_str(&value)
                .ok()
                .filter(|_| !value.is_empty()),
            standard: settings.standard,
            legacy: settings.legacy,
        }
    }

    /// The name of the limit that `by` says refused, when a limit did.
    pub(crate) fn policy_name(&self, by: RefusedBy) -> Option<Arc<str>> {
        let index = match by {
            RefusedBy::Key => 0,
            RefusedBy::Global => 1,
            _ => return None,
        };
        self.policy_names.get(index).cloned()
    }

    /// Whether any field is sent: when none is, a decision's quotas need not be kept.
    pub(crate) fn any(&self) -> bool {
        self.standard || self.legacy
    }

    /// Adds the fields of a decision whose quotas, per limit in order, are `quotas`.
    pub(crate) fn insert(&self, headers: &mut HeaderMap, quotas: &[Option<Quota>]) {
        if !self.standard {
            self.insert_legacy(headers, quotas);
            return;
        }
        if let Some(policy) = &self.policy {
            headers.insert(RATELIMIT_POLICY, policy.clone());
        }
        let mut value = Vec::with_capacity(96);
        for (name, quota) in self.names.iter().zip(quotas) {
            let Some(quota) = quota else { continue };
            if !value.is_empty() {
                value.extend_from_slice(b", ");
            }
            value.extend_from_slice(name.as_bytes());
            value.extend_from_slice(b";r=");
            push_decimal(&mut value, quota.remaining.min(SF_INTEGER_MAX));
            value.extend_from_slice(b";t=");
            let whole_after = seconds_rounded_up(quota.full_after);
            push_decimal(&mut value, whole_after.min(SF_INTEGER_MAX));
        }
        if !value.is_empty() {
            if let Ok(value) = HeaderValue::from_bytes(&value) {
                headers.insert(RATELIMIT, value);
            }
        }
        self.insert_legacy(headers, quotas);
    }

    /// Adds the legacy fields, when the layer sends them: they speak of one limit, the
    /// one with the least remaining.
    fn insert_legacy(&self, headers: &mut HeaderMap, quotas: &[Option<Quota>]) {
        if !self.legacy {
            return;
        }
        let binding = (quotas.iter().enumerate())
            .filter_map(|(index, quota)| Some((index, (*quota)?)))
            .min_by_key(|(_, quota)| quota.remaining);
        if let Some((index, quota)) = binding {
            headers.insert(X_RATELIMIT_LIMIT, HeaderValue::from(self.limits[index]));
            headers.insert(X_RATELIMIT_REMAINING, HeaderValue::from(quota.remaining));
            headers.insert(
                X_RATELIMIT_RESET,
                HeaderValue::from(seconds_rounded_up(quota.full_after)),
            );
        }
    }
}

/// Adds `Retry-After` for a refusal that could pass after `retry_after`.
pub(crate) fn insert_retry_after(headers: &mut HeaderMap, retry_after: Duration) {
    headers.insert(RETRY_AFTER, retry_after_value(retry_after));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(legacy: bool) -> FieldSettings {
        FieldSettings {
            standard: true,
            legacy,
            unit: None,
        }
    }

    fn policy(limit: u64, window: Duration) -> Option<Policy> {
        Some(Policy { limit, window })
    }

    fn text(headers: &HeaderMap, name: &str) -> Option<String> {
        let value = headers.get(name)?;
        Some(value.to_str().expect("visible ASCII").to_owned())
    }

    #[test]
    fn decimals_are_written_whole() {
        for number in [0, 7, 10, 99, 1_000_001, u64::MAX] {
            let mut out = b"x".to_vec();
            push_decimal(&mut out, number);
            assert_eq!(out, format!("x{number}").into_bytes());
        }
    }

    #[test]
    fn seconds_are_rounded_up_and_never_early() {
        assert_eq!(seconds_rounded_up(Duration::ZERO), 0);
        assert_eq!(seconds_rounded_up(Duration::from_nanos(1)), 1);
        assert_eq!(seconds_rounded_up(Duration::from_secs(3)), 3);
        assert_eq!(seconds_rounded_up(Duration::from_millis(3_001)), 4);
        assert_eq!(retry_after_value(Duration::ZERO), HeaderValue::from(1));
        assert_eq!(
            retry_after_value(Duration::from_millis(59_999)),
            HeaderValue::from(60)
        );
    }

    #[test]
    fn both_fields_name_each_limit_in_order() {
        let fields = Fields::new(
            &[
                ("client".into(), policy(10, Duration::from_secs(10))),
                ("global".into(), policy(100, Duration::from_millis(100))),
            ],
            &settings(false),
        );
        let mut headers = HeaderMap::new();
        let quotas = [
            Some(Quota {
                remaining: 9,
                full_after: Duration::from_millis(9_500),
            }),
            Some(Quota {
                remaining: 0,
                full_after: Duration::ZERO,
            }),
        ];
        fields.insert(&mut headers, &quotas);
        assert_eq!(
            text(&headers, "ratelimit-policy").as_deref(),
            Some(r#""client";q=10;w=10, "global";q=100;w=1"#)
        );
        assert_eq!(
            text(&headers, "ratelimit").as_deref(),
            Some(r#""client";r=9;t=10, "global";r=0;t=0"#)
        );
        assert_eq!(headers.get("x-ratelimit-limit"), None);
    }

    #[test]
    fn legacy_fields_speak_of_the_limit_with_the_least_remaining() {
        let fields = Fields::new(
            &[
                ("a".into(), policy(10, Duration::from_secs(10))),
                ("b".into(), policy(100, Duration::from_secs(1))),
            ],
            &settings(true),
        );
        let mut headers = HeaderMap::new();
        let quotas = [
            Some(Quota {
                remaining: 7,
                full_after: Duration::from_secs(3),
            }),
            Some(Quota {
                remaining: 2,
                full_after: Duration::from_millis(980),
            }),
        ];
        fields.insert(&mut headers, &quotas);
        assert_eq!(text(&headers, "x-ratelimit-limit").as_deref(), Some("100"));
        assert_eq!(
            text(&headers, "x-ratelimit-remaining").as_deref(),
            Some("2")
        );
        assert_eq!(text(&headers, "x-ratelimit-reset").as_deref(), Some("1"));
    }

    #[test]
    fn names_are_escaped_and_unreported_limits_left_out() {
        let fields = Fields::new(
            &[
                (r#"say "hi"\"#.into(), policy(1, Duration::from_secs(2))),
                ("mine".into(), None),
            ],
            &settings(false),
        );
        let mut headers = HeaderMap::new();
        fields.insert(&mut headers, &[None, None]);
        assert_eq!(
            text(&headers, "ratelimit-policy").as_deref(),
            Some(r#""say \"hi\"\\";q=1;w=2"#)
        );
        assert_eq!(headers.get("ratelimit"), None);
        assert!(is_valid_policy_name("per client"));
        assert!(!is_valid_policy_name(""));
        assert!(!is_valid_policy_name("tab\there"));
        assert!(!is_valid_policy_name("é"));
    }
}
