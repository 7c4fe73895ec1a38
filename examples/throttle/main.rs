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
    let stdin = std::io::stdin();
    let mut input = BufReader::new(tokio::io::stdin());
    // A terminal, or an input that is empty (or closed) from the start, means there is
    // nothing to throttle: show what the tool does instead.
    let has_input =
        !stdin.is_terminal() && matches!(input.fill_buf().await, Ok(bytes) if !bytes.is_empty());
    let stderr = std::io::stderr();
    let show_progress = !options.quiet && stderr.is_terminal();
    let mut progress = Progress::new(show_progress.then_some(stderr), options.unit);
    let unit = if has_input { options.unit } else { Unit::Lines };
    let result = if has_input {
        let Some(rate) = options.rate else {
            eprintln!("throttle: no RATE given (see --help)");
            return ExitCode::from(2);
        };
        let bucket = match options.bucket(rate) {
            Ok(bucket) => bucket,
            Err(error) => {
                eprintln!("throttle: {error}");
                return ExitCode::from(2);
            }
        };
        cli::pipe(
            input,
            tokio::io::stdout(),
            options.unit,
            &bucket,
            &mut progress,
        )
        .await
    } else {
        let (rate, burst) = match options.rate {
            Some(rate) => (rate, options.burst.unwrap_or(cli::DEMO_BURST)),
            None => (cli::DEMO_RATE, cli::DEMO_BURST),
        };
        eprintln!(
            "throttle: nothing on standard input, so here is a demonstration: 20 lines at \
             {rate} with bursts of {burst}. Try: seq 1 100 | cargo run --example throttle -- 20/s --burst 5"
        );
        let bucket = match token_bucket::TokenBucket::new(rate, burst) {
            Ok(bucket) => bucket,
            Err(error) => {
                eprintln!("throttle: {error}");
                return ExitCode::from(2);
            }
        };
        let demo = cli::demo_input();
        cli::pipe(
            &demo[..],
            tokio::io::stdout(),
            Unit::Lines,
            &bucket,
            &mut progress,
        )
        .await
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
