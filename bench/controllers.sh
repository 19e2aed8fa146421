#!/usr/bin/env bash
# Three controller processes on loopback and one host
# (BenchmarkControllersFailover in e2e): each controller's resident memory
# once idle, beside a single controller's measured the same way at the
# same time, and failover, from the leader killed with SIGKILL to the
# first push through another controller that succeeds, over RUNS kills
# (median and the longest; each run's time and the load average then are
# printed). Then (BenchmarkControllersFleetPush) a change pushed to FLEET
# simulated hosts (default 1000; FLEET= skips it) through one controller
# and through three, RUNS times each, and the ratio of the medians.
# The whole output of each benchmark is kept in a file named at the end.
# Usage: bench/controllers.sh [runs]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
fleet=${FLEET-1000}
log=$(mktemp -d)
trap 'echo "the whole output: $log" >&2' EXIT
go test -run '^$' -bench '^BenchmarkControllersFailover$' -benchtime "${runs}x" -timeout 30m -v ./e2e |
	tee "$log/failover.txt" | grep -E 'idle:|failover|idle-MiB|^(ok|FAIL|---)'
[ -n "$fleet" ] || exit 0
MESH_BENCH_FLEET=$fleet go test -run '^$' -bench '^BenchmarkControllersFleetPush$' -benchtime "${runs}x" -timeout 60m -v ./e2e |
	tee "$log/fleet.txt" | grep -E 'joined|a change to|connections|three/one|change-p50-ms|^(ok|FAIL|---)'
