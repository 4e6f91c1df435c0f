#!/usr/bin/env bash
# The README's test command. Installs what the tests that use a real
# component need (scripts/test-deps.sh, best effort; GPUTRACE_TEST_DEPS=0
# leaves that out), builds the workspace (the agent tests run the freshly
# built libgputrace_agent.so, which `cargo test` alone does not build), runs
# every test (arguments go to `cargo test`), then lists every test that
# skipped and why, so that no skip passes unseen inside captured output.
# The exit status is the tests'.
#
# Tests note their skips through tests/common/skip.rs in
# target/test-skips.txt (emptied here first).
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${GPUTRACE_TEST_DEPS:-1}" != 0 ]; then
    scripts/test-deps.sh
fi

target="${CARGO_TARGET_DIR:-target}"
skips="$target/test-skips.txt"
mkdir -p "$target"
: >"$skips"

echo "== cargo build --workspace && cargo test --workspace $*"
cargo build --workspace && cargo test --workspace "$@"
status=$?

if [ -s "$skips" ]; then
    echo "== $(wc -l <"$skips") test(s) skipped, and why (install what they name: scripts/test-deps.sh; under CI=true they fail instead):"
    sort "$skips" | awk -F'\t' '{ print "  " $1 ": " $2 }'
else
    echo "== no test skipped"
fi
exit $status
