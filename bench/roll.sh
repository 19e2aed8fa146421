#!/usr/bin/env bash
# Delivery of a release by mesh release roll, as a host sees it: a second
# build of mesh (another -X stamp, so another digest) is published and
# rolled to a joined host; timed from the roll to that host's
# versions/<digest>/mesh and want, the binary fetched in 512 KiB chunks
# over the bus, verified and written. No launcher runs it here, so the roll
# then waits for a heartbeat naming the digest: it is aborted, and the
# host keeps the binary.
# Usage: bench/roll.sh [runs]   (needs bin/mesh: make build)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
bin=$PWD/bin/mesh
[ -x "$bin" ] || { echo "bin/mesh missing: run make build" >&2; exit 1; }
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
json_field() { sed -n "s/.*\"$2\": *\"\([^\"]*\)\".*/\1/p" "$1" | head -1; }
ns() { date +%s%N; }

"$bin" genesis --dir "$work/m" --mesh bench --node alpha --bus 127.0.0.1:0 --http 127.0.0.1:0 --dns 127.0.0.1:0 \
	--dns-upstream 127.0.0.1:9 --address 127.0.0.1 --docker none --log-level warn 2>"$work/g.log" &
pids+=($!)
until [ -s "$work/m/addrs.json" ] && curl -sf "http://$(json_field "$work/m/addrs.json" http)/healthz" >/dev/null; do sleep 0.01; done
export MESH_DIR=$work/m
"$bin" host --dir "$work/beta" --join "$("$bin" token create beta 2>/dev/null)" --address 127.0.0.2 --heartbeat 500ms \
	--dns 127.0.0.1:0 --dns-upstream 127.0.0.1:9 --docker none --log-level warn 2>"$work/beta.log" &
pids+=($!)
until "$bin" node list --json | grep -q '"binaries"' && [ "$("$bin" node list --json | grep -c '"binaries"')" -ge 2 ]; do sleep 0.05; done

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
took=()
for i in $(seq 1 "$runs"); do
	rel=$work/mesh-$i
	CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X github.com/nats-io/nats-server/v2/server.gitCommit=bench-roll-$i" -o "$rel" .
	"$bin" release publish "$rel" >/dev/null
	d=$(sha256sum "$rel" | cut -c1-64)
	t=$(ns)
	"$bin" release roll --nodes beta --detach "$d" >/dev/null
	until [ "$(cat "$work/beta/host/versions/want" 2>/dev/null)" = "$d" ]; do sleep 0.01; done
	took+=($(( ($(ns) - t) / 1000000 )))
	cmp -s "$rel" "$work/beta/host/versions/$d/mesh" || { echo "delivered binary differs" >&2; exit 1; }
	"$bin" release roll --abort >/dev/null
done
size=$(stat -c %s "$work/mesh-1")
printf 'release roll to one host, %d MiB delivered (want written)  median %d ms over %d runs\n' $((size >> 20)) "$(printf '%s\n' "${took[@]}" | median)" "$runs"
