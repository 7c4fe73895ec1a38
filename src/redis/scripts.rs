//! Running a limiter's Lua script: one atomic round trip per decision, by the script's
//! hash, loading the script when Redis answers `NOSCRIPT`, and reading its reply.

use std::time::Duration;

use ::redis::aio::ConnectionManager;
use ::redis::{RedisResult, Script};

/// The helpers every script starts with: the server's clock and exact integer arithmetic.
const PRELUDE: &str = include_str!("lua/prelude.lua");

/// A limiter's script: the shared prelude, then the limiter's own `body`.
pub(crate) fn limiter_script(body: &str) -> Script {
    Script::new(&format!("{PRELUDE}{body}"))
}

/// What a script decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// The permits were taken.
    Granted,
    /// Nothing was taken; the same request could succeed after `retry_after`.
    Limited { retry_after: Duration },
}

/// Runs `script` on `key` with `arguments`, in one round trip while Redis holds the
/// script: `EVALSHA` by its hash, so the text crosses the network only when Redis answers
/// `NOSCRIPT` (after a restart or a `SCRIPT FLUSH`), and is then loaded and called again.
pub(crate) async fn decide(
    script: &Script,
    mut connection: ConnectionManager,
    key: &[u8],
    arguments: [u64; 3],
) -> RedisResult<Decision> {
    let mut invocation = script.key(key);
    for argument in arguments {
        invocation.arg(argument);
    }
    // Every script replies {1, 0} when it grants and {0, retry_after_ms} when it refuses.
    let (granted, retry_after_ms): (u64, u64) = invocation.invoke_async(&mut connection).await?;
    Ok(if granted == 1 {
        Decision::Granted
    } else {
        Decision::Limited {
            retry_after: Duration::from_millis(retry_after_ms),
        }
    })
}

// The integration tests' throwaway server; these tests only start and stop it.
#[cfg(test)]
#[path = "../../tests/common/redis_server.rs"]
#[allow(dead_code)]
mod test_server;

#[cfg(test)]
mod tests {
    use super::test_server::RedisServer;
    use super::*;

    /// Runs `expression` after the prelude in a real Redis; each value comes back as text.
    async fn evaluate(connection: &mut ConnectionManager, expressions: &[&str]) -> Vec<String> {
        let body = format!(
            "return {{{}}}",
            expressions
                .iter()
                .map(|expression| format!("integer_text({expression})"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        ::redis::cmd("EVAL")
            .arg(format!("{PRELUDE}{body}"))
            .arg(0)
            .query_async(connection)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn the_prelude_counts_exactly_up_to_2_pow_53() {
        let server = RedisServer::start();
        let client = ::redis::Client::open(server.url()).unwrap();
        let mut connection = ConnectionManager::new(client).await.unwrap();
        let largest = (1u64 << 53) - 1;
        let per_token = 3_600_000_000u64;
        let cases: Vec<(String, u64)> = vec![
            ("ceil_div(0, 7)".into(), 0),
            ("ceil_div(1, 7)".into(), 1),
            ("ceil_div(7, 7)".into(), 1),
            ("ceil_div(8, 7)".into(), 2),
            (format!("ceil_div({largest}, 1)"), largest),
            (format!("ceil_div({largest}, {})", largest - 1), 2),
            (format!("ceil_div({largest}, {largest})"), 1),
            // Quotients a hair above and below a whole number, near 2^53.
            (
                format!("ceil_div({}, {per_token})", 2_501_999 * per_token + 1),
                2_502_000,
            ),
            (
                format!("ceil_div({}, {per_token})", 2_501_999 * per_token - 1),
                2_501_999,
            ),
            ("millis_ceil(1)".into(), 1),
            ("millis_ceil(1000)".into(), 1),
            ("millis_ceil(1001)".into(), 2),
            (format!("{largest}"), largest),
            ("1700000000000001".into(), 1_700_000_000_000_001),
        ];
        let expressions: Vec<&str> = cases.iter().map(|(text, _)| text.as_str()).collect();
        let values = evaluate(&mut connection, &expressions).await;
        for ((expression, expected), value) in cases.iter().zip(&values) {
            assert_eq!(value, &expected.to_string(), "{expression}");
        }
    }

    #[tokio::test]
    async fn the_clock_is_the_servers_in_whole_microseconds() {
        let server = RedisServer::start();
        let client = ::redis::Client::open(server.url()).unwrap();
        let mut connection = ConnectionManager::new(client).await.unwrap();
        let (seconds, micros): (u64, u64) = ::redis::cmd("TIME")
            .query_async(&mut connection)
            .await
            .unwrap();
        let before = seconds * 1_000_000 + micros;
        let now: u64 = evaluate(&mut connection, &["now_micros()"]).await[0]
            .parse()
            .unwrap();
        assert!(
            now >= before && now - before < 60_000_000,
            "{before} then {now}"
        );
    }
}
