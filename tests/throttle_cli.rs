//! The `throttle` example: its argument parsing, and its copy loop end to end on paused
//! time, through the same code the example runs.

#[path = "../examples/throttle/cli.rs"]
mod cli;
mod common;

use std::time::Duration;

use cli::{
    parse_args, parse_byte_rate, parse_size, pipe, Command, Options, Progress, Summary, Unit,
};
use common::{assert_now, ms, secs};
use token_bucket::{Rate, TokenBucket};
use tokio::time::Instant;

fn args(text: &str) -> Result<Command, cli::ArgsError> {
    parse_args(text.split_whitespace().map(String::from))
}

fn run_options(text: &str) -> Options {
    match args(text) {
        Ok(Command::Run(options)) => options,
        other => panic!("{text:?} gave {other:?}"),
    }
}

#[test]
fn parses_a_line_rate_and_a_burst() {
    let options = run_options("20/s --burst 5");
    assert_eq!(options.unit, Unit::Lines);
    assert_eq!(options.rate, Some(Rate::per_second(20)));
    assert_eq!(options.burst, Some(5));
    assert!(!options.quiet);
    assert_eq!(
        run_options("--quiet 5/250ms").rate,
        Some(Rate::new(5, ms(250)))
    );
    assert_eq!(run_options("").rate, None);
}

#[test]
fn parses_a_byte_rate_with_size_units() {
    let options = run_options("--bytes 64KiB/s --burst 16KiB");
    assert_eq!(options.unit, Unit::Bytes);
    assert_eq!(options.rate, Some(Rate::per_second(65_536)));
    assert_eq!(options.burst, Some(16_384));
    assert_eq!(
        parse_byte_rate("1MB/100ms"),
        Ok(Rate::new(1_000_000, ms(100)))
    );
    assert_eq!(parse_byte_rate("512/s"), Ok(Rate::per_second(512)));
    assert_eq!(parse_size("2GiB"), Some(2 << 30));
    assert_eq!(parse_size("3K"), Some(3_000));
    assert_eq!(parse_size("1.5MB"), None);
    assert_eq!(parse_size("99999999999GiB"), None, "overflow is refused");
}

#[test]
fn help_is_a_command() {
    assert_eq!(args("--help"), Ok(Command::Help));
    assert_eq!(args("20/s -h"), Ok(Command::Help));
}

#[test]
fn bad_arguments_are_refused_naming_the_value() {
    for (text, expected) in [
        ("20/x", "\"20/x\""),
        ("fast", "\"fast\""),
        ("0/s", "\"0/s\""),
        ("20/s 30/s", "two rates"),
        ("20/s --burst", "--burst needs a value"),
        ("20/s --burst 0", "\"0\""),
        ("20/s --burst 5KiB", "\"5KiB\""),
        ("--bytes 12XB/s", "\"12XB/s\""),
        ("--bytes 0KiB/s", "at least 1 byte"),
        ("--bytes 64KiB/fortnight", "the period's unit"),
        ("--bytes 64KiB/0s", "longer than zero"),
        ("--bytes 99999999999GiB/s", "below 16 EiB"),
        ("5/s --burst 2 --burst 3", "--burst given twice"),
        ("20/s --fast", "\"--fast\""),
    ] {
        let error = args(text).expect_err(text).to_string();
        assert!(error.contains(expected), "{text:?}: {error}");
    }
}

#[test]
fn a_zero_burst_never_reaches_the_bucket_and_the_bucket_refuses_it_anyway() {
    let options = Options {
        unit: Unit::Lines,
        rate: Some(Rate::per_second(1)),
        burst: Some(0),
        quiet: true,
    };
    let error = options.bucket(Rate::per_second(1)).unwrap_err();
    assert!(error.to_string().contains("capacity"), "{error}");
}

