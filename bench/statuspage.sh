#!/usr/bin/env bash
# The controller's resident memory with status pages open: a one-node
# genesis on loopback (controller and its host in one process), its
# process tree's VmRSS once settled, then with PAGES pages open (each one
# loaded as a browser loads it: the page, its two assets, then its stream
# from the page's digest, held open with curl -N), and once they are
# closed again. Each reading is taken SETTLE seconds after what it follows.
# Then the stream of one page over a quiet fleet of 100 nodes, bytes a
# minute (BenchmarkQuietFleetStream in mesh) unless STREAM= is empty.
# Usage: bench/statuspage.sh [pages]   (default 10)
set -euo pipefail
cd "$(dirname "$0")/.."
pages=${1:-10}
settle=${SETTLE:-20}
stream=${STREAM-1}
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; kill $g 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
json_field() { sed -n "s/.*\"$2\": *\"\([^\"]*\)\".*/\1/p" "$1" | head -1; }

CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$work/mesh" .
mkdir -p "$work/root"
"$work/mesh" genesis --dir "$work/m" --mesh bench --node alpha --bus 127.0.0.1:0 --http 127.0.0.1:0 --dns 127.0.0.1:0 \
	--address 127.0.0.1 --root "$work/root" --log-level warn 2>"$work/g.log" &
g=$!
until [ -s "$work/m/addrs.json" ] && curl -sf "http://$(json_field "$work/m/addrs.json" http)/healthz" >/dev/null; do sleep 0.05; done
base=http://$(json_field "$work/m/addrs.json" http)

# tree is the pids of $1 and all its descendants.
tree() {
	local p=$1
	echo "$p"
	for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do tree "$c"; done
}
# rss is the VmRSS of the genesis process tree, in KiB.
rss() {
	local sum=0 kb
	for p in $(tree "$g"); do
		kb=$(awk '/^VmRSS:/ {print $2}' /proc/"$p"/status 2>/dev/null || echo 0)
		sum=$((sum + ${kb:-0}))
	done
	echo "$sum"
}
mib() { awk -v k="$1" 'BEGIN {printf "%.1f MiB", k / 1024}'; }

sleep "$settle"
before=$(rss)
for i in $(seq 1 "$pages"); do
	path=$([ $((i % 2)) -eq 0 ] && echo /nodes || echo /)
	curl -sf "$base$path" -o "$work/page$i.html"
	for a in $(grep -o '/assets/[^"]*' "$work/page$i.html" | sort -u); do curl -sf "$base$a" -o /dev/null; done
	digest=$(sed -n 's/.*data-digest="\([0-9a-f]*\)".*/\1/p' "$work/page$i.html" | head -1)
	curl -sfN "$base/events?digest=$digest" -o "$work/stream$i.txt" &
	pids+=($!)
done
sleep "$settle"
open=$(rss)
kill "${pids[@]}" 2>/dev/null || true
wait "${pids[@]}" 2>/dev/null || true
pids=()
sleep "$settle"
closed=$(rss)
printf 'controller RSS (genesis tree, %d process(es)), %s s after each step:\n' "$(tree "$g" | wc -l)" "$settle"
printf '  settled, no page open   %s\n' "$(mib "$before")"
printf '  %2d pages open           %s (%+d KiB)\n' "$pages" "$(mib "$open")" $((open - before))
printf '  pages closed again      %s (%+d KiB)\n' "$(mib "$closed")" $((closed - before))

[ -n "$stream" ] || exit 0
go test -run '^$' -bench '^BenchmarkQuietFleetStream$' -benchtime 1x -timeout 10m ./mesh | grep -E 'Benchmark|^(ok|FAIL)'
