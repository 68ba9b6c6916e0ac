#!/usr/bin/env bash
# RFC 9113 conformance: run h2spec against the plaintext harness of the real driver and HTTP/2
# session (tests/test_http2.py; tests/test_h2spec.py runs the same in the suite).
#
#   scripts/h2spec.sh [h2spec args...]       e.g. scripts/h2spec.sh http2/6.9 -v
#
# Needs h2spec on PATH (or H2SPEC=/path/to/h2spec):
#   GOFLAGS=-mod=mod go install github.com/summerwind/h2spec/cmd/h2spec@latest
set -euo pipefail
cd "$(dirname "$0")/.."

H2SPEC=${H2SPEC:-h2spec}
PORT=${PORT:-18443}
PY=${PY:-.venv/bin/python}

if ! command -v "$H2SPEC" >/dev/null 2>&1; then
    echo "h2spec not found; install it with:" >&2
    echo "  GOFLAGS=-mod=mod go install github.com/summerwind/h2spec/cmd/h2spec@latest" >&2
    exit 2
fi

"$PY" -m tests.test_http2 "$PORT" &
harness=$!
trap 'kill "$harness" 2>/dev/null || true; wait "$harness" 2>/dev/null || true' EXIT

for _ in $(seq 1 100); do  # up to 10 s for the harness to listen
    if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
        break
    fi
    if ! kill -0 "$harness" 2>/dev/null; then
        echo "the harness exited" >&2
        exit 1
    fi
    sleep 0.1
done

"$H2SPEC" --host 127.0.0.1 --port "$PORT" --timeout 2 "$@"
