#!/usr/bin/env bash
# RFC 9113 conformance: run h2spec against the plaintext harness of the real driver and HTTP/2
# session (tests/test_http2.py; tests/test_h2spec.py runs the same in the suite).
#
#   scripts/h2spec.sh [h2spec args...]    e.g. scripts/h2spec.sh http2/6.9 -v   (make h2spec)
#   scripts/h2spec.sh --which             print the h2spec binary that would run, or exit 3
#
# h2spec is looked for, in this order: $H2SPEC, `h2spec` on PATH, ../shared/tools/h2spec beside
# the clone (and ../../shared/tools/h2spec beside a worktree of it). No package registry offers
# it; README.md ("h2spec") says how to get it.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}

find_h2spec() {
    local candidate
    if [ -n "${H2SPEC:-}" ]; then
        # An explicit choice: used or refused, never silently replaced by another binary.
        [ -x "$H2SPEC" ] && [ -f "$H2SPEC" ] && { echo "$H2SPEC"; return 0; }
        command -v "$H2SPEC" 2>/dev/null && return 0
        echo "H2SPEC=$H2SPEC is not an executable file" >&2
        return 3
    fi
    command -v h2spec 2>/dev/null && return 0
    for candidate in ../shared/tools/h2spec ../../shared/tools/h2spec; do
        if [ -f "$candidate" ] && [ -x "$candidate" ]; then
            echo "$(cd "$(dirname "$candidate")" && pwd)/h2spec"
            return 0
        fi
    done
    echo "h2spec not found (looked at \$H2SPEC, PATH, ../shared/tools/h2spec); README.md," \
        "section h2spec, says how to get it" >&2
    return 3
}

binary=$(find_h2spec) || exit 3
if [ "${1:-}" = "--which" ]; then
    echo "$binary"
    exit 0
fi

# The harness listens on a free port and prints "h2 harness on 127.0.0.1:<port>" once it does.
coproc HARNESS { exec "$PY" -m tests.test_http2 0; }
harness=$HARNESS_PID
trap 'kill "$harness" 2>/dev/null || true; wait "$harness" 2>/dev/null || true' EXIT
if ! read -r -t 30 line <&"${HARNESS[0]}"; then
    echo "the harness did not start (it exited, or printed no port within 30 s)" >&2
    exit 1
fi
port=${line##*:}
"$binary" --host 127.0.0.1 --port "$port" --timeout 2 "$@"
