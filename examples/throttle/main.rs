//! `throttle`: copies standard input to standard output at a limited rate, like `pv -L`
//! for lines, through a `TokenBucket`.
//!
//! ```text
//! seq 1 100 | cargo run --release --example throttle -- 20/s --burst 5
//! cat big.iso | cargo run --release --example throttle -- --bytes 64KiB/s > copy.iso
//! cargo run --example throttle            # nothing on standard input: a demonstration
//! ```

mod cli;

use std::io::IsTerminal;
use std::process::ExitCode;

use cli::{Command, Progress, Unit};
use tokio::io::{AsyncBufReadExt, BufReader};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let options = match cli::parse_args(std::env::args().skip(1)) {
        Ok(Command::Run(options)) => options,
        Ok(Command::Help) => {
            print!("{}", cli::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            eprintln!("throttle: {error}");
            return ExitCode::from(2);
        }
    };
    let mut input = BufReader::new(tokio::io::stdin());
    let stderr = std::io::stderr();
    let show_progress = !options.quiet && stderr.is_terminal();
    let (result, unit) = match options.rate {
        Some(rate) => {
            // A rate was given: throttle whatever standard input holds, even nothing.
            let bucket = match options.bucket(rate) {
                Ok(bucket) => bucket,
                Err(error) => {
                    eprintln!("throttle: {error}");
                    return ExitCode::from(2);
                }
            };
            let mut progress = Progress::new(show_progress.then_some(stderr), options.unit);
            let result = cli::pipe(
                input,
                tokio::io::stdout(),
                options.unit,
                &bucket,
                &mut progress,
            )
            .await;
            (result, options.unit)
        }
        None => {
            // No rate: with nothing on standard input (a terminal, or empty or closed),
            // show what the tool does; with something there, the rate is missing.
            let has_input = !std::io::stdin().is_terminal()
                && matches!(input.fill_buf().await, Ok(bytes) if !bytes.is_empty());
            if has_input {
                eprintln!("throttle: no RATE given (see --help)");
                return ExitCode::from(2);
            }
            eprintln!(
                "throttle: nothing on standard input, so here is a demonstration: 20 lines at \
                 {} with bursts of {}. Try: seq 1 100 | cargo run --example throttle -- 20/s --burst 5",
                cli::DEMO_RATE,
                cli::DEMO_BURST
            );
            let bucket = match token_bucket::TokenBucket::new(cli::DEMO_RATE, cli::DEMO_BURST) {
                Ok(bucket) => bucket,
                Err(error) => {
                    eprintln!("throttle: {error}");
                    return ExitCode::from(2);
                }
            };
            let mut progress = Progress::new(show_progress.then_some(stderr), Unit::Lines);
            let demo = cli::demo_input();
            let result = cli::pipe(
                &demo[..],
                tokio::io::stdout(),
                Unit::Lines,
                &bucket,
                &mut progress,
            )
            .await;
            (result, Unit::Lines)
        }
    };
    match result {
        Ok(summary) => {
            if !options.quiet {
                eprintln!(
                    "throttle: {} {} ({} bytes) in {:.2?}, longest wait {:.2?}",
                    summary.items,
                    unit.name(),
                    summary.bytes,
                    summary.elapsed,
                    summary.longest_wait
                );
            }
            ExitCode::SUCCESS
        }
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("throttle: {error}");
            ExitCode::FAILURE
        }
    }
}
