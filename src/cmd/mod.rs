//! One module per subcommand.

pub mod compare;
pub mod demo;
pub mod export;
pub mod import;
pub mod info;
pub mod report;
pub mod run;
pub mod version;
