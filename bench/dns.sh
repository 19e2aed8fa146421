#!/usr/bin/env bash
# Issue 7, item 3: the mesh's resolver against unbound and dnsmasq, measured
# on this machine in one run.
#
# Each server answers the same 1,000 names n0000.internal .. n0999.internal
# (A 10.9.x.y, TTL 5) on its own loopback port, pinned to core 0 with
# taskset; dnsperf runs on core 1. The query file is 90% of those names and
# 10% names under .internal that do not exist (NXDOMAIN from each server
# itself: nothing is forwarded, mesh's upstream is a dead loopback port).
#
#   mesh     bench/meshdns (the resolver package alone, GOMAXPROCS 1 by the
#            pinning)
#   unbound  one thread, local-zone "internal." static with local-data lines
#            and the zone's SOA, foreground, no chroot
#   dnsmasq  --no-resolv --no-hosts --addn-hosts=FILE --local=/internal/
#            --local-ttl=5, foreground (-k)
#
# Figures, for each server:
#   max QPS  dnsperf -l DURATION with no rate limit (defaults: 1 client, 100
#            queries outstanding), ROUNDS times, the servers taking turns
#            each round; the median is printed with every round's figure.
#   p99      at a fixed RATE (dnsperf -Q RATE -l DURATION -v): Debian's
#            dnsperf 2.10 has no latency histogram, so -v prints each
#            answer's latency and the 99th percentile is read from the
#            sorted list; lost queries are counted, not in the percentile.
#            Median over the rounds too.
# then the ratios mesh/unbound and mesh/dnsmasq (QPS: higher is better for
# mesh; p99: lower is better for mesh).
#
# Installs what it lacks (dnsperf unbound dnsmasq-base) with a policy-rc.d
# that refuses every service start, put back as it was afterwards. Starts no
# service; every process it starts is stopped when it ends.
#
# Usage: bench/dns.sh        (root; env ROUNDS=3 DURATION=10 RATE=20000)
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
RATE=${RATE:-20000}
NAMES=1000

die() { echo "dns.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (it installs packages with apt-get)"
command -v taskset >/dev/null || die "taskset missing (util-linux)"
command -v go >/dev/null || die "go missing"

work=$(mktemp -d)
pids=()
policy_backup=""
policy_written=0
restore_policy() {
	if [ "$policy_written" = 1 ]; then
		if [ -n "$policy_backup" ]; then mv -f "$policy_backup" /usr/sbin/policy-rc.d; else rm -f /usr/sbin/policy-rc.d; fi
		policy_written=0
	fi
}
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	restore_policy
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- install ---------------------------------------------------------------
need=()
command -v dnsperf >/dev/null || need+=(dnsperf)
command -v unbound >/dev/null || need+=(unbound)
command -v dnsmasq >/dev/null || need+=(dnsmasq-base)
if [ ${#need[@]} -gt 0 ]; then
	if [ -e /usr/sbin/policy-rc.d ]; then
		policy_backup=$work/policy-rc.d.orig
		cp -p /usr/sbin/policy-rc.d "$policy_backup"
	fi
	printf '#!/bin/sh\n# bench/dns.sh: no service starts while it installs\nexit 101\n' >/usr/sbin/policy-rc.d
	chmod 0755 /usr/sbin/policy-rc.d
	policy_written=1
	echo "installing ${need[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq --no-install-recommends "${need[@]}" >"$work/apt.log" 2>&1 || {
		apt-get update -qq >>"$work/apt.log" 2>&1 || true
		apt-get install -y -qq --no-install-recommends "${need[@]}" >>"$work/apt.log" 2>&1 ||
			{ tail -20 "$work/apt.log" >&2; die "apt-get install ${need[*]} failed"; }
	}
	restore_policy
fi
for t in dnsperf unbound dnsmasq; do command -v $t >/dev/null || die "$t not installed"; done

cores=$(nproc)
server_core=0 client_core=1
if [ "$cores" -lt 2 ]; then
	client_core=0
	echo "dns.sh: one core only: servers and dnsperf share core 0" >&2
fi

# --- the zone, three ways, and the queries -----------------------------------
go build -o "$work/meshdns" ./bench/meshdns

{
	for i in $(seq 0 $((NAMES - 1))); do
		printf '10.9.%d.%d n%04d.internal\n' $((i / 256)) $((i % 256)) "$i"
	done
} >"$work/hosts"

unbound_conf() { # port
	cat <<EOF
server:
  interface: 127.0.0.1
  port: $1
  num-threads: 1
  do-daemonize: no
  chroot: ""
  username: ""
  directory: "$work"
  pidfile: ""
  use-syslog: no
  logfile: ""
  verbosity: 0
  do-ip6: no
  access-control: 127.0.0.0/8 allow
  module-config: "iterator"
  local-zone: "internal." static
  local-data: "internal. 5 IN SOA ns.internal. hostmaster.internal. 1 3600 600 86400 5"
EOF
	for i in $(seq 0 $((NAMES - 1))); do
		printf '  local-data: "n%04d.internal. 5 IN A 10.9.%d.%d"\n' "$i" $((i / 256)) $((i % 256))
	done
	printf 'remote-control:\n  control-enable: no\n'
}

# 10,000 queries: every tenth a name that does not exist.
{
	for i in $(seq 0 9999); do
		if [ $((i % 10)) = 9 ]; then printf 'x%04d.internal A\n' "$i"; else printf 'n%04d.internal A\n' $((i % NAMES)); fi
	done
} >"$work/queries"

# --- start the servers -------------------------------------------------------
# ask PORT NAME: the rcode the server answers ("" when none).
ask() {
	printf '%s A\n' "$2" | dnsperf -s 127.0.0.1 -p "$1" -n 1 -t 1 2>/dev/null |
		sed -n 's/^ *Response codes: *\([A-Z]*\) 1 .*/\1/p'
}

# start NAME PORT: starts server NAME on PORT pinned to the server core;
# fails when it does not answer n0000 (NOERROR) and x0009 (NXDOMAIN).
start() {
	local name=$1 port=$2 pid
	case $name in
	mesh) taskset -c $server_core "$work/meshdns" -listen "127.0.0.1:$port" -upstream 127.0.0.1:9 >"$work/$name.log" 2>&1 & ;;
	unbound)
		unbound_conf "$port" >"$work/unbound.conf"
		taskset -c $server_core unbound -d -c "$work/unbound.conf" >"$work/$name.log" 2>&1 &
		;;
	dnsmasq)
		taskset -c $server_core dnsmasq -k -C /dev/null --no-resolv --no-hosts --addn-hosts="$work/hosts" \
			--port="$port" --listen-address=127.0.0.1 --bind-interfaces --local=/internal/ --local-ttl=5 \
			--pid-file= --user=root --group=root >"$work/$name.log" 2>&1 &
		;;
	esac
	pid=$!
	pids+=("$pid")
	for _ in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || return 1
		[ "$(ask "$port" n0000.internal)" = NOERROR ] && break
		sleep 0.05
	done
	[ "$(ask "$port" n0000.internal)" = NOERROR ] || { echo "dns.sh: $name does not answer n0000.internal" >&2; return 1; }
	[ "$(ask "$port" x0009.internal)" = NXDOMAIN ] || { echo "dns.sh: $name does not answer NXDOMAIN for x0009.internal" >&2; return 1; }
	eval "port_$name=$port"
}

