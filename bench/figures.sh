#!/usr/bin/env bash
# Figures for the closing note of issues 2 and 3, measured on this machine:
# the binary's size, genesis to /healthz ready, the controller's idle RSS
# (with its own host), a joined host's idle RSS (its launcher and the child
# mesh serve host it runs, together and each), and join to heard; then
# (issue 17) pushes to fleets of simulated hosts, BenchmarkFleetPush at the
# sizes FLEET lists (default 50,1000; FLEET= skips it), each figure with its
# ratio to the first size's.
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
# serve_pid is the child of launcher $1 that serves (mesh serve ...).
serve_pid() {
	local c
	for c in $(pgrep -P "$1"); do
		if tr '\0' ' ' <"/proc/$c/cmdline" | grep -q ' serve '; then echo "$c"; return; fi
	done
	echo "no mesh serve child of $1" >&2; return 1
}
json_field() { sed -n "s/.*\"$2\": *\"\([^\"]*\)\".*/\1/p" "$1" | head -1; }

echo "binary: $(stat -c %s "$bin") bytes ($(du -h "$bin" | cut -f1))"

ready_ms=() ctl_rss=() host_rss=() launcher_rss=() serve_rss=() join_ms=()
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
	serve=$(serve_pid "$h")
	l=$(rss_kib "$h") c=$(rss_kib "$serve")
	launcher_rss+=("$l") serve_rss+=("$c") host_rss+=($((l + c)))
	kill "$h" "$g"; wait "$h" "$g" 2>/dev/null || true
done

stats() { # name unit values...
	local name=$1 unit=$2; shift 2
	printf '%s\n' "$@" | sort -n | awk -v n="$name" -v u="$unit" '{a[NR]=$1} END {printf "%-40s median %s %s (min %s, max %s, %d runs)\n", n, a[int((NR+1)/2)], u, a[1], a[NR], NR}'
}
stats "genesis -> /healthz ready" ms "${ready_ms[@]}"
stats "mesh host --join -> node heard" ms "${join_ms[@]}"
stats "controller idle RSS (with its host)" KiB "${ctl_rss[@]}"
stats "joined host idle RSS (launcher + serve)" KiB "${host_rss[@]}"
stats "  its launcher (mesh host)" KiB "${launcher_rss[@]}"
stats "  its child (mesh serve host)" KiB "${serve_rss[@]}"

fleet=${FLEET-50,1000}
[ -n "$fleet" ] || exit 0
echo
echo "fleet: BenchmarkFleetPush at $fleet simulated hosts (real agents in the benchmark's process, each with its own credential and consumer; their state on tmpfs), ${FLEET_OPS:-5} ops each"
MESH_BENCH_FLEET=$fleet go test -count=1 -run '^$' -bench FleetPush -benchtime "${FLEET_OPS:-5}x" -timeout 120m ./e2e >"$work/fleet.txt" 2>&1 ||
	{ tail -n 40 "$work/fleet.txt" >&2; exit 1; }
grep -q 'state on tmpfs: true' "$work/fleet.txt" || echo "(the hosts' state was NOT on tmpfs: no /dev/shm)"
# A result line: name, ops, ns/op, "ns/op", then value-unit pairs.
awk '/^BenchmarkFleetPush\// {
	split($1, a, "[/-]"); n = a[2]; sizes[++ns] = n
	for (i = 5; i < NF; i += 2) { v[n, $(i+1)] = $i; if (!(($(i+1)) in seen)) { seen[$(i+1)] = 1; units[++nu] = $(i+1) } }
}
END {
	if (ns == 0) { print "no BenchmarkFleetPush result"; exit 1 }
	printf "%-22s", "figure"; for (s = 1; s <= ns; s++) printf " %14s", sizes[s] " hosts"
	for (s = 2; s <= ns; s++) printf " %10s", "x" sizes[s] "/" sizes[1]; print ""
	for (u = 1; u <= nu; u++) {
		printf "%-22s", units[u]; for (s = 1; s <= ns; s++) printf " %14s", v[sizes[s], units[u]]
		for (s = 2; s <= ns; s++) { b = v[sizes[1], units[u]]; printf " %10s", (b > 0 ? sprintf("%.1f", v[sizes[s], units[u]] / b) : "-") }
		print ""
	}
}' "$work/fleet.txt"
