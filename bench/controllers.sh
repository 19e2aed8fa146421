#!/usr/bin/env bash
# Three controller processes on loopback and one host
# (BenchmarkControllersFailover in e2e): each controller's resident memory
# once idle, and failover, from the leader killed with SIGKILL to the first
# push through another controller that succeeds, over RUNS kills (median
# and the longest; each run's time is printed).
# Usage: bench/controllers.sh [runs]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
go test -run '^$' -bench '^BenchmarkControllersFailover$' -benchtime "${runs}x" -timeout 30m -v ./e2e |
	grep -E 'idle:|failover|ctl-idle-MiB|^(ok|FAIL|---)'
