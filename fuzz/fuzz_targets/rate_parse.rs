//! `Rate`'s text form: any string through `FromStr` never panics; what parses is a
//! usable rate, prints back to text that parses to the same rate, and parses the same
//! with spaces around it; what does not parse is refused with an error quoting it. Any
//! `Rate` value prints to text that parses back to it, or is refused if it is a zero rate.
#![no_main]

use std::time::Duration;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use token_bucket::Rate;

#[derive(Debug, Arbitrary)]
enum Input<'a> {
    Text(&'a str),
    Value { amount: u64, secs: u64, nanos: u32 },
}

fuzz_target!(|input: Input<'_>| match input {
    Input::Text(text) => check_text(text),
    Input::Value {
        amount,
        secs,
        nanos,
    } => check_value(Rate::new(
        amount,
        Duration::new(secs, nanos % 1_000_000_000)
    )),
});

fn check_text(text: &str) {
    match text.parse::<Rate>() {
        Ok(rate) => {
            assert!(
                rate.amount() > 0 && !rate.period().is_zero(),
                "{text:?} parsed to a zero rate, {rate:?}"
            );
            round_trips(rate);
            let padded = format!(" {text}\t");
            assert_eq!(padded.parse::<Rate>(), Ok(rate), "{padded:?}");
        }
        Err(error) => {
            assert_eq!(error.input(), text);
            let quoted = format!("{text:?}");
            assert!(
                error.to_string().contains(&quoted),
                "{error} does not quote {quoted}"
            );
        }
    }
}

fn check_value(rate: Rate) {
    if rate.amount() == 0 || rate.period().is_zero() {
        let text = rate.to_string();
        assert!(
            text.parse::<Rate>().is_err(),
            "{text:?} is a zero rate but parsed"
        );
    } else {
        round_trips(rate);
    }
}

fn round_trips(rate: Rate) {
    let text = rate.to_string();
    assert_eq!(
        text.parse::<Rate>(),
        Ok(rate),
        "{rate:?} printed as {text:?}"
    );
}
