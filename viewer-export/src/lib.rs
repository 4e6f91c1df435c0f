//! Exporters from the gputrace trace model to viewer formats.
//!
//! **Status: placeholder, no functionality yet.** The Perfetto (native
//! protobuf TrackEvent) and Chrome/Kineto JSON writers arrive with the export
//! issue (#5). They will be pure functions of the model in `gputrace-format`
//! behind a small `W: Write` trait; the CLI chooses file names and
//! compression.
#![deny(missing_docs)]
