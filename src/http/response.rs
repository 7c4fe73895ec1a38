//! What a refused request is answered: the [`Refusal`], its default response (`429` with
//! `Retry-After`, `503`, `400`/`500`, or gRPC's `RESOURCE_EXHAUSTED`), its problem
//! details for a JSON API ([`ProblemJson`], RFC 9457), and [`RespondRefusal`], the hook
//! for a response of your own.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};

use super::headers::{insert_retry_after, retry_after_seconds};
use super::key::KeyError;
use crate::observe::http::RefusedBy;

const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");

/// gRPC's status codes the layer answers with.
const GRPC_INVALID_ARGUMENT: u16 = 3;
const GRPC_RESOURCE_EXHAUSTED: u16 = 8;
const GRPC_INTERNAL: u16 = 13;
const GRPC_UNAVAILABLE: u16 = 14;

/// RFC 9457's media type for problem details in JSON.
const PROBLEM_JSON: HeaderValue = HeaderValue::from_static("application/problem+json");

/// The problem types of the RateLimit draft (draft-11, section 5), whose registration
/// with IANA it requests: a quota spent, and a server short of room for the moment.
const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";
const REDUCED_CAPACITY: &str =
    "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity";

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefusalKind {
    /// A limit is spent for now: `429 Too Many Requests`, with `Retry-After`.
    Limited {
        /// How long until the same request could pass, if nobody else takes first.
        retry_after: Duration,
    },
    /// The request costs more than a limit ever admits at once: `429 Too Many Requests`
    /// without `Retry-After`, since waiting would not help.
    NeverFits {
        /// What the request costs.
        requested: u64,
        /// The most the limit admits at once.
        limit: u64,
    },
    /// The key is new and the layer holds as many busy keys as it may
    /// ([`max_keys`](super::RateLimitBuilder::max_keys)): `503 Service Unavailable`, with
    /// `Retry-After`.
    TooManyKeys {
        /// When to come back.
        retry_after: Duration,
    },
    /// The request has no key: the [`KeyError`]'s status (`400` or `500`).
    NoKey(KeyError),
    /// The limits could not decide (a closed bucket; Redis down under a fail-closed
    /// policy): `503 Service Unavailable`.
    Unavailable {
        /// Why.
        reason: String,
    },
}

/// A refused request, as the response hook sees it: why, which limit refused, the
/// status the layer would answer, and the header fields it would send (`Retry-After`
/// and the `RateLimit` fields).
#[derive(Debug, Clone)]
pub struct Refusal {
    kind: RefusalKind,
    by: RefusedBy,
    /// The name of the limit that refused, when one did.
    policy: Option<Arc<str>>,
    headers: HeaderMap,
    /// The request's content type, when it is a gRPC call.
    grpc: Option<HeaderValue>,
}

impl Refusal {
    pub(crate) fn new(
        kind: RefusalKind,
        by: RefusedBy,
        policy: Option<Arc<str>>,
        mut headers: HeaderMap,
        grpc: Option<HeaderValue>,
    ) -> Refusal {
        if let Some(retry_after) = kind.retry_after() {
            insert_retry_after(&mut headers, retry_after);
        }
        Refusal {
            kind,
            by,
            policy,
            headers,
            grpc,
        }
    }

    /// Why the request was refused.
    pub fn kind(&self) -> &RefusalKind {
        &self.kind
    }

