//! Durations the flags take and times the commands print. Parsing and
//! calendar arithmetic are `jiff`'s; this module only states which inputs
//! lockd's flags accept and how its lines show a time.

use std::fmt::Display;

use jiff::fmt::friendly::SpanParser;
use jiff::{SpanRelativeTo, Timestamp};

/// What every refusal of a duration suggests instead.
const DURATION_FORMS: &str = "use a whole number with a unit (ms, s, m, h, d) such as 500ms, \
                              10s, 5m or 1h30m, or a plain number of milliseconds";

/// The units a duration flag takes, largest first.
const UNITS: [&str; 5] = ["d", "h", "m", "s", "ms"];

/// Parses a duration flag into milliseconds: `500ms`, `10s`, `5m`, `1h`,
/// `1h30m`, `2d`; a plain number is milliseconds. Units go from largest to
/// smallest, each at most once: jiff's friendly format checks that, reads
/// the numbers and sums them without overflow. Before it, this narrows what
/// jiff would take (`1h 30m`, `1.5s`, `-1s`, `2 weeks`, `1y`) to the whole
/// amounts written together in [`UNITS`] that lockd's flags have always
/// taken.
pub fn parse_duration_ms(input: &str) -> Result<u64, String> {
    let bad = |why: &dyn Display| format!("invalid duration {input:?}: {why}; {DURATION_FORMS}");
    let s = input.trim();
    if s.is_empty() {
        return Err(bad(&"it is empty"));
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse::<u64>().map_err(|_| bad(&"it is too large"));
    }
    if let Some(c) = s
        .chars()
        .find(|c| !c.is_ascii_digit() && !c.is_ascii_lowercase())
    {
        return Err(bad(&format_args!(
            "{c:?} is neither a digit nor a lowercase unit letter"
        )));
    }
    let unknown = s
        .split(|c: char| c.is_ascii_digit())
        .find(|unit| !unit.is_empty() && !UNITS.contains(unit));
    if let Some(unit) = unknown {
        return Err(bad(&format_args!("unknown unit {unit:?}")));
    }
    static PARSER: SpanParser = SpanParser::new();
    let span = PARSER.parse_span(s).map_err(|e| bad(&e))?;
    let duration = span
        .to_duration(SpanRelativeTo::days_are_24_hours())
        .map_err(|e| bad(&e))?;
    u64::try_from(duration.as_millis()).map_err(|_| bad(&"it is too large"))
}

/// Unix milliseconds as RFC 3339 UTC with milliseconds:
/// `2025-01-31T12:00:00.250Z`. A time past jiff's range (year 9999) is
/// shown as its number.
pub fn rfc3339(ms: u64) -> String {
    match i64::try_from(ms).map(Timestamp::from_millisecond) {
        Ok(Ok(at)) => format!("{at:.3}"),
        _ => format!("{ms} ms after the Unix epoch"),
    }
}

/// Time left until `expires_at_ms`, in seconds with one decimal: `9.8s`.
pub fn remaining(expires_at_ms: u64) -> String {
    seconds(expires_at_ms.saturating_sub(now_ms()))
}

/// Time since `at_ms`, in seconds with one decimal.
pub fn elapsed(at_ms: u64) -> String {
    seconds(now_ms().saturating_sub(at_ms))
}

/// `ms` as seconds with one decimal, rounded down: `12.3s`.
pub fn seconds(ms: u64) -> String {
    format!("{}.{}s", ms / 1000, ms % 1000 / 100)
}

fn now_ms() -> u64 {
    u64::try_from(Timestamp::now().as_millisecond()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_durations() {
        for (input, ms) in [
            ("500ms", 500),
            ("10s", 10_000),
            ("5m", 300_000),
            ("1h", 3_600_000),
            ("1h30m", 5_400_000),
            ("1m30s500ms", 90_500),
            ("2d", 172_800_000),
            ("250", 250),
            ("0", 0),
            ("0s", 0),
            (" 10s ", 10_000),
        ] {
            assert_eq!(parse_duration_ms(input), Ok(ms), "{input}");
        }
    }

    #[test]
    fn rejects_bad_durations_clearly() {
        for input in [
            "",
            "10x",
            "s",
            "1.5s",
            "-1s",
            "10 s",
            "30m1h",
            "1s1s",
            "1h 30m",
            "ten",
            "10S",
            "99999999999999999999",
            "9999999999999999d",
            "5ms3",
        ] {
            let err = parse_duration_ms(input).unwrap_err();
            assert!(
                err.contains("invalid duration") && err.contains("500ms"),
                "{input}: {err}"
            );
        }
        assert!(parse_duration_ms("10x")
            .unwrap_err()
            .contains("unknown unit \"x\""));
    }

    #[test]
    fn formats_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339(1_735_689_599_999), "2024-12-31T23:59:59.999Z");
        assert_eq!(rfc3339(4_102_444_800_000), "2100-01-01T00:00:00.000Z");
    }

    #[test]
    fn formats_seconds() {
        assert_eq!(seconds(12_345), "12.3s");
        assert_eq!(seconds(99), "0.0s");
        assert_eq!(remaining(0), "0.0s");
    }
}
