#!/usr/bin/env bash
# Build gputrace in release mode and install it under PREFIX (default
# ~/.local): PREFIX/bin/gputrace and PREFIX/lib/gputrace/libgputrace_agent.so,
# the layout `gputrace` searches for its agent.
set -euo pipefail
prefix=${1:-$HOME/.local}
cd "$(dirname "$0")/.."
cargo build --release --workspace
install -d "$prefix/bin" "$prefix/lib/gputrace"
install -m 755 target/release/gputrace "$prefix/bin/gputrace"
install -m 755 target/release/libgputrace_agent.so "$prefix/lib/gputrace/libgputrace_agent.so"
echo "installed: $prefix/bin/gputrace and $prefix/lib/gputrace/libgputrace_agent.so"
"$prefix/bin/gputrace" version
