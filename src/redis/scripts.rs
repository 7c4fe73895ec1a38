//! Running the limiters' Lua scripts: one atomic round trip per decision, over one key or
//! several, by the script's hash, sending the script's text when Redis answers `NOSCRIPT`,
//! and reading its reply.
//!
//! Every script is put together from the same pieces: the prelude (the server's clock,
//! exact integer helpers), algorithms, each as a `<tag>_decide` step that writes nothing
//! and a `<tag>_commit` step, and a decision. A decision on several keys runs the script
//! with all three algorithms and the loop that decides every key and commits them all or
//! none; one on one key, the script with only its algorithm and the same decision without
//! the loop. (Redis runs a script's whole text on every call: each function it defines
//! and each table it makes costs every call. The one-key decision costs Redis a tenth
//! fewer instructions than the loop over one key, as `benches/script_cost.sh callgrind`
//! measures.)

use std::sync::LazyLock;
use std::time::Duration;

use ::redis::aio::ConnectionLike;
use ::redis::{Cmd, ErrorKind, FromRedisValue, RedisResult, Script, ServerErrorKind, ToRedisArgs};

use super::algorithm::sealed::Algorithm;
use super::{FixedWindowScript, SlidingLogScript, TokenBucketScript};

/// The helpers every algorithm uses: the server's clock and exact integer arithmetic.
const PRELUDE: &str = include_str!("lua/prelude.lua");

/// The decision on one key, after its algorithm and the line binding its steps.
const ONE_KEY_DECISION: &str = include_str!("lua/one_key.lua");

/// The decision over several keys, after every algorithm.
const SEVERAL_KEYS_DECISION: &str = include_str!("lua/several_keys.lua");

/// Each algorithm's tag and Lua source.
const ALGORITHMS: [(&str, &str); 3] = [
    (
        <TokenBucketScript as Algorithm>::TAG,
        include_str!("lua/token_bucket.lua"),
    ),
    (
        <FixedWindowScript as Algorithm>::TAG,
        include_str!("lua/fixed_window.lua"),
    ),
    (
        <SlidingLogScript as Algorithm>::TAG,
        include_str!("lua/sliding_log.lua"),
    ),
];

/// A script's text and its SHA-1 hash, by which Redis knows it once it has run it.
struct LuaScript {
    text: String,
    hash: String,
}

impl LuaScript {
    /// The prelude, then `sources`.
    fn of<'a>(sources: impl IntoIterator<Item = &'a str>) -> LuaScript {
        let mut text = String::from(PRELUDE);
        text.extend(sources);
        let hash = Script::new(&text).get_hash().to_owned();
        LuaScript { text, hash }
    }
}

/// For a decision on one key: one script per algorithm, in the order of [`ALGORITHMS`],
/// binding the algorithm's steps as the names the decision calls.
static ONE_KEY: LazyLock<[LuaScript; 3]> = LazyLock::new(|| {
    ALGORITHMS.map(|(tag, source)| {
        let steps = format!("local decide, commit = {tag}_decide, {tag}_commit\n");
        LuaScript::of([source, steps.as_str(), ONE_KEY_DECISION])
    })
});

/// For a decision on several keys: every algorithm.
static SEVERAL_KEYS: LazyLock<LuaScript> = LazyLock::new(|| {
    let sources = ALGORITHMS.map(|(_, source)| source);
    LuaScript::of(sources.into_iter().chain([SEVERAL_KEYS_DECISION]))
});

/// Leases of a token bucket's tokens: taking a batch, giving back what was not used.
static LEASE: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::of([ALGORITHMS[0].1, include_str!("lua/lease.lua")]));

/// The script for a decision on `keys` keys, the first of algorithm `first_tag`.
fn script_for(keys: usize, first_tag: &str) -> &'static LuaScript {
    let algorithm = ALGORITHMS.iter().position(|(tag, _)| *tag == first_tag);
    match algorithm {
        Some(index) if keys == 1 => &ONE_KEY[index],
        _ => &SEVERAL_KEYS,
    }
}

