//! The logic of the `throttle` example: argument parsing and the throttled copy from an
//! input to an output, as functions the tests drive on paused time.

use std::fmt;
use std::io::Write;
use std::time::Duration;

use token_bucket::{Rate, TakeError, TokenBucket};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

pub const USAGE: &str = "\
throttle: copy standard input to standard output at a limited rate, like `pv -L` for lines.

Usage:
  throttle RATE [--burst LINES] [--quiet]
  throttle --bytes RATE [--burst BYTES] [--quiet]

  RATE          lines per period, such as 20/s, 5/250ms, 3000/min, 1/2h
  --bytes RATE  limit bytes instead, such as 64KiB/s, 1MB/s, 512/100ms
                (sizes: B, K or KB = 1000, KiB = 1024, M, MB, MiB, G, GB, GiB)
  --burst N     the bucket's capacity: how many lines (or bytes) may pass at once;
                default 1 line, or one period's worth of bytes
  --quiet       no progress line on standard error
  -h, --help    this text

With nothing on standard input it runs a short built-in demonstration.

Example:
  seq 1 100 | cargo run --release --example throttle -- 20/s --burst 5
";

/// What the throttle counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Lines,
    Bytes,
}

impl Unit {
    pub fn name(self) -> &'static str {
        match self {
            Unit::Lines => "lines",
            Unit::Bytes => "bytes",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    pub unit: Unit,
    /// `None` when no rate was given: only the demonstration can run then.
    pub rate: Option<Rate>,
    pub burst: Option<u64>,
    pub quiet: bool,
}

impl Options {
    /// The bucket these options describe, starting full.
    pub fn bucket(&self, rate: Rate) -> Result<TokenBucket, ArgsError> {
        let burst = self.burst.unwrap_or(match self.unit {
            Unit::Lines => 1,
            Unit::Bytes => rate.amount(),
        });
        TokenBucket::new(rate, burst).map_err(|error| ArgsError(error.to_string()))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Run(Options),
    Help,
}

/// A command-line mistake, said in words that name the offending value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgsError(pub String);

impl fmt::Display for ArgsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ArgsError {}

/// Parses the arguments after the program name.
pub fn parse_args<I: IntoIterator<Item = String>>(args: I) -> Result<Command, ArgsError> {
    let mut options = Options {
        unit: Unit::Lines,
        rate: None,
        burst: None,
        quiet: false,
    };
    let mut burst_text = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut value_of = |flag: &str| {
            args.next()
                .ok_or_else(|| ArgsError(format!("{flag} needs a value")))
        };
        match arg.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--quiet" | "-q" => options.quiet = true,
            "--bytes" => {
                let text = value_of("--bytes")?;
                set_rate(&mut options, parse_byte_rate(&text)?)?;
                options.unit = Unit::Bytes;
            }
            "--burst" => {
                let text = value_of("--burst")?;
                if let Some(first) = burst_text.replace(text) {
                    return Err(ArgsError(format!(
                        "--burst given twice (first {first:?}); give it once"
                    )));
                }
            }
            flag if flag.starts_with('-') => {
                return Err(ArgsError(format!("unknown option {flag:?} (see --help)")));
            }
            rate => {
                let rate = rate
                    .parse::<Rate>()
                    .map_err(|error| ArgsError(error.to_string()))?;
                set_rate(&mut options, rate)?;
            }
        }
    }
    if let Some(text) = burst_text {
        let burst = match options.unit {
            Unit::Lines => parse_count(&text),
            Unit::Bytes => parse_size(&text),
        }
        .ok_or_else(|| {
            ArgsError(format!(
                "invalid --burst {text:?}: expected a whole number of {}",
                options.unit.name()
            ))
        })?;
        if burst == 0 {
            return Err(ArgsError(
                "invalid --burst \"0\": it must be at least 1".into(),
            ));
        }
        options.burst = Some(burst);
    }
    Ok(Command::Run(options))
}

fn set_rate(options: &mut Options, rate: Rate) -> Result<(), ArgsError> {
    if let Some(first) = options.rate {
        return Err(ArgsError(format!(
            "two rates given ({first} and {rate}); give one"
        )));
    }
    options.rate = Some(rate);
    Ok(())
}

fn parse_count(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// A byte size such as `512`, `16KiB`, `1.5MB` is not accepted (whole numbers only):
/// `64KiB` is 65 536 bytes, `64KB` and `64K` are 64 000.
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (count, unit) = text.split_at(digits_end);
    let multiplier: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "KB" | "k" | "kB" => 1_000,
        "KiB" => 1 << 10,
        "M" | "MB" => 1_000_000,
        "MiB" => 1 << 20,
        "G" | "GB" => 1_000_000_000,
        "GiB" => 1 << 30,
        _ => return None,
    };
    parse_count(count)?.checked_mul(multiplier)
}

