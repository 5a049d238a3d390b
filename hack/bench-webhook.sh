#!/usr/bin/env bash
# Webhook benchmarks (make bench-webhook):
#  1. Go benchmark of the Pod mutation path (ns/op, allocs/op), handler and HTTP framing;
#  2. end to end against the real local apiserver (bin/ from make tools): Pods created at 50/s and
#     200/s with the webhook registered and not; client-side p50/p99 of Pod CREATE, their ratio,
#     and the webhook's server-side p50/p99.
#     A third mode, a reference webhook that returns the same patch without doing any work, gives
#     the floor for any mutating webhook (LIFEBOAT_BENCH_REFERENCE=0 skips it). Each mode also gets
#     a breakdown from the apiserver's and the webhook's metrics and the processes' CPU time.
# Writes .lifeboat/bench/webhook.json. LIFEBOAT_BENCH_PHASE (default 20s) is the measured time per
# mode and rate; LIFEBOAT_BENCH_CONTENT_TYPE=json makes the load generator talk JSON instead of
# protobuf; LIFEBOAT_BENCH_PROFILE_DIR=<dir> records CPU profiles of kube-apiserver and the webhook.
# On a shared machine, serialise heavy benchmarks: flock /tmp/lifeboat-bench.lock bash hack/bench-webhook.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"
out_dir=.lifeboat/bench
mkdir -p "${out_dir}"
handler_txt="${out_dir}/webhook-handler.txt"
e2e_json="${out_dir}/webhook-e2e.json"

go test ./webhooks/server/ ./webhooks/pod/ -run '^$' -bench 'BenchmarkPodMutation|BenchmarkDecodePod' -benchmem -count "${BENCH_COUNT:-5}" | tee "${handler_txt}"

LIFEBOAT_BENCH_OUT="${PWD}/${e2e_json}" \
  go test ./test/integration/webhook/ -run '^$' -bench '^BenchmarkPodCreateLatency$' -benchtime 1x -timeout 30m \
  | grep -E '^(Benchmark|ok|FAIL|PASS)'

# Median of each handler benchmark's runs, then one JSON document.
handler_json="["
sep=""
for name in BenchmarkPodMutation BenchmarkPodMutationHandle BenchmarkDecodePod/whole BenchmarkDecodePod/admitted; do
  lines=$(grep -E "^${name}-[0-9]+ " "${handler_txt}")
  med=$(echo "${lines}" | awk '{print $3}' | sort -n | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}')
  bytes=$(echo "${lines}" | tail -1 | awk '{print $5}')
  allocs=$(echo "${lines}" | tail -1 | awk '{print $7}')
  runs=$(echo "${lines}" | wc -l)
  handler_json+="${sep}{\"name\":\"${name}\",\"runs\":${runs},\"nsPerOpMedian\":${med},\"bytesPerOp\":${bytes},\"allocsPerOp\":${allocs}}"
  sep=","
done
handler_json+="]"
{
  printf '{\n"handler": %s,\n"endToEnd": ' "${handler_json}"
  cat "${e2e_json}"
  printf '}\n'
} > "${out_dir}/webhook.json"
rm -f "${e2e_json}"
echo "wrote ${out_dir}/webhook.json"
cat "${out_dir}/webhook.json"
