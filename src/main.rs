//! `gputrace`: the command-line front end. Thin by design: argument parsing
//! and one error boundary here, the work in the library crates.

mod agent;
mod cli;
mod cmd;
mod error;
mod host;
mod inputs;
mod live;
mod python;

use std::process::ExitCode;

fn main() -> ExitCode {
    match cli::run() {
        Ok(code) => code,
        // A closed pipe (`gputrace info dir | head`) is not an error.
        Err(error::CliError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("gputrace: error: {err}");
            let mut source = std::error::Error::source(&err);
            while let Some(s) = source {
                // Skip causes already spelled out in the message.
                if !err.to_string().contains(&s.to_string()) {
                    eprintln!("  caused by: {s}");
                }
                source = s.source();
            }
            if let Some(hint) = err.hint() {
                eprintln!("  hint: {hint}");
            }
            ExitCode::from(2)
        }
    }
}
