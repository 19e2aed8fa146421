#!/usr/bin/env bash
# Figures for the closing note of issues 2 and 3, measured on this machine:
# the binary's size, genesis to /healthz ready, the controller's idle RSS
# (with its own host), a joined host's idle RSS, and join to heard.
# Usage: bench/figures.sh [runs]   (needs bin/mesh: make build)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
bin=$PWD/bin/mesh
[ -x "$bin" ] || { echo "bin/mesh missing: run make build" >&2; exit 1; }
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

ms() { date +%s%3N; }
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
json_field() { sed -n "s/.*\"$2\": *\"\([^\"]*\)\".*/\1/p" "$1" | head -1; }

echo "binary: $(stat -c %s "$bin") bytes ($(du -h "$bin" | cut -f1))"

ready_ms=() ctl_rss=() host_rss=() join_ms=()
for i in $(seq 1 "$runs"); do
	d=$work/m$i
	t0=$(ms)
	"$bin" genesis --dir "$d" --mesh bench --node alpha --bus 127.0.0.1:0 --http 127.0.0.1:0 --dns 127.0.0.1:0 --address 127.0.0.1 --log-level warn 2>"$work/g$i.log" &
	g=$!; pids+=("$g")
	until [ -s "$d/addrs.json" ] && curl -sf "http://$(json_field "$d/addrs.json" http)/healthz" >/dev/null; do sleep 0.01; done
	ready_ms+=($(( $(ms) - t0 )))

	tok=$("$bin" token create --dir "$d" beta 2>/dev/null)
	t1=$(ms)
	"$bin" host --dir "$work/h$i" --join "$tok" --address 127.0.0.2 --dns 127.0.0.1:0 --log-level warn 2>"$work/h$i.log" &
	h=$!; pids+=("$h")
	until "$bin" node list --dir "$d" --json 2>/dev/null | tr -d ' \n' | grep -q '"name":"beta","address":"127.0.0.2","joined":"[^"]*","last_heard":"'; do sleep 0.01; done
	join_ms+=($(( $(ms) - t1 )))

	sleep 15 # idle: heartbeats only
	ctl_rss+=($(rss_kib "$g"))
	host_rss+=($(rss_kib "$h"))
	kill "$h" "$g"; wait "$h" "$g" 2>/dev/null || true
done

stats() { # name unit values...
	local name=$1 unit=$2; shift 2
	printf '%s\n' "$@" | sort -n | awk -v n="$name" -v u="$unit" '{a[NR]=$1} END {printf "%-40s median %s %s (min %s, max %s, %d runs)\n", n, a[int((NR+1)/2)], u, a[1], a[NR], NR}'
}
stats "genesis -> /healthz ready" ms "${ready_ms[@]}"
stats "mesh host --join -> node heard" ms "${join_ms[@]}"
stats "controller idle RSS (with its host)" KiB "${ctl_rss[@]}"
stats "joined host idle RSS" KiB "${host_rss[@]}"