servers=(mesh unbound dnsmasq)
for s in "${servers[@]}"; do
	ok=0
	for _ in 1 2 3 4 5; do
		port=$((20000 + RANDOM % 40000))
		if start "$s" "$port"; then ok=1; break; fi
	done
	[ $ok = 1 ] || { cat "$work/$s.log" >&2; die "$s would not start"; }
done

# --- measure -----------------------------------------------------------------
max_qps() { # port
	taskset -c $client_core dnsperf -s 127.0.0.1 -p "$1" -d "$work/queries" -l "$DURATION" 2>&1 |
		sed -n 's/^ *Queries per second: *\([0-9]*\).*/\1/p'
}
# p99 PORT: "p99_ms lost"
p99() {
	taskset -c $client_core dnsperf -s 127.0.0.1 -p "$1" -d "$work/queries" -l "$DURATION" -Q "$RATE" -v >"$work/verbose" 2>&1 || true
	local lost
	lost=$(sed -n 's/^ *Queries lost: *\([0-9]*\).*/\1/p' "$work/verbose")
	awk '$1 == ">" && $2 != "T" && NF == 5 {print $5}' "$work/verbose" | sort -g |
		awk -v lost="${lost:-?}" '{a[NR]=$1} END {if (NR == 0) {print "none", lost; exit} i=int(NR*0.99); if (i < NR*0.99) i++; printf "%.3f %s\n", a[i]*1000, lost}'
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
declare -A qps p99s lost
for r in $(seq 1 "$ROUNDS"); do
	for s in "${servers[@]}"; do
		port_var=port_$s
		qps[$s]+="$(max_qps "${!port_var}") "
		read -r p l <<<"$(p99 "${!port_var}")"
		p99s[$s]+="$p "
		lost[$s]+="$l "
	done
done

# --- report ------------------------------------------------------------------
echo "bench/dns.sh: $NAMES names, queries 90% hits / 10% NXDOMAIN, UDP on 127.0.0.1"
echo "servers on core $server_core, dnsperf on core $client_core ($cores cores, $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1), load average at start: $load_start)"
echo "$(dnsperf -h 2>&1 | sed -n 's/^Version /dnsperf /p'); $(unbound -V 2>/dev/null | sed -n 's/^Version /unbound /p'); $(dnsmasq --version | head -1 | cut -d' ' -f1-3); $(go version | cut -d' ' -f3)"
echo "$ROUNDS rounds, servers in turn; max QPS over ${DURATION}s unlimited; p99 at ${RATE} QPS over ${DURATION}s; median of rounds"
echo
printf '%-8s %10s  %-28s %10s  %-22s %s\n' server "max QPS" "(each round)" "p99 ms" "(each round)" "lost at ${RATE}"
declare -A mq mp
for s in "${servers[@]}"; do
	read -ra q <<<"${qps[$s]}"
	read -ra p <<<"${p99s[$s]}"
	mq[$s]=$(median "${q[@]}")
	mp[$s]=$(median "${p[@]}")
	printf '%-8s %10s  %-28s %10s  %-22s %s\n' "$s" "${mq[$s]}" "(${q[*]})" "${mp[$s]}" "(${p[*]})" "${lost[$s]% }"
done
echo
for other in unbound dnsmasq; do
	awk -v a="${mq[mesh]}" -v b="${mq[$other]}" -v pa="${mp[mesh]}" -v pb="${mp[$other]}" -v o="$other" \
		'BEGIN {printf "mesh/%-8s QPS %.2fx   p99 %.2fx (below 1 is faster)\n", o, a/b, pa/pb}'
done
