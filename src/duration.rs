//! Durations on the command line (`--from 1.5s`, `--flight-recorder 5m`,
//! `--duty 2s/60s`): a number, fractions allowed, and one unit from the
//! set each flag names, read by `humantime`.

use std::time::Duration;

/// Why a duration was refused; each names the text given.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum DurationError {
    /// A unit outside the flag's set.
    #[error("unknown unit {unit:?}: use {units}")]
    UnknownUnit {
        /// The unit as written.
        unit: String,
        /// The units the flag takes, in words.
        units: &'static str,
    },
    /// A bare number where a unit is needed.
    #[error("{given:?} has no unit: use {units}")]
    NoUnit {
        /// The text given.
        given: String,
        /// The units the flag takes, in words.
        units: &'static str,
    },
    /// Not a number and a unit, or finer than a nanosecond.
    #[error("{given:?} is not a duration ({source})")]
    Unreadable {
        /// The text given.
        given: String,
        /// What `humantime` found wrong.
        #[source]
        source: humantime::DurationError,
    },
    /// More than the flag can hold.
    #[error("{0:?} is too long")]
    TooLong(String),
    /// Shorter than the flag's least.
    #[error("{given:?} is too short: at least {least}")]
    TooShort {
        /// The text given.
        given: String,
        /// The least, in words.
        least: &'static str,
    },
    /// A flag kept in whole milliseconds given a finer one.
    #[error("{0:?} is finer than a millisecond")]
    FinerThanMs(String),
}

/// Units of a flag: the names accepted and how an error lists them.
#[derive(Clone, Copy, Debug)]
pub struct Units {
    /// The unit names accepted (as `humantime` reads them).
    pub names: &'static [&'static str],
    /// The same, in words.
    pub words: &'static str,
}

/// Nanoseconds to seconds (`--from`, `--to`).
pub const NS_TO_S: Units = Units {
    names: &["ns", "us", "µs", "ms", "s"],
    words: "ns, us, ms or s",
};

/// Milliseconds to minutes (`--duty`, flight recorder windows).
pub const MS_TO_MIN: Units = Units {
    names: &["ms", "s", "m"],
    words: "ms, s or m",
};

/// Parse `s` (surrounding space ignored): a number, fractions allowed, and one unit
/// of `units`.
pub fn parse(s: &str, units: Units) -> Result<Duration, DurationError> {
    let t = s.trim();
    let mut named = t.split(|c: char| !c.is_alphabetic()).filter(|u| !u.is_empty()).peekable();
    if named.peek().is_none() && !t.is_empty() {
        return Err(DurationError::NoUnit {
            given: t.to_string(),
            units: units.words,
        });
    }
    if let Some(unit) = named.find(|u| !units.names.contains(u)) {
        return Err(DurationError::UnknownUnit {
            unit: unit.to_string(),
            units: units.words,
        });
    }
    humantime::parse_duration(t).map_err(|source| DurationError::Unreadable {
        given: t.to_string(),
        source,
    })
}

/// `d` in whole milliseconds (`given` for the error).
pub fn whole_ms(d: Duration, given: &str) -> Result<u64, DurationError> {
    if d.subsec_nanos() % 1_000_000 != 0 {
        return Err(DurationError::FinerThanMs(given.trim().to_string()));
    }
    u64::try_from(d.as_millis()).map_err(|_| DurationError::TooLong(given.trim().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_fractions_and_refusals() {
        assert_eq!(parse(" 1.5s ", NS_TO_S), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("2.5µs", NS_TO_S), Ok(Duration::from_nanos(2500)));
        assert_eq!(parse("5m", MS_TO_MIN), Ok(Duration::from_secs(300)));
        let e = parse("5 min", NS_TO_S).unwrap_err();
        assert_eq!(e.to_string(), r#"unknown unit "min": use ns, us, ms or s"#);
        assert!(matches!(parse("1h", MS_TO_MIN), Err(DurationError::UnknownUnit { .. })));
        assert!(matches!(parse("1h 30m", MS_TO_MIN), Err(DurationError::UnknownUnit { .. })));
        assert_eq!(parse("1s 500ms", MS_TO_MIN), Ok(Duration::from_millis(1500)));
        assert!(matches!(parse("60", MS_TO_MIN), Err(DurationError::NoUnit { .. })));
        assert!(matches!(parse("1.5ns", NS_TO_S), Err(DurationError::Unreadable { .. })));
        assert!(matches!(parse("-1s", NS_TO_S), Err(DurationError::Unreadable { .. })));
        assert!(matches!(parse("", NS_TO_S), Err(DurationError::Unreadable { .. })));
        assert_eq!(whole_ms(Duration::from_millis(1500), "1.5s"), Ok(1500));
        assert_eq!(
            whole_ms(Duration::from_micros(1500), "1500us"),
            Err(DurationError::FinerThanMs("1500us".into()))
        );
    }
}