    /// What refused it, in the words of the `limit` label of the layer's metrics:
    /// `"key"` (the client's own limit), `"global"`, `"too_many_keys"`, `"missing_key"`
    /// or `"unavailable"` (see [`name`](super::RateLimitBuilder::name)).
    pub fn refused_by(&self) -> &'static str {
        self.by.label()
    }

    /// The name of the limit that refused, as the `RateLimit` fields call it
    /// (`"client"` or `"global"` unless
    /// [`policy_names`](super::RateLimitBuilder::policy_names) says otherwise); `None`
    /// when no limit did (too many keys, no key, no answer).
    pub fn policy_name(&self) -> Option<&str> {
        self.policy.as_deref()
    }

    /// The HTTP status the layer answers with.
    pub fn status(&self) -> StatusCode {
        match &self.kind {
            RefusalKind::Limited { .. } | RefusalKind::NeverFits { .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
            RefusalKind::TooManyKeys { .. } | RefusalKind::Unavailable { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            RefusalKind::NoKey(error) => error.status(),
        }
    }

    /// The header fields the layer sends with it: `Retry-After` (when waiting helps), and
    /// the `RateLimit` fields when a limit decided and the layer sends them (the legacy
    /// ones when it asks for them).
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// Whether the request is a gRPC call (its `content-type` is `application/grpc`,
    /// with or without a suffix): those are answered with a gRPC status, not an HTTP one.
    pub fn is_grpc(&self) -> bool {
        self.grpc.is_some()
    }

    /// The gRPC status code the layer answers a gRPC call with: `RESOURCE_EXHAUSTED` (8)
    /// for a limit, `UNAVAILABLE` (14) when the limits could not decide,
    /// `INVALID_ARGUMENT` (3) or `INTERNAL` (13) for a request without a key.
    pub fn grpc_status(&self) -> u16 {
        match &self.kind {
            RefusalKind::Limited { .. }
            | RefusalKind::NeverFits { .. }
            | RefusalKind::TooManyKeys { .. } => GRPC_RESOURCE_EXHAUSTED,
            RefusalKind::Unavailable { .. } => GRPC_UNAVAILABLE,
            RefusalKind::NoKey(error) if error.status().is_client_error() => GRPC_INVALID_ARGUMENT,
            RefusalKind::NoKey(_) => GRPC_INTERNAL,
        }
    }

    /// The layer's response: [`status`](Refusal::status) with
    /// [`headers`](Refusal::headers) and an empty body; for a gRPC call, `200 OK` with
    /// `grpc-status` and `grpc-message` in the headers (a "trailers-only" response, as
    /// gRPC clients expect) and the request's own content type (gRPC-Web's included),
    /// and the same `Retry-After` and `RateLimit` fields.
    pub fn into_response<B: Default>(self) -> Response<B> {
        self.answer(B::default(), None)
    }

    /// The response a JSON API answers with: as [`into_response`](Refusal::into_response),
    /// with the [`problem_json`](Refusal::problem_json) as its body and
    /// `content-type: application/problem+json`. A gRPC call is answered as
    /// `into_response` answers it: its clients read the status, not a body.
    ///
    /// ```
    /// use token_bucket::http::{ClientIp, ProblemJson, RateLimitLayer};
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let layer = RateLimitLayer::builder(ClientIp::peer(), TokenBucket::new(Rate::per_second(5), 10)?)
    ///     .problem_json()
    ///     .build()?;
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    pub fn into_problem_json<B: From<String>>(self) -> Response<B> {
        if self.grpc.is_some() {
            return self.answer(B::from(String::new()), None);
        }
        let body = self.problem_json();
        self.answer(B::from(body), Some(PROBLEM_JSON))
    }

    /// The refusal as problem details (RFC 9457) in JSON:
    /// - `type`: the RateLimit draft's `quota-exceeded` for a limit spent or a request
    ///   it never admits, `temporary-reduced-capacity` for too many keys at once,
    ///   `about:blank` otherwise;
    /// - `title`: the status's reason phrase; `status`: the status;
    /// - `detail`: the [`Display`](fmt::Display) text, whose wait agrees with
    ///   `Retry-After`;
    /// - `violated-policies`: the name of the limit that refused, as the draft's problem
    ///   types carry it, when one did;
    /// - `refused-by`: what refused, as [`refused_by`](Refusal::refused_by) says;
    /// - `retry-after`: the seconds of `Retry-After`, when waiting helps.
    ///
    /// ```
    /// # use token_bucket::http::Refusal;
    /// # fn show(refusal: &Refusal) {
    /// // For a client over its limit, with Retry-After: 2:
    /// // {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",
    /// //  "title":"Too Many Requests","status":429,
    /// //  "detail":"the limit \"client\" is spent; retry after 2 seconds",
    /// //  "violated-policies":["client"],"refused-by":"key","retry-after":2}
    /// println!("{}", refusal.problem_json());
    /// # }
    /// ```
    pub fn problem_json(&self) -> String {
        let status = self.status();
        let problem_type = match &self.kind {
            RefusalKind::Limited { .. } | RefusalKind::NeverFits { .. } => QUOTA_EXCEEDED,
            RefusalKind::TooManyKeys { .. } => REDUCED_CAPACITY,
            RefusalKind::NoKey(_) | RefusalKind::Unavailable { .. } => "about:blank",
        };
        let mut json = String::with_capacity(256);
        json.push_str("{\"type\":");
        push_json_string(&mut json, problem_type);
        json.push_str(",\"title\":");
        push_json_string(&mut json, status.canonical_reason().unwrap_or("Refused"));
        json.push_str(&format!(",\"status\":{}", status.as_u16()));
        json.push_str(",\"detail\":");
        push_json_string(&mut json, &self.to_string());
        if let (Some(policy), RefusalKind::Limited { .. } | RefusalKind::NeverFits { .. }) =
            (&self.policy, &self.kind)
        {
            json.push_str(",\"violated-policies\":[");
            push_json_string(&mut json, policy);
            json.push(']');
        }
        json.push_str(",\"refused-by\":");
        push_json_string(&mut json, self.refused_by());
        if let Some(retry_after) = self.kind.retry_after() {
            json.push_str(&format!(
                ",\"retry-after\":{}",
                retry_after_seconds(retry_after)
            ));
        }
        json.push('}');
        json
    }

    /// The response with `body`, of `content_type` when it is not a gRPC call.
    fn answer<B>(self, body: B, content_type: Option<HeaderValue>) -> Response<B> {
        let mut response = Response::new(body);
        let Some(grpc_type) = self.grpc.clone() else {
            *response.status_mut() = self.status();
            *response.headers_mut() = self.headers;
            if let Some(content_type) = content_type {
                response.headers_mut().insert(CONTENT_TYPE, content_type);
            }
            return response;
        };
        // Only a gRPC answer carries a message: formatting it costs, and 429s can come
        // by the thousand.
        let message = grpc_message(&self.to_string());
        let grpc_status = self.grpc_status();
        let headers = response.headers_mut();
        *headers = self.headers;
        headers.insert(CONTENT_TYPE, grpc_type);
        headers.insert(GRPC_STATUS, HeaderValue::from(grpc_status));
        if let Ok(message) = HeaderValue::from_str(&message) {
            headers.insert(GRPC_MESSAGE, message);
        }
        response
    }
}

impl RefusalKind {
    /// How long until waiting helps, for a refusal that says so in `Retry-After`.
    fn retry_after(&self) -> Option<Duration> {
        match self {
            RefusalKind::Limited { retry_after } | RefusalKind::TooManyKeys { retry_after } => {
                Some(*retry_after)
            }
            _ => None,
        }
    }
}

/// A wait as the refusal's text says it: the whole seconds of `Retry-After`.
struct Seconds(Duration);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match retry_after_seconds(self.0) {
            1 => f.write_str("1 second"),
            seconds => write!(f, "{seconds} seconds"),
        }
    }
}

