#!/usr/bin/env bash
# Scheduler benchmark (make bench-scheduler): the real lifeboat-scheduler binary with two
# profiles — default-scheduler and lifeboat-scheduler (manifests/scheduler/config.yaml) —
# against the real local kube-apiserver, scheduler_perf style. Writes
# .lifeboat/bench/scheduler.json. Extra arguments go to the benchmark, e.g.
#
#   hack/bench-scheduler.sh --nodes 1000 --pods 5000 --reps 5
#
# Needs the control-plane binaries (make tools).
set -euo pipefail
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"
cd "$(dirname "$0")/.."

work=.lifeboat/bench/scheduler
mkdir -p "$work"
go build -o "$work/lifeboat-scheduler" ./cmd/lifeboat-scheduler
go build -o "$work/bench-scheduler" ./test/bench/scheduler
exec "$work/bench-scheduler" --binary "$work/lifeboat-scheduler" --config manifests/scheduler/config.yaml \
  --out .lifeboat/bench/scheduler.json --work-dir "$work" "$@"