/// What a decision script answered: whether it took, and each key's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reply {
    /// Whether the permits were taken, from every key (always, for zero permits: nothing
    /// was asked for, and nothing written).
    pub(crate) granted: bool,
    /// Each key's state, in the order of the call's keys: after the take when granted,
    /// else as it was.
    pub(crate) keys: Vec<KeyState>,
}

/// One key's state in a [`Reply`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyState {
    /// What it has left, in its algorithm's units (a bucket's parts of a token, a
    /// window's permits).
    pub(crate) left: u64,
    /// How long until it is whole again (a bucket full, a window or log empty), in whole
    /// microseconds of the server's clock, rounded up; zero when it is whole now.
    pub(crate) whole_after: Duration,
    /// How long until it would allow the request, in whole milliseconds rounded up: zero
    /// when it allows it now.
    pub(crate) wait: Duration,
}

impl Reply {
    /// Reads the script's reply for a call on `keys` keys: `{granted, then for each key:
    /// left, whole_after_us, wait_ms}` (see `lua/one_key.lua`).
    fn parse(values: &[i64], keys: usize) -> RedisResult<Reply> {
        let unexpected = || {
            ::redis::RedisError::from((
                ErrorKind::UnexpectedReturnType,
                "a rate limiter script's reply is not what the limiter sent it for",
                format!("{values:?} for {keys} keys"),
            ))
        };
        let (&granted, states) = values.split_first().ok_or_else(unexpected)?;
        if states.len() != 3 * keys || !(granted == 0 || granted == 1) {
            return Err(unexpected());
        }
        let mut parsed = Vec::with_capacity(keys);
        for state in states.chunks_exact(3) {
            let [left, whole_after, wait] = [state[0], state[1], state[2]];
            let (Ok(whole_after), Ok(wait)) = (u64::try_from(whole_after), u64::try_from(wait))
            else {
                return Err(unexpected());
            };
            parsed.push(KeyState {
                // Below zero only for a window counting more than this limiter's limit
                // (another limiter's settings on its key): nothing is left.
                left: u64::try_from(left).unwrap_or(0),
                whole_after: Duration::from_micros(whole_after),
                wait: Duration::from_millis(wait),
            });
        }
        Ok(Reply {
            granted: granted == 1,
            keys: parsed,
        })
    }

    /// `None` when granted, else how long until the same request could succeed: the
    /// latest of the keys' waits, when all would allow it.
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        if self.granted {
            return None;
        }
        Some(
            self.keys
                .iter()
                .map(|key| key.wait)
                .max()
                .unwrap_or_default(),
        )
    }
}

/// One key of a decision: the key, its algorithm's tag and the algorithm's arguments.
pub(crate) struct KeyCall<'a> {
    pub(crate) key: &'a str,
    pub(crate) tag: &'static str,
    pub(crate) arguments: [u64; 3],
}

/// A decision over some keys, put together and ready to be sent over any connection: the
/// script, and what follows its hash or text in `EVALSHA` and `EVAL` (the number of keys,
/// the keys, the arguments).
pub(crate) struct ScriptCall {
    script: &'static LuaScript,
    /// How many keys it decides on.
    keys: usize,
    rest: Vec<Vec<u8>>,
}

