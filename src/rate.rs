//! [`Rate`]: how many tokens a bucket gains per period, and its text form.

use std::error::Error;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// Units a rate's period can be written in, largest first, so that
/// [`Display`](fmt::Display) picks the largest unit that divides the period exactly.
const UNITS: [(&str, u128); 6] = [
    ("h", 3_600 * NANOS_PER_SEC),
    ("min", 60 * NANOS_PER_SEC),
    ("s", NANOS_PER_SEC),
    ("ms", 1_000_000),
    ("us", 1_000),
    ("ns", 1),
];

/// A refill rate: `amount` tokens every `period`.
///
/// Refill is continuous: a bucket at `Rate::per_second(4)` gains one token every 250 ms,
/// not four tokens at the start of each second. Fractions of a token are carried exactly,
/// so no rate drifts however long the bucket runs.
///
/// A `Rate` is only a value: constructing one never fails. A rate with a zero amount or
/// a zero period is refused where it is used, with [`ConfigError::ZeroRate`](crate::ConfigError::ZeroRate).
///
/// Two rates are equal when their amount and period are equal; `100/s` and `1/10ms` are
/// the same speed but different rates, and print differently.
///
/// # Text form
///
/// `Rate` parses from and prints as `"<amount>/<period>"`, where the period is an optional
/// whole number followed by a unit: `ns`, `us` (or `µs`), `ms`, `s`, `min` (or `m`), `h`
/// or `d`, and their long forms (`sec`, `second`, `minute`, `hour`, `day`, plural too).
///
/// ```
/// use std::time::Duration;
/// use token_bucket::Rate;
///
/// let rate: Rate = "5/250ms".parse()?;
/// assert_eq!(rate, Rate::new(5, Duration::from_millis(250)));
/// assert_eq!(rate.to_string(), "5/250ms");
/// assert_eq!("3000/min".parse::<Rate>()?, Rate::per_minute(3000));
/// assert_eq!(Rate::every(Duration::from_secs(7200)).to_string(), "1/2h");
/// # Ok::<(), token_bucket::ParseRateError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    amount: u64,
    period: Duration,
}

impl Rate {
    /// `amount` tokens every `period`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::Rate;
    ///
    /// let rate = Rate::new(5, Duration::from_millis(250));
    /// assert_eq!(rate.amount(), 5);
    /// assert_eq!(rate.period(), Duration::from_millis(250));
    /// ```
    pub const fn new(amount: u64, period: Duration) -> Rate {
        Rate { amount, period }
    }

    /// `amount` tokens every second.
    ///
    /// ```
    /// # use token_bucket::Rate;
    /// assert_eq!(Rate::per_second(100).to_string(), "100/s");
    /// ```
    pub const fn per_second(amount: u64) -> Rate {
        Rate::new(amount, Duration::from_secs(1))
    }

    /// `amount` tokens every minute.
    ///
    /// ```
    /// # use token_bucket::Rate;
    /// assert_eq!(Rate::per_minute(3000).to_string(), "3000/min");
    /// ```
    pub const fn per_minute(amount: u64) -> Rate {
        Rate::new(amount, Duration::from_secs(60))
    }

    /// `amount` tokens every hour.
    ///
    /// ```
    /// # use token_bucket::Rate;
    /// assert_eq!(Rate::per_hour(10).to_string(), "10/h");
    /// ```
    pub const fn per_hour(amount: u64) -> Rate {
        Rate::new(amount, Duration::from_secs(3600))
    }

    /// One token every `interval`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use token_bucket::Rate;
    /// assert_eq!(Rate::every(Duration::from_micros(500)).to_string(), "1/500us");
    /// ```
    pub const fn every(interval: Duration) -> Rate {
        Rate::new(1, interval)
    }

    /// The number of tokens gained every [`period`](Rate::period).
    ///
    /// ```
    /// # use token_bucket::Rate;
    /// assert_eq!(Rate::per_minute(7).amount(), 7);
    /// ```
    pub const fn amount(&self) -> u64 {
        self.amount
    }

    /// The time in which [`amount`](Rate::amount) tokens are gained.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use token_bucket::Rate;
    /// assert_eq!(Rate::per_minute(7).period(), Duration::from_secs(60));
    /// ```
    pub const fn period(&self) -> Duration {
        self.period
    }