/// The limit a refusal names, quoted after a space (` "client"`), or nothing without a
/// name.
struct Named<'a>(Option<&'a str>);

impl fmt::Display for Named<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(name) => write!(f, " {name:?}"),
            None => Ok(()),
        }
    }
}

impl fmt::Display for Refusal {
    /// What happened, in words that agree with `Retry-After`: the wait is said in the
    /// same whole seconds, rounded up and at least one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let named = Named(self.policy.as_deref());
        match &self.kind {
            RefusalKind::Limited { retry_after } => write!(
                f,
                "the limit{named} is spent; retry after {}",
                Seconds(*retry_after)
            ),
            RefusalKind::NeverFits { requested, limit } => write!(
                f,
                "the request costs {requested}, more than the limit{named} ever admits at \
                 once ({limit})"
            ),
            RefusalKind::TooManyKeys { retry_after } => write!(
                f,
                "too many clients at once; retry after {}",
                Seconds(*retry_after)
            ),
            RefusalKind::NoKey(error) => write!(f, "no rate-limit key: {error}"),
            // The reason stays in the kind, for logs: a Redis error can name keys and
            // hosts a client has no business seeing.
            RefusalKind::Unavailable { .. } => f.write_str("the rate limits could not decide"),
        }
    }
}

/// Appends `text` as a JSON string: quoted, with quotes, backslashes and control
/// characters escaped (RFC 8259, section 7).
fn push_json_string(json: &mut String, text: &str) {
    json.push('"');
    for character in text.chars() {
        match character {
            '"' => json.push_str("\\\""),
            '\\' => json.push_str("\\\\"),
            '\n' => json.push_str("\\n"),
            '\r' => json.push_str("\\r"),
            '\t' => json.push_str("\\t"),
            control if u32::from(control) < 0x20 => {
                json.push_str(&format!("\\u{:04x}", u32::from(control)));
            }
            other => json.push(other),
        }
    }
    json.push('"');
}