impl ScriptCall {
    /// The call deciding over `keys` (at least one, each once). It holds its own copy of
    /// them, so its future borrows nothing.
    pub(crate) fn new<'a>(keys: impl ExactSizeIterator<Item = KeyCall<'a>>) -> ScriptCall {
        let mut keys = keys.peekable();
        let first_tag = keys.peek().map_or("", |first| first.tag);
        let count = keys.len();
        let script = script_for(count, first_tag);
        let mut names = Vec::new();
        let mut arguments = Vec::new();
        keys.len().write_redis_args(&mut names);
        for KeyCall {
            key,
            tag,
            arguments: numbers,
        } in keys
        {
            key.write_redis_args(&mut names);
            tag.write_redis_args(&mut arguments);
            for number in numbers {
                number.write_redis_args(&mut arguments);
            }
        }
        names.append(&mut arguments);
        ScriptCall {
            script,
            keys: count,
            rest: names,
        }
    }

    /// A lease call on the token bucket at `keys[0]`: `keys`, `action` and `numbers` as
    /// `lease.lua` reads them.
    pub(crate) fn lease(keys: &[&str], action: &str, numbers: &[u64]) -> ScriptCall {
        let mut rest = Vec::new();
        keys.len().write_redis_args(&mut rest);
        for key in keys {
            key.write_redis_args(&mut rest);
        }
        action.write_redis_args(&mut rest);
        for number in numbers {
            number.write_redis_args(&mut rest);
        }
        ScriptCall {
            script: &LEASE,
            keys: keys.len(),
            rest,
        }
    }

    /// `EVALSHA` or `EVAL` of the script (its hash or its text).
    fn command(&self, name: &str, script: &str) -> Cmd {
        let mut command = ::redis::cmd(name);
        command.arg(script).arg(&self.rest[..]);
        command
    }

    /// Decides in one round trip while Redis holds the script: `EVALSHA` by its hash, so
    /// the text crosses the network only when Redis answers `NOSCRIPT` (after a restart,
    /// a `SCRIPT FLUSH`, or on a cluster node, such as a replica just promoted, that has
    /// not run it yet). The text is then sent with `EVAL`, which runs it and keeps it, on
    /// the node that answered: routed by the keys like `EVALSHA`, not loaded on every
    /// node as `SCRIPT LOAD` would be on a cluster (where one node down would fail it).
    ///
    /// A call that comes back redirected (`ASK`, `MOVED`) or told to try again
    /// (`TRYAGAIN`) was not run, so it is made again, a little later each time (from
    /// 1 ms, doubling, up to [`LONGEST_PAUSE`]): after `ASK` or `TRYAGAIN`, which last only
    /// while a slot migrates, until the caller's timeout ends it; after `MOVED`, up to
    /// [`MOVED_TRIES`] times in all. A cluster connection follows redirections itself, but
    /// can run out of its own retries during a slot migration: under concurrent traffic
    /// on one connection, another request can come between its `ASKING` and the command
    /// it was for, which the target then answers with `MOVED`, back to the source.
    pub(crate) async fn run<C: ConnectionLike>(self, connection: C) -> RedisResult<Reply> {
        let keys = self.keys;
        let values: Vec<i64> = self.reply(connection).await?;
        Reply::parse(&values, keys)
    }

    /// The script's reply, read as `T`, made again as [`run`](Self::run) says.
    pub(crate) async fn reply<T: FromRedisValue, C: ConnectionLike>(
        self,
        mut connection: C,
    ) -> RedisResult<T> {
        let mut pause = Duration::from_millis(1);
        let mut moved = 0;
        loop {
            match self.reply_once(&mut connection).await {
                Err(error) if again(&error, &mut moved) => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(LONGEST_PAUSE);
                }
                decided => return decided,
            }
        }
    }

    /// One try of [`reply`](Self::reply).
    async fn reply_once<T: FromRedisValue, C: ConnectionLike>(
        &self,
        connection: &mut C,
    ) -> RedisResult<T> {
        let by_hash = self
            .command("EVALSHA", &self.script.hash)
            .query_async(connection)
            .await;
        match by_hash {
            Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.command("EVAL", &self.script.text)
                    .query_async(connection)
                    .await
            }
            reply => reply,
        }
    }
}

/// The longest pause of [`ScriptCall::run`] between two tries of a call not run.
const LONGEST_PAUSE: Duration = Duration::from_millis(16);

/// How many times [`ScriptCall::run`] tries a call that keeps coming back `MOVED`: not
/// more, so that a connection that can never follow it (a single server's, to one node
/// of a cluster) gets its `MOVED` back within 15 ms, as
/// [`RedisLimitError::Unavailable`], rather than waiting out its timeout.
///
/// [`RedisLimitError::Unavailable`]: super::RedisLimitError::Unavailable
const MOVED_TRIES: u32 = 5;

