#!/usr/bin/env bash
# TCP throughput between two hosts at two sites behind NAT: over a veth
# laid directly between them (the baseline), and over mesh0 through the
# controller's relay, with the ratio. The layout is e2e/sites_rig_test.go's,
# made with ip netns: a public bridge in a namespace of its own, the
# controller on it, and a router namespace per site doing MASQUERADE with
# one host behind it. Nothing is added to the root namespace; every
# namespace goes at the end.
# Usage: bench/overlay.sh [seconds]   (root; iproute2, iptables, iperf3,
# util-linux; bin/mesh from make build for the mesh0 run)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}
bin=$PWD/bin/mesh
[ "$(id -u)" = 0 ] || { echo "bench/overlay.sh makes network namespaces: run it as root" >&2; exit 1; }
for tool in ip iptables iperf3 nsenter unshare; do
	command -v "$tool" >/dev/null || { echo "$tool missing (.ci/run installs it)" >&2; exit 1; }
done

id=mesh-bench-$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
pub=$id-pub ctl=$id-ctl ra=$id-ra rb=$id-rb a=$id-a1 b=$id-b1
work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	for ns in "$b" "$rb" "$a" "$ra" "$ctl" "$pub"; do ip netns del "$ns" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT
at() { local ns=$1; shift; nsenter --net="/run/netns/$ns" -- "$@"; }

mkns() { ip netns add "$1"; ip -n "$1" link set lo up; }
port=0
plug() { # plug NS IP: NS on the public bridge as pub, address IP/24
	port=$((port + 1))
	ip -n "$1" link add pub type veth peer name "p$port" netns "$pub"
	ip -n "$pub" link set "p$port" master br0 up
	ip -n "$1" addr add "$2/24" dev pub
	ip -n "$1" link set pub up
}
site() { # site ROUTER HOST N PUBLICIP: 192.168.N0.0/24 behind ROUTER
	mkns "$1"; plug "$1" "$4"
	ip -n "$1" link add br0 type bridge
	ip -n "$1" addr add "192.168.${3}0.1/24" dev br0
	ip -n "$1" link set br0 up
	at "$1" sh -c 'echo 1 >/proc/sys/net/ipv4/ip_forward'
	at "$1" iptables -t nat -A POSTROUTING -s "192.168.${3}0.0/24" -o pub -j MASQUERADE
	mkns "$2"
	ip -n "$2" link add eth0 type veth peer name h1 netns "$1"
	ip -n "$1" link set h1 master br0 up
	ip -n "$2" addr add "192.168.${3}0.2/24" dev eth0
	ip -n "$2" link set eth0 up
	ip -n "$2" route add default via "192.168.${3}0.1"
}

mkns "$pub"
ip -n "$pub" link add br0 type bridge
ip -n "$pub" link set br0 up
mkns "$ctl"; plug "$ctl" 198.18.0.2
site "$ra" "$a" 1 198.18.0.11
site "$rb" "$b" 2 198.18.0.12
# The baseline: a veth straight from A's host to B's.
ip -n "$a" link add direct type veth peer name direct netns "$b"
ip -n "$a" addr add 10.99.0.1/30 dev direct
ip -n "$b" addr add 10.99.0.2/30 dev direct
ip -n "$a" link set direct up
ip -n "$b" link set direct up

# iperf3 from A's host to B's at IP; prints Mbit/s (the receiver's).
iperf() {
	at "$b" iperf3 -s -1 -B "$1" >/dev/null 2>&1 &
	local s=$!
	local out
	for _ in $(seq 50); do
		out=$(at "$a" iperf3 -c "$1" -t "$secs" -f m 2>&1) && break
		sleep 0.1
	done
	wait "$s" 2>/dev/null || true
	echo "$out" | awk '/receiver/ {print $(NF-2)}'
}

direct=$(iperf 10.99.0.2)
echo "direct veth, A's host to B's: $direct Mbit/s (iperf3 -t $secs)"

# ---- mesh0 ------------------------------------------------------------
# The same pair over the overlay: genesis (the relay) in the controller's
# namespace, a host at each site, iperf3 to B's overlay address. Each mesh
# process gets a mount namespace with its own /run/wireguard (all name
# their interface mesh0). Runs when bin/mesh has the overlay.
if ! [ -x "$bin" ] || ! "$bin" genesis --help 2>&1 | grep -q -- '--overlay'; then
	echo "mesh0: not measured (bin/mesh has no genesis --overlay: make build with the overlay in the tree)"
	exit 0