/// `message` as gRPC's `grpc-message` field writes it: percent-encoded outside visible
/// ASCII and `%`.
fn grpc_message(message: &str) -> String {
    let mut encoded = String::with_capacity(message.len());
    for byte in message.bytes() {
        if (0x20..=0x7e).contains(&byte) && byte != b'%' {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// Builds the response to a refused request.
///
/// The layer's default is [`DefaultRefusal`]: [`Refusal::into_response`]. A closure
/// `Fn(Refusal) -> Response<B>` is one too, set with
/// [`on_refusal`](super::RateLimitBuilder::on_refusal): for a JSON body, say, or a
/// page of your own.
pub trait RespondRefusal<B>: Send + Sync + 'static {
    /// The response to `refusal`.
    fn respond(&self, refusal: Refusal) -> Response<B>;
}

/// The default response: [`Refusal::into_response`], with an empty body.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultRefusal;

impl<B: Default> RespondRefusal<B> for DefaultRefusal {
    fn respond(&self, refusal: Refusal) -> Response<B> {
        refusal.into_response()
    }
}

/// Refusals as problem details in JSON (RFC 9457), for a JSON API: see
/// [`Refusal::into_problem_json`], and
/// [`problem_json`](super::RateLimitBuilder::problem_json) to set it. The body type is
/// any `From<String>`, as axum's `Body` and http-body-util's `Full<Bytes>` are.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProblemJson;

impl<B: From<String>> RespondRefusal<B> for ProblemJson {
    fn respond(&self, refusal: Refusal) -> Response<B> {
        refusal.into_problem_json()
    }
}

/// A closure as the refusal hook (see [`on_refusal`](super::RateLimitBuilder::on_refusal)).
pub struct RefusalFn<F>(pub(crate) Arc<F>);

impl<F> Clone for RefusalFn<F> {
    fn clone(&self) -> RefusalFn<F> {
        RefusalFn(Arc::clone(&self.0))
    }
}

impl<F> fmt::Debug for RefusalFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RefusalFn")
    }
}

