#!/usr/bin/env bash
# Emulator and client overhead of the cloud layer: p50/p99 of StartInstances and
# ReceiveMessage→DeleteMessage round trips on loopback, through the production clients.
# Writes .lifeboat/bench/cloud.json (merged per benchmark) and prints the Go benchmark lines.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"
out="${LIFEBOAT_BENCH_OUT:-$PWD/.lifeboat/bench/cloud.json}"
mkdir -p "$(dirname "$out")"
LIFEBOAT_BENCH_OUT="$out" go test ./pkg/cloud/awsemu -run '^$' -bench RoundTrip -benchtime "${BENCHTIME:-2000x}" -count 1
echo "wrote $out"
cat "$out"
