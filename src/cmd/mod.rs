//! One module per subcommand.

pub mod demo;
pub mod info;
pub mod version;