    /// True when the rate never adds a token: a zero amount or a zero period.
    pub(crate) fn is_zero(&self) -> bool {
        self.amount == 0 || self.period.is_zero()
    }

    /// The period in nanoseconds; `Duration::MAX` needs 95 bits, hence `u128`.
    pub(crate) fn period_nanos(&self) -> u128 {
        self.period.as_nanos()
    }
}

impl fmt::Debug for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Rate({self})")
    }
}

impl fmt::Display for Rate {
    /// Prints `"<amount>/<period>"` in the largest unit that divides the period exactly,
    /// omitting a count of one: `100/s`, `5/250ms`, `1/2h`. The output parses back to an
    /// equal `Rate`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = self.period_nanos();
        if nanos == 0 {
            return write!(f, "{}/0s", self.amount);
        }
        let (unit, unit_nanos) = UNITS
            .iter()
            .copied()
            .find(|&(_, unit_nanos)| nanos % unit_nanos == 0)
            .unwrap_or(("ns", 1));
        match nanos / unit_nanos {
            1 => write!(f, "{}/{unit}", self.amount),
            count => write!(f, "{}/{count}{unit}", self.amount),
        }
    }
}

impl FromStr for Rate {
    type Err = ParseRateError;

    /// Parses `"<amount>/<period>"`, such as `"100/s"`, `"5/250ms"`, `"3000/min"`,
    /// `"1/2h"` or `"1/500us"`. Spaces around the parts are allowed.
    ///
    /// # Errors
    ///
    /// [`ParseRateError`] when the text has no `/`, the amount is not a whole number
    /// or is zero, the unit is unknown, or the period is zero or longer than
    /// [`Duration::MAX`].
    fn from_str(text: &str) -> Result<Rate, ParseRateError> {
        let fail = |reason| ParseRateError {
            input: text.to_owned(),
            reason,
        };
        let (amount, period) = text.split_once('/').ok_or(fail(Reason::MissingSlash))?;
        let amount = amount.trim();
        let amount: u64 = parse_digits(amount).ok_or(fail(Reason::BadAmount))?;
        if amount == 0 {
            return Err(fail(Reason::ZeroAmount));
        }
        let period = period.trim();
        let digits_end = period
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(period.len());
        let (count, unit) = period.split_at(digits_end);
        let count: u128 = match count {
            "" => 1,
            digits => parse_digits(digits).ok_or(fail(Reason::PeriodTooLong))?,
        };
        let unit_nanos = unit_nanos(unit.trim()).ok_or(fail(Reason::BadUnit))?;
        let nanos = count
            .checked_mul(unit_nanos)
            .ok_or(fail(Reason::PeriodTooLong))?;
        if nanos == 0 {
            return Err(fail(Reason::ZeroPeriod));
        }
        let secs = u64::try_from(nanos / NANOS_PER_SEC).map_err(|_| fail(Reason::PeriodTooLong))?;
        let subsec = (nanos % NANOS_PER_SEC) as u32;
        Ok(Rate::new(amount, Duration::new(secs, subsec)))
    }
}

/// Parses a non-empty run of ASCII digits (no sign, no `_`).
fn parse_digits<N: FromStr>(text: &str) -> Option<N> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn unit_nanos(unit: &str) -> Option<u128> {
    let nanos = match unit.to_ascii_lowercase().as_str() {
        "ns" | "nsec" | "nanos" | "nanosecond" | "nanoseconds" => 1,
        "us" | "µs" | "μs" | "usec" | "micros" | "microsecond" | "microseconds" => 1_000,
        "ms" | "msec" | "millis" | "millisecond" | "milliseconds" => 1_000_000,
        "s" | "sec" | "secs" | "second" | "seconds" => NANOS_PER_SEC,
        "m" | "min" | "mins" | "minute" | "minutes" => 60 * NANOS_PER_SEC,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3_600 * NANOS_PER_SEC,
        "d" | "day" | "days" => 86_400 * NANOS_PER_SEC,
        _ => return None,
    };
    Some(nanos)
}

