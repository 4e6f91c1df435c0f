//! `gputrace`: the command-line front end. Thin by design: argument parsing
//! and one error boundary here, the work in the library crates.

mod agent;
mod cli;
mod cmd;
mod color;
mod duration;
mod error;
mod host;
mod inputs;
mod live;
mod out_dir;
mod python;
mod say;
mod values;

use std::process::ExitCode;

fn main() -> ExitCode {
    match cli::run() {
        Ok(code) => code,
        // A closed pipe (`gputrace info dir | head`, `export -o - | head`) is a normal end.
        Err(err) if err.is_broken_pipe() => ExitCode::SUCCESS,
        Err(err) => {
            say::say(&format!("gputrace: error: {err}"));
            let mut source = std::error::Error::source(&err);
            while let Some(s) = source {
                // Skip causes already spelled out in the message.
                if !err.to_string().contains(&s.to_string()) {
                    say::say(&format!("  caused by: {s}"));
                }
                source = s.source();
            }
            if let Some(hint) = err.hint() {
                say::say(&format!("  hint: {hint}"));
            }
            ExitCode::from(2)
        }
    }
}