/// Whether `error` says the script was not run, and it should be tried again: sent on
/// by `ASK` or told `TRYAGAIN` (its slot is migrating), or sent on by `MOVED`, `moved`
/// counting the tries that were.
fn again(error: &::redis::RedisError, moved: &mut u32) -> bool {
    match error.kind() {
        ErrorKind::Server(ServerErrorKind::Ask | ServerErrorKind::TryAgain) => true,
        ErrorKind::Server(ServerErrorKind::Moved) => {
            *moved += 1;
            *moved < MOVED_TRIES
        }
        _ => false,
    }
}

// The integration tests' throwaway server; the unit tests only start and stop it.
#[cfg(test)]
#[path = "../../tests/common/redis_server.rs"]
#[allow(dead_code)]
pub(crate) mod test_server;

#[cfg(test)]
mod tests {
    use super::test_server::RedisServer;
    use super::*;
    use ::redis::aio::ConnectionManager;

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

    /// Runs algorithm `tag`'s `decide` in a real Redis at the instant `now`, of the test's
    /// choosing, on the key `k` as `setup` leaves it: its wait in microseconds (-1 when it
    /// allows), what it has left, and how many microseconds until it is whole; then, when
    /// it allows more than nothing, its `commit`, and what that says: how many
    /// microseconds until the key is whole after the take (else -1).
    async fn decide_at(
        connection: &mut ConnectionManager,
        tag: &str,
        setup: &[&[&str]],
        now: u64,
        arguments: [u64; 3],
    ) -> [i64; 4] {
        let mut commands = ::redis::pipe();
        commands.cmd("DEL").arg("k");
        for command in setup {
            commands.cmd(command[0]).arg("k").arg(&command[1..]);
        }
        commands.exec_async(connection).await.unwrap();
        let (_, source) = ALGORITHMS.iter().find(|(known, _)| *known == tag).unwrap();
        let body = format!(
            "local now, asked = tonumber(ARGV[1]), tonumber(ARGV[4])\n\
             local wait, left, full, x, y, z = {tag}_decide(KEYS[1], now, \
             tonumber(ARGV[2]), tonumber(ARGV[3]), asked)\n\
             local after = -1\n\
             if not wait and asked > 0 then after = {tag}_commit(KEYS[1], now, x, y, z) end\n\
             return {{wait or -1, left, full, after}}"
        );
        let [a, b, asked] = arguments;
        let reply: Vec<i64> = ::redis::cmd("EVAL")
            .arg(format!("{PRELUDE}{source}{body}"))
            .arg(1)
            .arg("k")
            .arg(now)
            .arg(a)
            .arg(b)
            .arg(asked)
            .query_async(connection)
            .await
            .unwrap();
        reply.try_into().unwrap()
    }