/// The error from parsing a [`Rate`] out of text: it quotes the input and says what is wrong.
///
/// ```
/// use token_bucket::Rate;
///
/// let error = "ten/s".parse::<Rate>().unwrap_err();
/// assert_eq!(error.input(), "ten/s");
/// assert!(error.to_string().contains("\"ten/s\""));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseRateError {
    input: String,
    reason: Reason,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reason {
    MissingSlash,
    BadAmount,
    ZeroAmount,
    BadUnit,
    ZeroPeriod,
    PeriodTooLong,
}

impl ParseRateError {
    /// The text that failed to parse.
    pub fn input(&self) -> &str {
        &self.input
    }

    /// What is wrong with it, without the input: for callers that parse part of a larger
    /// text and want to word the error themselves.
    ///
    /// ```
    /// use token_bucket::Rate;
    ///
    /// let error = "5/0ms".parse::<Rate>().unwrap_err();
    /// assert_eq!(error.reason(), "the period must be longer than zero");
    /// ```
    pub fn reason(&self) -> &'static str {
        match self.reason {
            Reason::MissingSlash => "expected <amount>/<period>",
            Reason::BadAmount => "the amount before '/' must be a whole number of tokens",
            Reason::ZeroAmount => "the amount must be at least 1 token",
            Reason::BadUnit => "the period's unit must be one of ns, us, ms, s, min, h, d",
            Reason::ZeroPeriod => "the period must be longer than zero",
            Reason::PeriodTooLong => "the period is longer than Duration::MAX",
        }
    }
}

impl fmt::Display for ParseRateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid rate {:?}: {} (for example \"100/s\", \"5/250ms\" or \"1/2h\")",
            self.input,
            self.reason()
        )
    }
}

impl Error for ParseRateError {}

/// Euclid's greatest common divisor, in 64-bit arithmetic while both fit (a 128-bit
/// division costs several times more): what reduces a rate to whole units, for the bucket's
/// one-word forms and the Redis bucket's script alike.
pub(crate) fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        let remainder = match (u64::try_from(a), u64::try_from(b)) {
            (Ok(a), Ok(b)) => u128::from(a % b),
            _ => a % b,
        };
        (a, b) = (b, remainder);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        let cases = [
            ("100/s", Rate::per_second(100)),
            ("5/250ms", Rate::new(5, Duration::from_millis(250))),
            ("3000/min", Rate::per_minute(3000)),
            ("1/2h", Rate::new(1, Duration::from_secs(7200))),
            ("1/500us", Rate::every(Duration::from_micros(500))),
            (" 7 / 3 seconds ", Rate::new(7, Duration::from_secs(3))),
            ("2/1d", Rate::new(2, Duration::from_secs(86_400))),
            ("9/µs", Rate::new(9, Duration::from_micros(1))),
        ];
        for (text, rate) in cases {
            assert_eq!(text.parse::<Rate>(), Ok(rate), "{text}");
        }
    }

    #[test]
    fn display_round_trips() {
        let rates = [
            Rate::per_second(100),
            Rate::new(5, Duration::from_millis(250)),
            Rate::new(1, Duration::from_nanos(1)),
            Rate::new(u64::MAX, Duration::from_nanos(1_000_000_001)),
            Rate::new(3, Duration::from_secs(90)),
            Rate::new(1, Duration::MAX),
        ];
        for rate in rates {
            let text = rate.to_string();
            assert_eq!(text.parse::<Rate>(), Ok(rate), "{text}");
        }
        assert_eq!(Rate::new(3, Duration::from_secs(90)).to_string(), "3/90s");
    }

    #[test]
    fn refuses_bad_text_naming_it() {
        for (text, reason) in [
            ("100", Reason::MissingSlash),
            ("ten/s", Reason::BadAmount),
            ("-1/s", Reason::BadAmount),
            ("1.5/s", Reason::BadAmount),
            ("0/s", Reason::ZeroAmount),
            ("5/fortnight", Reason::BadUnit),
            ("5/", Reason::BadUnit),
            ("5/0ms", Reason::ZeroPeriod),
            ("1/99999999999999999999999h", Reason::PeriodTooLong),
            ("99999999999999999999999/s", Reason::BadAmount),
        ] {
            let error = text.parse::<Rate>().unwrap_err();
            assert_eq!(error.reason, reason, "{text}");
            assert!(error.to_string().contains(&format!("{text:?}")), "{error}");
        }
    }
}