fi
mesh_in() { # mesh_in NS LOG ARGS...: mesh in NS's network, its own /run/wireguard
	local ns=$1 log=$2; shift 2
	nsenter --net="/run/netns/$ns" -- unshare --mount --propagation private -- \
		sh -c 'mkdir -p /run/wireguard && mount -t tmpfs tmpfs /run/wireguard && exec "$@"' sh "$bin" "$@" >"$log" 2>&1 &
	pids+=($!)
}
common=(--dns 127.0.0.1:53 --dns-upstream 127.0.0.1:9 --docker none --log-level warn)
mesh_in "$ctl" "$work/ctl.log" genesis --dir "$work/ctl" --mesh bench --node ctl \
	--bus 198.18.0.2:4222 --http 198.18.0.2:8480 --address 198.18.0.2 --advertise 198.18.0.2 \
	--overlay 10.88.0.0/16 --relay --endpoint 198.18.0.2:51820 "${common[@]}"
until at "$ctl" curl -sf http://198.18.0.2:8480/healthz >/dev/null; do sleep 0.1; done
overlay_ip_of() { { ip -n "$1" -4 -o addr show dev mesh0 2>/dev/null || true; } | awk '{split($4, a, "/"); print a[1]}'; }
join() { # join NS NODE ADDR
	local tok
	tok=$(at "$ctl" "$bin" token create --dir "$work/ctl" "$2")
	mesh_in "$1" "$work/$2.log" host --dir "$work/$2" --join "$tok" --address "$3" "${common[@]}"
}
join "$a" site-a 192.168.10.2
until [ -n "$(overlay_ip_of "$a")" ] && at "$a" ping -c1 -W0.2 10.88.0.1 >/dev/null 2>&1; do sleep 0.05; done
# Join to first packet: once A reaches the controller over mesh0, from
# B's mesh host --join to A's first ping answered by B over mesh0
# (through the relay: the sites cannot reach each other), pinging every
# 50 ms.
t0=$(date +%s.%N)
join "$b" site-b 192.168.20.2

up= tip=
for _ in $(seq 1200); do
	bip=$(overlay_ip_of "$b")
	[ -z "$bip" ] || [ -n "$tip" ] || tip=$(date +%s.%N)
	if [ -n "$bip" ] && at "$a" ping -c1 -W0.2 "$bip" >/dev/null 2>&1; then
		up=1
		break
	fi
	sleep 0.05
done
[ -n "$up" ] || { echo "site A's host does not reach site B's over mesh0 within a minute:" >&2; cat "$work"/*.log >&2; exit 1; }
awk -v a="$t0" -v i="$tip" -v b="$(date +%s.%N)" 'BEGIN {printf "join to first packet over mesh0 (B joins, A pings it): %.2f s (B'"'"'s mesh0 up at %.2f s)\n", b - a, i - a}'
# The pair's first path goes through the relay: B's overlay address is on
# the relay's peer entry in A's mesh0 (wg show, in A's mount namespace,
# where its /run/wireguard is) until a direct handshake moves it to B's.
apid=${pids[1]}
path() {
	local owner
	owner=$(nsenter --net="/run/netns/$a" --mount="/proc/$apid/ns/mnt" -- wg show mesh0 allowed-ips 2>/dev/null |
		awk -v ip="$bip/32" '{for (i = 2; i <= NF; i++) if ($i == ip) print $1}')
	if [ "$owner" = "$bkey" ]; then echo direct; else echo relayed; fi
}
bkey=$(at "$ctl" "$bin" overlay show --dir "$work/ctl" --json | tr -d ' \n' | grep -o '"node":"site-b","overlay_ip":"[^"]*","wg_key":"[^"]*"' | sed 's/.*"wg_key":"//; s/"$//')
p1=$(path)
relayed=$(iperf "$bip")
echo "mesh0 (userspace, path $p1), A's host to B's: $relayed Mbit/s"
awk -v o="$relayed" -v d="$direct" 'BEGIN {printf "ratio mesh0 relayed/veth: %.3f\n", o / d}'
# Each host also reports the baseline veth's address as an endpoint: the
# direct handshake on it comes once the earlier endpoints were tried
# (RelayAfter each), and the path turns direct.
for _ in $(seq 600); do
	[ "$(path)" = direct ] && break
	sleep 0.1
done
if [ "$(path)" = direct ]; then
	straight=$(iperf "$bip")
	echo "mesh0 (userspace, direct), A's host to B's: $straight Mbit/s"
	awk -v o="$straight" -v d="$direct" -v r="$relayed" 'BEGIN {printf "ratio mesh0 direct/veth: %.3f; relayed/direct mesh0: %.3f\n", o / d, r / o}'
else
	echo "mesh0 direct: not measured (the path did not turn direct within a minute: $(path))"
fi