/// A byte rate such as `64KiB/s` or `512/100ms`.
pub fn parse_byte_rate(text: &str) -> Result<Rate, ArgsError> {
    let invalid = |why: &str| {
        ArgsError(format!(
            "invalid byte rate {text:?}: {why} (for example \"64KiB/s\" or \"1MB/s\")"
        ))
    };
    let (size, period) = text
        .split_once('/')
        .ok_or_else(|| invalid("expected <size>/<period>"))?;
    let bytes = parse_size(size).ok_or_else(|| {
        invalid("the size must be a whole number of B, KB, KiB, MB, MiB, GB or GiB, below 16 EiB")
    })?;
    if bytes == 0 {
        return Err(invalid("the size must be at least 1 byte"));
    }
    // The period is written as in a line rate, so the line rate's parser judges it.
    let period = format!("1/{period}")
        .parse::<Rate>()
        .map_err(|error| invalid(error.reason()))?
        .period();
    Ok(Rate::new(bytes, period))
}

/// What a run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Lines or bytes passed, as the unit says.
    pub items: u64,
    pub bytes: u64,
    pub elapsed: Duration,
    /// The longest any item waited for its tokens.
    pub longest_wait: Duration,
}

/// How often the progress line is redrawn.
const DRAW_INTERVAL: Duration = Duration::from_millis(100);

/// Draws the live progress line, at most ten times a second.
pub struct Progress<P: Write> {
    out: Option<P>,
    unit: Unit,
    /// The last draw, or the start: the first line waits a full interval so that the
    /// rate it shows is measured over something.
    last_draw: Instant,
}

impl<P: Write> Progress<P> {
    /// Progress to `out`, or none.
    pub fn new(out: Option<P>, unit: Unit) -> Progress<P> {
        Progress {
            out,
            unit,
            last_draw: Instant::now(),
        }
    }

    /// What was drawn, for a writer that keeps it (tests draw into a `Vec`).
    #[allow(dead_code)]
    pub fn into_inner(self) -> Option<P> {
        self.out
    }

    fn update(&mut self, summary: &Summary, last_wait: Duration, force: bool) {
        let Some(out) = self.out.as_mut() else {
            return;
        };
        let now = Instant::now();
        if !force && now - self.last_draw < DRAW_INTERVAL {
            return;
        }
        self.last_draw = now;
        let seconds = summary.elapsed.as_secs_f64();
        let achieved = if seconds > 0.0 {
            summary.items as f64 / seconds
        } else {
            0.0
        };
        // A progress line that cannot be drawn is not worth failing the copy for.
        let _ = write!(
            out,
            "\r{} {}, {achieved:.1}/s achieved, queue delay {} ms   ",
            summary.items,
            self.unit.name(),
            last_wait.as_millis()
        );
        let _ = out.flush();
    }

    fn finish(&mut self) {
        if let Some(out) = self.out.as_mut() {
            let _ = writeln!(out);
        }
    }
}

/// Copies `input` to `output` through `bucket`: a line (or a chunk of bytes, one token
/// each) passes only once its tokens are taken, and is flushed at once so that whoever
/// reads the output sees the throttled flow.
pub async fn pipe<R, W, P>(
    mut input: R,
    mut output: W,
    unit: Unit,
    bucket: &TokenBucket,
    progress: &mut Progress<P>,
) -> std::io::Result<Summary>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
    P: Write,
{
    let start = Instant::now();
    let mut summary = Summary {
        items: 0,
        bytes: 0,
        elapsed: Duration::ZERO,
        longest_wait: Duration::ZERO,
    };
    let mut buffer = Vec::new();
    let mut last_wait = Duration::ZERO;
    loop {
        buffer.clear();
        let read = match unit {
            Unit::Lines => input.read_until(b'\n', &mut buffer).await?,
            Unit::Bytes => {
                // A chunk never exceeds the capacity, so one take can always pay for it.
                let chunk = bucket.capacity().min(64 * 1024) as usize;
                buffer.resize(chunk, 0);
                let read = input.read(&mut buffer).await?;
                buffer.truncate(read);
                read
            }
        };
        if read == 0 {
            break;
        }
        let cost = match unit {
            Unit::Lines => 1,
            Unit::Bytes => read as u64,
        };
        let asked = Instant::now();
        bucket.take(cost).await.map_err(bucket_error)?;
        let waited = asked.elapsed();
        last_wait = waited;
        output.write_all(&buffer).await?;
        output.flush().await?;
        summary.items += cost;
        summary.bytes += read as u64;
        summary.longest_wait = summary.longest_wait.max(waited);
        summary.elapsed = start.elapsed();
        progress.update(&summary, waited, false);
    }
    summary.elapsed = start.elapsed();
    progress.update(&summary, last_wait, true);
    progress.finish();
    Ok(summary)
}

fn bucket_error(error: TakeError) -> std::io::Error {
    std::io::Error::other(error)
}

/// The built-in demonstration's input: twenty numbered lines.
pub fn demo_input() -> Vec<u8> {
    (1..=20)
        .map(|n| format!("line {n:2} of the built-in demonstration\n"))
        .collect::<String>()
        .into_bytes()
}

/// The demonstration's rate when none was given: 10 lines a second after a burst of 3.
pub const DEMO_RATE: Rate = Rate::per_second(10);
pub const DEMO_BURST: u64 = 3;
