//! The header fields a decision is told in: the IETF draft's `RateLimit-Policy` and
//! `RateLimit` (draft-ietf-httpapi-ratelimit-headers-11), the legacy
//! `X-RateLimit-Limit/Remaining/Reset`, and `Retry-After`.
//!
//! `RateLimit-Policy` names each limit and says its quota (`q`) and window (`w`, whole
//! seconds); it is the same on every response, so it is made once. `RateLimit` says,
//! for each limit, the permits remaining (`r`) and the seconds until it is whole again
//! (`t`), read in the decision itself.

use std::fmt::Write as _;
use std::time::Duration;

use http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};

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
    HeaderValue::from(seconds_rounded_up(retry_after).max(1))
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

/// What every response of one layer says the same way, made once.
#[derive(Debug, Clone)]
pub(crate) struct Fields {
    /// Each limit's name quoted, in the order of the decision's quotas (per key, then
    /// global), as the `RateLimit` field writes it.
    names: Vec<String>,
    /// The limits, for the legacy `X-RateLimit-Limit`.
    limits: Vec<u64>,
    /// `RateLimit-Policy`, or `None` when no limit reports a policy.
    policy: Option<HeaderValue>,
    legacy: bool,
}

impl Fields {
    /// The fields of `policies` (`None` for a limit that reports no policy); the legacy
    /// fields too when `legacy`. Names were checked with [`is_valid_policy_name`].
    pub(crate) fn new(policies: &[(String, Option<Policy>)], legacy: bool) -> Fields {
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
            let _ = write!(value, ";q={quota};w={window}");
        }
        Fields {
            names: policies.iter().map(|(name, _)| quoted(name)).collect(),
            limits: (policies.iter())
                .map(|(_, policy)| policy.map_or(0, |policy| policy.limit))
                .collect(),
            policy: HeaderValue::from_str(&value)
                .ok()
                .filter(|_| !value.is_empty()),
            legacy,
        }
    }

    /// Adds the fields of a decision whose quotas, per limit in order, are `quotas`.
    pub(crate) fn insert(&self, headers: &mut HeaderMap, quotas: &[Option<Quota>]) {
        if let Some(policy) = &self.policy {
            headers.insert(RATELIMIT_POLICY, policy.clone());
        }
        let mut value = Vec::with_capacity(96);
        // The legacy fields speak of one limit: the one with the least remaining.
        let mut binding: Option<(usize, Quota)> = None;
        for (index, (name, quota)) in self.names.iter().zip(quotas).enumerate() {
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
            if binding.map_or(true, |(_, least)| quota.remaining < least.remaining) {
                binding = Some((index, *quota));
            }
        }
        if !value.is_empty() {
            if let Ok(value) = HeaderValue::from_bytes(&value) {
                headers.insert(RATELIMIT, value);
            }
        }
        if let (true, Some((index, quota))) = (self.legacy, binding) {
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
            false,
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
            true,
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
            false,
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
