#!/usr/bin/env bash
# Fuzz the admission webhooks over raw AdmissionReview bytes (make fuzz).
# FUZZTIME (default 2m) per target. New crashers land in webhooks/server/testdata/fuzz/ — commit
# them with the fix so they run with every go test. Minimization is capped (FUZZ_MINIMIZE, 5s):
# the default 60s per new input, on the large seeds, would stall the run for minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"
FUZZTIME="${FUZZTIME:-2m}"
PARALLEL="${FUZZ_PARALLEL:-2}"

go test ./webhooks/server/ -run '^$' -fuzz '^FuzzAdmissionReview$' -fuzztime "${FUZZTIME}" -fuzzminimizetime "${FUZZ_MINIMIZE:-5s}" -parallel "${PARALLEL}"

# Interruption messages: no panic, every bad body is rejected (and deleted by the consumer).
go test ./pkg/cloud/interruptionqueue/ -run '^$' -fuzz '^FuzzParse$' -fuzztime "${FUZZTIME}" -fuzzminimizetime "${FUZZ_MINIMIZE:-5s}" -parallel "${PARALLEL}"
