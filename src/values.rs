//! Why a command-line value was refused by its flag's parser (clap prints
//! the message after the flag's name). Durations are [`crate::duration`]'s.

/// A number, price, share or name a flag could not take; each names the text given.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum ValueError {
    /// A count with a suffix other than k, M, B/G, T.
    #[error("`{given}`: unknown suffix `{suffix}` (k, M, B or G, T)")]
    UnknownSuffix {
        /// The text given.
        given: String,
        /// The suffix.
        suffix: char,
    },
    /// Not a positive count.
    #[error("`{0}` is not a positive number (e.g. 7e9 or 7B)")]
    NotPositive(String),
    /// Not a precision of the peak table.
    #[error("`{0}`: expected bf16, fp16, fp8 or tf32")]
    Precision(String),
    /// Not a GPU-Util window.
    #[error("`{0}` is not a window in seconds between 1e-6 and 3600 (e.g. 1/6 or 1)")]
    Window(String),
    /// Not a price.
    #[error("`{0}` is not a price (a number of US dollars, e.g. 2.50)")]
    Price(String),
    /// Not a percentage.
    #[error("{0:?} is not a percentage: write e.g. 5%")]
    NotPercent(String),
    /// A negative percentage.
    #[error("{0:?}: the percentage must be 0 or more")]
    NegativePercent(String),
    /// Not a number of seconds in the flag's range.
    #[error("`{given}` is not a number of seconds between {least} and 3600")]
    Seconds {
        /// The text given.
        given: String,
        /// The least the flag takes, in words.
        least: &'static str,
    },
    /// Not a factor.
    #[error("{0:?} is not a number (write e.g. 3 or 2.5)")]
    NotFactor(String),
    /// A factor below 1.5.
    #[error("{0:?}: the factor must be at least 1.5")]
    SmallFactor(String),
}
