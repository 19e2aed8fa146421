#!/usr/bin/env bash
# mesh push to one node as the operator sees it (the CLI process included),
# median of N runs, beside the CLI's fixed cost measured in the same run:
# mesh node list (dial the bus, one API call, print).
# Usage: bench/push.sh [runs]   (needs bin/mesh: make build)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
bin=$PWD/bin/mesh
[ -x "$bin" ] || { echo "bin/mesh missing: run make build" >&2; exit 1; }
work=$(mktemp -d)
trap 'kill $g 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
json_field() { sed -n "s/.*\"$2\": *\"\([^\"]*\)\".*/\1/p" "$1" | head -1; }
ns() { date +%s%N; }

mkdir -p "$work/root"
"$bin" genesis --dir "$work/m" --mesh bench --node alpha --bus 127.0.0.1:0 --http 127.0.0.1:0 --dns 127.0.0.1:0 \
	--address 127.0.0.1 --root "$work/root" --log-level warn 2>"$work/g.log" &
g=$!
until [ -s "$work/m/addrs.json" ] && curl -sf "http://$(json_field "$work/m/addrs.json" http)/healthz" >/dev/null; do sleep 0.01; done
export MESH_DIR=$work/m
"$bin" module register examples >/dev/null
"$bin" assign motd alpha >/dev/null
"$bin" assign webroot alpha >/dev/null
"$bin" push alpha >/dev/null

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
push=() same=() list=()
for _ in $(seq 1 "$runs"); do
	t=$(ns); "$bin" push --force alpha >/dev/null; push+=($(( ($(ns) - t) / 1000 )))
	t=$(ns); "$bin" push alpha >/dev/null; same+=($(( ($(ns) - t) / 1000 )))
	t=$(ns); "$bin" node list >/dev/null; list+=($(( ($(ns) - t) / 1000 )))
done
p=$(printf '%s\n' "${push[@]}" | median)
u=$(printf '%s\n' "${same[@]}" | median)
l=$(printf '%s\n' "${list[@]}" | median)
printf 'mesh push --force alpha (7 resources, no-op apply)  median %d us over %d runs\n' "$p" "$runs"
printf 'mesh push alpha (unchanged, not sent)               median %d us over %d runs\n' "$u" "$runs"
printf 'mesh node list (the CLI fixed cost, peer)           median %d us over %d runs\n' "$l" "$runs"
awk -v p="$p" -v u="$u" -v l="$l" 'BEGIN {printf "ratio push --force / node list: %.2f; unchanged push / node list: %.2f\n", p / l, u / l}'
