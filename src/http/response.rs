//! What a refused request is answered: the [`Refusal`], its default response (`429` with
//! `Retry-After`, `503`, `400`/`500`, or gRPC's `RESOURCE_EXHAUSTED`), and
//! [`RespondRefusal`], the hook for a response of your own.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};

use super::headers::insert_retry_after;
use super::key::KeyError;

const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");

/// gRPC's status codes the layer answers with.
const GRPC_INVALID_ARGUMENT: u16 = 3;
const GRPC_RESOURCE_EXHAUSTED: u16 = 8;
const GRPC_INTERNAL: u16 = 13;
const GRPC_UNAVAILABLE: u16 = 14;

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

/// A refused request, as the response hook sees it: why, the status the layer would
/// answer, and the header fields it would send (`Retry-After` and the `RateLimit`
/// fields).
#[derive(Debug, Clone)]
pub struct Refusal {
    kind: RefusalKind,
    headers: HeaderMap,
    /// The request's content type, when it is a gRPC call.
    grpc: Option<HeaderValue>,
}

impl Refusal {
    pub(crate) fn new(
        kind: RefusalKind,
        mut headers: HeaderMap,
        grpc: Option<HeaderValue>,
    ) -> Refusal {
        if let RefusalKind::Limited { retry_after } | RefusalKind::TooManyKeys { retry_after } =
            &kind
        {
            insert_retry_after(&mut headers, *retry_after);
        }
        Refusal {
            kind,
            headers,
            grpc,
        }
    }

    /// Why the request was refused.
    pub fn kind(&self) -> &RefusalKind {
        &self.kind
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

    /// The header fields the layer sends with it: `Retry-After` (when waiting helps) and
    /// the `RateLimit` fields (when a limit decided).
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
        let mut response = Response::new(B::default());
        let message = self.to_string();
        let (status, grpc_status) = (self.status(), self.grpc_status());
        *response.headers_mut() = self.headers;
        if let Some(content_type) = self.grpc {
            let headers = response.headers_mut();
            headers.insert(CONTENT_TYPE, content_type);
            headers.insert(GRPC_STATUS, HeaderValue::from(grpc_status));
            if let Ok(message) = HeaderValue::from_str(&grpc_message(&message)) {
                headers.insert(GRPC_MESSAGE, message);
            }
        } else {
            *response.status_mut() = status;
        }
        response
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            RefusalKind::Limited { retry_after } => {
                write!(f, "too many requests; retry after {retry_after:?}")
            }
            RefusalKind::NeverFits { requested, limit } => write!(
                f,
                "the request costs {requested}, more than the limit of {limit} ever admits"
            ),
            RefusalKind::TooManyKeys { retry_after } => {
                write!(f, "too many clients at once; retry after {retry_after:?}")
            }
            RefusalKind::NoKey(error) => write!(f, "no rate-limit key: {error}"),
            RefusalKind::Unavailable { reason } => {
                write!(f, "the rate limits could not decide: {reason}")
            }
        }
    }
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

    #[test]
    fn a_limited_http_request_gets_429_with_retry_after_rounded_up() {
        let refusal = Refusal::new(
            RefusalKind::Limited {
                retry_after: Duration::from_millis(1_200),
            },
            HeaderMap::new(),
            None,
        );
        let response: Response<()> = refusal.into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()["retry-after"], "2");
    }

    #[test]
    fn a_limited_grpc_call_gets_resource_exhausted() {
        let refusal = Refusal::new(
            RefusalKind::Limited {
                retry_after: Duration::from_secs(3),
            },
            HeaderMap::new(),
            Some(HeaderValue::from_static("application/grpc-web+proto")),
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
            "too many requests; retry after 3s"
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
            let refusal = Refusal::new(kind, HeaderMap::new(), None);
            assert_eq!(refusal.status(), status, "{refusal}");
            assert_eq!(refusal.grpc_status(), grpc, "{refusal}");
            assert_eq!(refusal.headers().contains_key("retry-after"), retry_after);
            let response: Response<()> = refusal.into_response();
            assert_eq!(response.status(), status);
        }
    }

    #[test]
    fn grpc_messages_are_percent_encoded() {
        assert_eq!(grpc_message("50% off\n"), "50%25 off%0A");
        assert_eq!(grpc_message("é"), "%C3%A9");
    }
}
