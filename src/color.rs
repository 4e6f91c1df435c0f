//! Whether the text output is coloured: `--color auto|always|never`, then the
//! environment (`NO_COLOR`, no-color.org; `FORCE_COLOR`, force-color.org), then
//! whether stdout is a terminal.

use std::ffi::OsString;
use std::sync::OnceLock;

/// `--color`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    /// Colour on a terminal, unless `NO_COLOR` is set; `FORCE_COLOR` colours a pipe too.
    #[default]
    Auto,
    /// Always colour (ANSI), even into a pipe or file.
    Always,
    /// Never colour.
    Never,
}

static CHOICE: OnceLock<ColorChoice> = OnceLock::new();

/// Record the command line's choice (once, before any command runs).
pub fn set(choice: ColorChoice) {
    let _ = CHOICE.set(choice);
}

/// Whether to colour text written to a stream that is (`is_terminal`) a terminal.
pub fn enabled(is_terminal: bool) -> bool {
    decide(
        CHOICE.get().copied().unwrap_or_default(),
        is_terminal,
        std::env::var_os("NO_COLOR"),
        std::env::var_os("FORCE_COLOR"),
    )
}

/// The rule: the flag wins; under `auto` a non-empty `NO_COLOR` turns colour off, else a
/// `FORCE_COLOR` other than empty, `0` or `false` turns it on, else a terminal decides.
fn decide(choice: ColorChoice, is_terminal: bool, no_color: Option<OsString>, force_color: Option<OsString>) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            if no_color.is_some_and(|v| !v.is_empty()) {
                false
            } else if force_color.is_some_and(|v| !v.is_empty() && v != "0" && v != "false") {
                true
            } else {
                is_terminal
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_then_no_color_then_force_color_then_the_terminal() {
        let d = |c, t, n: Option<&str>, f: Option<&str>| decide(c, t, n.map(Into::into), f.map(Into::into));
        use ColorChoice::*;
        assert!(d(Auto, true, None, None));
        assert!(!d(Auto, false, None, None));
        assert!(d(Auto, true, Some(""), None), "an empty NO_COLOR does not count");
        assert!(!d(Auto, true, Some("1"), None));
        assert!(d(Auto, false, None, Some("1")), "FORCE_COLOR colours a pipe");
        assert!(!d(Auto, false, None, Some("0")) && !d(Auto, false, None, Some("false")) && !d(Auto, false, None, Some("")));
        assert!(!d(Auto, false, Some("1"), Some("1")), "NO_COLOR wins over FORCE_COLOR");
        assert!(d(Always, false, Some("1"), None), "the flag wins");
        assert!(!d(Never, true, None, Some("1")));
    }
}