/// Runs the copy loop from `input` into a `Vec`, without a progress line.
async fn copy(
    input: &[u8],
    unit: Unit,
    bucket: &TokenBucket,
) -> std::io::Result<(Vec<u8>, Summary)> {
    let mut output = Vec::new();
    let mut progress = Progress::new(None::<Vec<u8>>, unit);
    let summary = pipe(input, &mut output, unit, bucket, &mut progress).await?;
    Ok((output, summary))
}

fn numbered_lines(count: usize) -> Vec<u8> {
    (1..=count)
        .map(|n| format!("{n}\n"))
        .collect::<String>()
        .into_bytes()
}

#[tokio::test(start_paused = true)]
async fn a_hundred_lines_at_twenty_per_second_after_a_burst_of_five() {
    let options = run_options("20/s --burst 5");
    let bucket = options.bucket(options.rate.unwrap()).unwrap();
    let input = numbered_lines(100);
    let start = Instant::now();
    let (output, summary) = copy(&input, Unit::Lines, &bucket).await.unwrap();
    // Five at once, then 95 at 50 ms each.
    assert_now(start, ms(4_750));
    assert_eq!(output, input);
    assert_eq!(summary.items, 100);
    assert_eq!(summary.bytes, input.len() as u64);
    assert_eq!(summary.longest_wait, ms(50));
}

#[tokio::test(start_paused = true)]
async fn bytes_pass_at_the_byte_rate_intact() {
    let options = run_options("--bytes 64KiB/s");
    let bucket = options.bucket(options.rate.unwrap()).unwrap();
    assert_eq!(
        bucket.capacity(),
        65_536,
        "the default burst is one period's worth"
    );
    let input: Vec<u8> = (0..256 * 1024u32).map(|n| (n * 31 % 251) as u8).collect();
    let start = Instant::now();
    let (output, summary) = copy(&input, Unit::Bytes, &bucket).await.unwrap();
    // 64 KiB from the full bucket, then 192 KiB at 64 KiB/s.
    assert_now(start, secs(3));
    assert_eq!(output, input);
    assert_eq!(summary.items, input.len() as u64);
}

#[tokio::test(start_paused = true)]
async fn the_progress_line_reports_what_was_achieved() {
    let bucket = TokenBucket::new(Rate::per_second(10), 1).unwrap();
    let input = numbered_lines(11);
    let mut progress = Progress::new(Some(Vec::new()), Unit::Lines);
    pipe(
        &input[..],
        tokio::io::sink(),
        Unit::Lines,
        &bucket,
        &mut progress,
    )
    .await
    .unwrap();
    let drawn = String::from_utf8(progress_output(progress)).unwrap();
    let last = drawn.trim_end().rsplit('\r').next().unwrap();
    assert!(last.starts_with("11 lines, 11.0/s achieved"), "{drawn:?}");
    assert!(drawn.ends_with('\n'));
}

fn progress_output(progress: Progress<Vec<u8>>) -> Vec<u8> {
    progress.into_inner().unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn a_closed_bucket_stops_the_copy_with_an_error() {
    let bucket = TokenBucket::new(Rate::per_second(1), 1).unwrap();
    bucket.close();
    let error = copy(&numbered_lines(3), Unit::Lines, &bucket)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("closed"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn the_demonstration_takes_two_seconds() {
    let bucket = TokenBucket::new(cli::DEMO_RATE, cli::DEMO_BURST).unwrap();
    let input = cli::demo_input();
    let start = Instant::now();
    let (output, _) = copy(&input, Unit::Lines, &bucket).await.unwrap();
    // Three at once, then 17 at 100 ms each.
    assert_now(start, Duration::from_millis(1_700));
    assert_eq!(output, input);
}

#[test]
fn the_help_text_names_every_option_and_the_example() {
    for option in ["--bytes", "--burst", "--quiet", "--help", "KiB"] {
        assert!(cli::USAGE.contains(option), "{option}");
    }
    assert!(
        cli::USAGE.contains("seq 1 100 | cargo run --release --example throttle -- 20/s --burst 5")
    );
}