    /// An algorithm's tag, the commands that set its key up, the instant, its
    /// arguments, and what [`decide_at`] should answer.
    type Case<'a> = (&'a str, &'a [&'a [&'a str]], u64, [u64; 3], [i64; 4]);

    #[tokio::test]
    async fn each_algorithm_decides_and_reports_the_state_it_read_at_its_instant() {
        let server = RedisServer::start();
        let client = ::redis::Client::open(server.url()).unwrap();
        let mut connection = ConnectionManager::new(client).await.unwrap();
        let connection = &mut connection;
        // A bucket of 10 tokens of 1,000 parts, gaining one part a microsecond.
        let bucket = |asked| [10_000, 1, asked];
        let holding = [&["HSET", "parts", "4000", "time", "1000000"][..]];
        // Three permits, named as sl_commit names them: their microsecond, an index.
        let logged = [&[
            "ZADD",
            "1000000",
            "1000000:0",
            "1200000",
            "1200000:0",
            "1300000",
            "1300000:0",
        ][..]];
        let cases: Vec<Case<'_>> = vec![
            // Untouched: full.
            ("tb", &[], 1_000_000, bucket(0), [-1, 10_000, 0, -1]),
            // 4,500 parts 500 µs on: 5,000 wait 500 µs; full in 5,500.
            (
                "tb",
                &holding,
                1_000_500,
                bucket(5_000),
                [500, 4_500, 5_500, -1],
            ),
            (
                "tb",
                &holding,
                1_000_500,
                bucket(4_000),
                [-1, 4_500, 5_500, 9_500],
            ),
            // Reserved ahead, until 400 µs from now: nothing left until then.
            (
                "tb",
                &[&["HSET", "parts", "2000", "time", "1000900"]],
                1_000_500,
                bucket(1_000),
                [400, 0, 8_400, -1],
            ),
            // 3 parts a microsecond, 7,000 a token: full in whole microseconds, rounded up.
            (
                "tb",
                &[&["HSET", "parts", "0", "time", "1000000"]],
                1_000_001,
                [7_000_000, 3, 7_000],
                [2_333, 3, 2_333_333, -1],
            ),
            // A window of 5 per second.
            ("fw", &[], 1_000_000, [5, 1_000_000, 0], [-1, 5, 0, -1]),
            (
                "fw",
                &[&["HSET", "start", "1000000", "count", "5"]],
                1_400_000,
                [5, 1_000_000, 1],
                [600_000, 0, 600_000, -1],
            ),
            // Ended: whole.
            (
                "fw",
                &[&["HSET", "start", "1000000", "count", "5"]],
                2_000_000,
                [5, 1_000_000, 0],
                [-1, 5, 0, -1],
            ),
            (
                "fw",
                &[&["HSET", "start", "1000000", "count", "2"]],
                1_250_000,
                [5, 1_000_000, 1],
                [-1, 3, 750_000, 750_000],
            ),
            // A log of 3 per second.
            (
                "sl",
                &[],
                1_000_000,
                [3, 1_000_000, 1],
                [-1, 3, 0, 1_000_000],
            ),
            (
                "sl",
                &logged,
                1_500_000,
                [3, 1_000_000, 1],
                // Back when the oldest stops counting; whole when the newest does.
                [500_000, 0, 800_000, -1],
            ),
            (
                "sl",
                &logged,
                2_250_000,
                [3, 1_000_000, 1],
                [-1, 2, 50_000, 1_000_000],
            ),
            ("sl", &logged, 2_400_000, [3, 1_000_000, 0], [-1, 3, 0, -1]),
            // A permit logged later than now (a clock stepped back) counts until its end.
            (
                "sl",
                &[&["ZADD", "2000000", "2000000:0"]],
                1_500_000,
                [3, 1_000_000, 1],
                [-1, 2, 1_500_000, 1_500_000],
            ),
        ];
        for (tag, setup, now, arguments, expected) in cases {
            assert_eq!(
                decide_at(connection, tag, setup, now, arguments).await,
                expected,
                "{tag} at {now} on {setup:?} with {arguments:?}"
            );
        }
    }

    #[test]
    fn a_reply_is_read_for_the_keys_it_was_sent_for() {
        let reply = Reply::parse(&[0, 7, 1_500, 0, -2, 900, 3], 2).unwrap();
        assert_eq!(
            reply,
            Reply {
                granted: false,
                keys: vec![
                    KeyState {
                        left: 7,
                        whole_after: Duration::from_micros(1_500),
                        wait: Duration::ZERO,
                    },
                    // A window counting past this limiter's limit has nothing left.
                    KeyState {
                        left: 0,
                        whole_after: Duration::from_micros(900),
                        wait: Duration::from_millis(3),
                    },
                ],
            }
        );
        assert_eq!(reply.retry_after(), Some(Duration::from_millis(3)));
        let granted = Reply::parse(&[1, 7, 1_500, 0], 1).unwrap();
        assert_eq!(granted.retry_after(), None);

        // A reply of another shape (another script's, or another version's) is an error
        // naming it, never a decision.
        for values in [&[][..], &[1, 7, 1_500], &[2, 7, 1_500, 0], &[0, 7, -1, 5]] {
            let error = Reply::parse(values, 1).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::UnexpectedReturnType);
            assert!(
                error.to_string().contains(&format!("{values:?}")),
                "{error}"
            );
        }
    }
}