impl<B, F> RespondRefusal<B> for RefusalFn<F>
where
    F: Fn(Refusal) -> Response<B> + Send + Sync + 'static,
{
    fn respond(&self, refusal: Refusal) -> Response<B> {
        (self.0)(refusal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The client's limit, named "client", refusing a plain HTTP request.
    fn client_limit_spent_for(retry_after: Duration) -> Refusal {
        let kind = RefusalKind::Limited { retry_after };
        refused(kind, RefusedBy::Key, Some("client"), None)
    }

    /// A refusal of `kind` by `by`, named `policy`, of a gRPC call of `grpc`'s type.
    fn refused(
        kind: RefusalKind,
        by: RefusedBy,
        policy: Option<&str>,
        grpc: Option<&'static str>,
    ) -> Refusal {
        let grpc = grpc.map(HeaderValue::from_static);
        Refusal::new(kind, by, policy.map(Arc::from), HeaderMap::new(), grpc)
    }

    #[test]
    fn a_limited_http_request_gets_429_with_retry_after_rounded_up() {
        let refusal = client_limit_spent_for(Duration::from_millis(1_200));
        let response: Response<()> = refusal.into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()["retry-after"], "2");
    }

    #[test]
    fn a_limited_grpc_call_gets_resource_exhausted() {
        let refusal = refused(
            RefusalKind::Limited {
                retry_after: Duration::from_secs(3),
            },
            RefusedBy::Global,
            Some("global"),
            Some("application/grpc-web+proto"),
        );
        assert_eq!(refusal.grpc_status(), 8);
        let response: Response<()> = refusal.into_response();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["grpc-status"], "8");
        assert_eq!(
            response.headers()["content-type"],
            "application/grpc-web+proto"
        );
        assert_eq!(
            response.headers()["grpc-message"],
            r#"the limit "global" is spent; retry after 3 seconds"#
        );
    }

    #[test]
    fn each_refusal_has_its_status() {
        let cases = [
            (
                RefusalKind::NeverFits {
                    requested: 5,
                    limit: 4,
                },
                StatusCode::TOO_MANY_REQUESTS,
                8,
                false,
            ),
            (
                RefusalKind::TooManyKeys {
                    retry_after: Duration::from_secs(10),
                },
                StatusCode::SERVICE_UNAVAILABLE,
                8,
                true,
            ),
            (
                RefusalKind::NoKey(KeyError::NoPeerAddress),
                StatusCode::INTERNAL_SERVER_ERROR,
                13,
                false,
            ),
            (
                RefusalKind::NoKey(KeyError::MissingHeader {
                    name: HeaderName::from_static("x-api-key"),
                }),
                StatusCode::BAD_REQUEST,
                3,
                false,
            ),
            (
                RefusalKind::Unavailable {
                    reason: "closed".into(),
                },
                StatusCode::SERVICE_UNAVAILABLE,
                14,
                false,
            ),
        ];
        for (kind, status, grpc, retry_after) in cases {
            let refusal = refused(kind, RefusedBy::Key, None, None);
            assert_eq!(refusal.status(), status, "{refusal}");
            assert_eq!(refusal.grpc_status(), grpc, "{refusal}");
            assert_eq!(refusal.headers().contains_key("retry-after"), retry_after);
            let response: Response<()> = refusal.into_response();
            assert_eq!(response.status(), status);
        }
    }

    #[test]
    fn problem_details_say_the_type_the_limit_and_the_wait_of_retry_after() {
        let refusal = client_limit_spent_for(Duration::from_millis(1_200));
        assert_eq!(
            refusal.problem_json(),
            r#"{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"the limit \"client\" is spent; retry after 2 seconds","violated-policies":["client"],"refused-by":"key","retry-after":2}"#
        );
        let response: Response<String> = refusal.into_problem_json();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json"
        );
        assert_eq!(response.headers()["retry-after"], "2");

        let full = refused(
            RefusalKind::TooManyKeys {
                retry_after: Duration::from_millis(300),
            },
            RefusedBy::TooManyKeys,
            None,
            None,
        );
        assert_eq!(
            full.problem_json(),
            r#"{"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity","title":"Service Unavailable","status":503,"detail":"too many clients at once; retry after 1 second","refused-by":"too_many_keys","retry-after":1}"#
        );
    }

    #[test]
    fn problem_details_escape_what_json_must_escape() {
        // A key error of the user's own says its reason to the client, as written.
        let reason = "a \"quoted\" \\ path\nline\u{1}é".to_owned();
        let status = StatusCode::UNPROCESSABLE_ENTITY;
        let no_key = refused(
            RefusalKind::NoKey(KeyError::Other { status, reason }),
            RefusedBy::MissingKey,
            None,
            None,
        );
        assert_eq!(
            no_key.problem_json(),
            r#"{"type":"about:blank","title":"Unprocessable Entity","status":422,"detail":"no rate-limit key: a \"quoted\" \\ path\nline\u0001é","refused-by":"missing_key"}"#
        );
        // Limits that could not decide keep their reason from the client.
        let unavailable = refused(
            RefusalKind::Unavailable {
                reason: "redis://10.0.0.5:6379 refused".into(),
            },
            RefusedBy::Unavailable,
            None,
            None,
        );
        assert_eq!(
            unavailable.problem_json(),
            r#"{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"the rate limits could not decide","refused-by":"unavailable"}"#
        );
        let never = refused(
            RefusalKind::NeverFits {
                requested: 5,
                limit: 4,
            },
            RefusedBy::Global,
            Some(r#"say "hi""#),
            None,
        );
        assert_eq!(
            never.problem_json(),
            r#"{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"the request costs 5, more than the limit \"say \\\"hi\\\"\" ever admits at once (4)","violated-policies":["say \"hi\""],"refused-by":"global"}"#
        );
    }

    #[test]
    fn a_grpc_call_is_answered_with_its_status_not_a_json_body() {
        let refusal = refused(
            RefusalKind::Limited {
                retry_after: Duration::from_secs(3),
            },
            RefusedBy::Key,
            Some("client"),
            Some("application/grpc"),
        );
        let response: Response<String> = refusal.into_problem_json();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["grpc-status"], "8");
        assert_eq!(response.headers()["content-type"], "application/grpc");
        assert_eq!(response.body(), "");
    }

    #[test]
    fn grpc_messages_are_percent_encoded() {
        assert_eq!(grpc_message("50% off\n"), "50%25 off%0A");
        assert_eq!(grpc_message("é"), "%C3%A9");
    }
}
