#!/usr/bin/env bash
# The edge (the edge kind, served by a host of the real binary) against the
# backend alone and against Caddy as the same reverse proxy with the same
# certificate, measured on this machine in one run; then the edge host's
# RSS with 0 and NAMES public names, and the time from a name entering the
# roster to its first HTTPS answer, certificates from Pebble.
#
# The mesh, on loopback: mesh genesis (controller and host alpha in one
# process), and beta, a host of its own (mesh host --join: a launcher and
# its child, the process that runs the edge), assigned examples/edge with
# http and https on loopback ports and Pebble as its ACME CA. Pebble and
# pebble-challtestsrv (every name -> 127.0.0.1) are built from go.mod's
# tools and validate for real on the edge's ports. The routes are on alpha,
# with public names and no container: each forwards to the backend,
# bench/edgeload -serve, a Go server answering a 23-byte page.
#
# Figures:
#   first answer  for 5 names, one at a time: mesh push of the route that
#                 brings the name, from the push's start to the name's first
#                 200 over HTTPS (a new connection every 20 ms, the chain
#                 verified against Pebble's root); then NAMES-5 names in one
#                 push, to the last one's first answer (certmagic asks its
#                 CA for at most 10 orders in 10 s)
#   RSS           VmRSS of beta's host (the launcher's child) with the edge
#                 assigned and no public name, and with NAMES names served,
#                 each the median of 5 readings 1 s apart
#   requests/s, p50, p99
#                 bench/edgeload -load: CONNS HTTP/1.1 keep-alive connections
#                 (made before the clock starts), one request after another,
#                 for DURATION s, against:
#                   backend      the backend, plain HTTP
#                   backend-tls  a second backend serving HTTPS with the
#                                edge's certificate (Go's TLS alone)
#                   edge         https://www.example.test through the edge
#                   caddy        Debian's Caddy: the same name, tls with the
#                                certificate and key the edge obtained,
#                                reverse_proxy to the backend
#                 ROUNDS rounds, the peers taking turns; the median of the
#                 rounds, then the ratios edge/each peer.
# The servers (backends, beta's host, Caddy) run on core 0 and the load on
# core 1 (taskset), when there are two cores.
#
# Usage: bench/edge.sh   (env ROUNDS=3 DURATION=5 CONNS=32 NAMES=100;
# needs bin/mesh from make build, go, curl, taskset, and caddy: apt-get
# install caddy; KEEP=1 keeps the work directory and says where)
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
CONNS=${CONNS:-32}
NAMES=${NAMES:-100}
TIMED=5

die() { echo "edge.sh: $*" >&2; exit 1; }
bin=$PWD/bin/mesh
[ -x "$bin" ] || die "bin/mesh missing: run make build"
command -v caddy >/dev/null || die "caddy missing: apt-get install caddy (Debian's, 2.6)"
for t in go curl taskset; do command -v $t >/dev/null || die "$t missing"; done
[ "$NAMES" -gt "$TIMED" ] || die "NAMES must be more than $TIMED"

work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	if [ "${KEEP:-}" = 1 ]; then echo "edge.sh: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cores=$(nproc)
server_core=0 load_core=1
if [ "$cores" -lt 2 ]; then
	load_core=0
	echo "edge.sh: one core only: the servers and the load share core 0" >&2
fi

# --- build ------------------------------------------------------------------
load=$work/edgeload
go build -o "$load" ./bench/edgeload
go build -o "$work/pebble" github.com/letsencrypt/pebble/v2/cmd/pebble
go build -o "$work/challtestsrv" github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv
pebble_mod=$(go list -f '{{.Module.Dir}}' github.com/letsencrypt/pebble/v2/cmd/pebble)
minica=$pebble_mod/test/certs/pebble.minica.pem

read -r p_bus p_http p_dns p_dns2 p_edge_http p_edge_https p_caddy_http p_caddy_https \
	p_backend p_backend_tls p_pebble p_manage p_challdns p_challmanage <<<"$("$load" -ports 14 | tr '\n' ' ')"

# wait_for SECONDS WHAT CMD...: runs CMD every 50 ms until it succeeds.
wait_for() {
	local secs=$1 what=$2
	shift 2
	for _ in $(seq 1 $((secs * 20))); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.05
	done
	die "$what: not within ${secs}s"
}
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
start() { # start LOG CMD...: CMD in the background, its pid kept
	local log=$1
	shift
	"$@" >"$log" 2>&1 &
	pids+=($!)
}

# --- Pebble -------------------------------------------------------------------
start "$work/challtestsrv.log" "$work/challtestsrv" -dnsserver "127.0.0.1:$p_challdns" \
	-management "127.0.0.1:$p_challmanage" -http01 "" -https01 "" -tlsalpn01 "" -doh "" \
	-defaultIPv4 127.0.0.1 -defaultIPv6 ""
cat >"$work/pebble.json" <<EOF
{"pebble": {"listenAddress": "127.0.0.1:$p_pebble", "managementListenAddress": "127.0.0.1:$p_manage",
  "certificate": "$pebble_mod/test/certs/localhost/cert.pem", "privateKey": "$pebble_mod/test/certs/localhost/key.pem",
  "httpPort": $p_edge_http, "tlsPort": $p_edge_https, "ocspResponderURL": "", "externalAccountBindingRequired": false,
  "retryAfter": {"authz": 1, "order": 1},
  "profiles": {"default": {"description": "bench/edge.sh's", "validityPeriod": 7776000}}}}
EOF
start "$work/pebble.log" env PEBBLE_VA_NOSLEEP=1 PEBBLE_WFE_NONCEREJECT=0 "$work/pebble" \
	-config "$work/pebble.json" -dnsserver "127.0.0.1:$p_challdns"
acme=https://127.0.0.1:$p_pebble/dir
wait_for 30 "Pebble answering" curl -sf --cacert "$minica" "$acme"
curl -sf --cacert "$minica" "https://127.0.0.1:$p_manage/roots/0" >"$work/root.pem" ||
	die "Pebble's root: not given"

# --- the backends -----------------------------------------------------------------
start "$work/backend.log" taskset -c "$server_core" "$load" -serve "127.0.0.1:$p_backend"
wait_for 10 "the backend listening" listening "$p_backend"

# --- the mesh -------------------------------------------------------------------------
mkdir -p "$work/root"
start "$work/genesis.log" "$bin" genesis --dir "$work/ctl" --mesh bench --node alpha --docker none \
	--bus "127.0.0.1:$p_bus" --http "127.0.0.1:$p_http" --dns "127.0.0.1:$p_dns" --dns-upstream 127.0.0.1:9 \
	--address 127.0.0.1 --root "$work/root" --log-level warn
wait_for 60 "genesis healthy" curl -sf "http://127.0.0.1:$p_http/healthz"
export MESH_DIR=$work/ctl
token=$("$bin" token create beta 2>"$work/token.log")
start "$work/beta.log" taskset -c "$server_core" "$bin" host --dir "$work/beta" --join "$token" --docker none \
	--address 127.0.0.2 --dns "127.0.0.1:$p_dns2" --dns-upstream 127.0.0.1:9 --root "$work/root" --log-level warn
launcher=${pids[-1]}
wait_for 60 "beta joined" test -s "$work/beta/addrs.json"

# module DIR ROUTE NAME...: a module ROUTE with one route to the backend,
# on the given public names, and no container.
module() {
	local route=$1 list
	shift
	list=$(printf '"%s",' "$@")
	mkdir -p "$work/mods/$route"
	cat >"$work/mods/$route/module.json" <<EOF
{"name": "$route", "version": "1.0.0", "description": "bench/edge.sh's backend, run by hand on its node",
 "routes": [{"name": "$route", "port": $p_backend, "public": [${list%,}]}], "resources": []}
EOF
}
timed=(site t1 t2 t3 t4)
module site www.example.test
for r in "${timed[@]:1}"; do module "$r" "$r.example.test"; done
many=()
for i in $(seq 1 $((NAMES - TIMED))); do many+=("$(printf 'n%03d.example.test' "$i")"); done
module many "${many[@]}"
"$bin" module register examples/edge "$work"/mods/* >/dev/null
"$bin" assign --set "http=127.0.0.1:$p_edge_http" --set "https=127.0.0.1:$p_edge_https" \
	--set "acme_ca=$acme" --set "acme_roots=$minica" --set email=ops@example.org edge beta >/dev/null
"$bin" push >"$work/push.log" 2>&1 || { cat "$work/push.log" >&2; die "push of the edge failed"; }
wait_for 30 "the edge listening" listening "$p_edge_https"

# edge_pid: the process running beta's host, the launcher's child.
edge_pid() { pgrep -P "$launcher" | head -1; }
# rss: beta's host's VmRSS in KiB, the median of 5 readings 1 s apart.
rss() {
	local pid r=()
	pid=$(edge_pid)
	[ -n "$pid" ] || die "beta's host: no child of the launcher $launcher"
	for _ in 1 2 3 4 5; do
		sleep 1
		r+=("$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")")
	done
	printf '%s\n' "${r[@]}" | sort -n | sed -n 3p
}
rss0=$(rss)
edge_cmd="$(edge_pid): $(tr '\0' ' ' <"/proc/$(edge_pid)/cmdline" | cut -c1-60)"

# --- a name entering the roster, to its first HTTPS answer --------------------------
ns() { date +%s%N; }
first=() pushms=()
for r in "${timed[@]}"; do
	name=www.example.test
	[ "$r" = site ] || name=$r.example.test
	"$bin" assign "$r" alpha >/dev/null
	t0=$(ns)
	"$bin" push >"$work/push.log" 2>&1 || { cat "$work/push.log" >&2; die "push of $r failed"; }
	pushms+=($((($(ns) - t0) / 1000000)))
	out=$("$load" -wait "https://$name:$p_edge_https/" -connect "127.0.0.1:$p_edge_https" \
		-cacert "$work/root.pem" -since "$t0" -every 20ms -timeout 60s)
	first+=("$(sed -n 's/^last //p' <<<"$out")")
done
"$bin" assign many alpha >/dev/null
urls=$(printf "https://%s:$p_edge_https/," "${many[@]}")
t0=$(ns)
"$bin" push >"$work/push.log" 2>&1 || { cat "$work/push.log" >&2; die "push of many failed"; }
out=$("$load" -wait "${urls%,}" -connect "127.0.0.1:$p_edge_https" -cacert "$work/root.pem" \
	-since "$t0" -every 250ms -timeout 600s)
many_last=$(sed -n 's/^last //p' <<<"$out")
rss_n=$(rss)

# --- Caddy and the TLS backend, on the edge's certificate ------------------------------
crt=$(find "$work/beta/host/edge" -name www.example.test.crt | head -1)
key=${crt%.crt}.key
[ -s "$crt" ] && [ -s "$key" ] || die "the edge's certificate for www.example.test: not found under $work/beta/host/edge"
cp "$crt" "$work/www.crt"
cp "$key" "$work/www.key"
start "$work/backend-tls.log" taskset -c "$server_core" "$load" -serve "127.0.0.1:$p_backend_tls" -cert "$work/www.crt" -key "$work/www.key"
mkdir -p "$work/caddy"
cat >"$work/Caddyfile" <<EOF
{
	admin off
	auto_https disable_redirects
	http_port $p_caddy_http
	https_port $p_caddy_https
	storage file_system $work/caddy/storage
	log default {
		level ERROR
	}
}
https://www.example.test:$p_caddy_https {
	tls $work/www.crt $work/www.key
	reverse_proxy 127.0.0.1:$p_backend
}
EOF
start "$work/caddy.log" env HOME="$work/caddy" XDG_DATA_HOME="$work/caddy" XDG_CONFIG_HOME="$work/caddy" taskset -c "$server_core" caddy run --adapter caddyfile --config "$work/Caddyfile"
caddy_pid=${pids[-1]}
probe() { "$load" -wait "$1" -connect "127.0.0.1:$2" -cacert "$work/root.pem" -every 50ms -timeout 30s >/dev/null; }
probe "https://www.example.test:$p_caddy_https/" "$p_caddy_https" || { cat "$work/caddy.log" >&2; die "caddy does not answer"; }
probe "https://www.example.test:$p_backend_tls/" "$p_backend_tls" || die "the TLS backend does not answer"

# --- load ---------------------------------------------------------------------------------
peers=(backend backend-tls edge caddy)
declare -A url addr
url[backend]=http://127.0.0.1:$p_backend/ addr[backend]=127.0.0.1:$p_backend
url[backend-tls]=https://www.example.test:$p_backend_tls/ addr[backend-tls]=127.0.0.1:$p_backend_tls
url[edge]=https://www.example.test:$p_edge_https/ addr[edge]=127.0.0.1:$p_edge_https
url[caddy]=https://www.example.test:$p_caddy_https/ addr[caddy]=127.0.0.1:$p_caddy_https

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
declare -A rps p50 p99 errs
for _ in $(seq 1 "$ROUNDS"); do
	for p in "${peers[@]}"; do
		read -r _ r _ m50 _ m99 _ e _ <<<"$(taskset -c $load_core "$load" -load "${url[$p]}" -connect "${addr[$p]}" \
			-cacert "$work/root.pem" -c "$CONNS" -d "${DURATION}s")"
		rps[$p]+="$r " p50[$p]+="$m50 " p99[$p]+="$m99 " errs[$p]+="$e "
	done
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
rss_after=$(awk '/^VmRSS:/ {print $2}' "/proc/$(edge_pid)/status")
caddy_rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$caddy_pid/status" 2>/dev/null || echo 0)

# --- report -----------------------------------------------------------------------------------
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }
echo "bench/edge.sh: mesh $(git rev-parse --short HEAD), $(caddy version | cut -d' ' -f1), $(go version | cut -d' ' -f3), Pebble $(go list -m -f '{{.Version}}' github.com/letsencrypt/pebble/v2)"
echo "$cores cores, $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1); servers on core $server_core, load on core $load_core; load average $load_start at the load's start, $load_end at its end"
echo
echo "a name entering the roster (mesh push, one route) to its first HTTPS answer:"
for i in "${!timed[@]}"; do printf '  %-18s %6s ms   (the push itself: %s ms)\n' "${timed[$i]}" "${first[$i]}" "${pushms[$i]}"; done
echo "  median $(median "${first[@]}") ms"
echo "  $((NAMES - TIMED)) names in one push: the last first answered after $many_last ms"
echo
echo "beta's host (the edge), VmRSS: $(mib "$rss0") MiB with no public name, $(mib "$rss_n") MiB with $NAMES ($(mib $((rss_n - rss0))) MiB more; $(awk -v a="$rss0" -v b="$rss_n" -v n="$NAMES" 'BEGIN {printf "%.0f", (b - a) / n}') KiB a name)"
echo "  (pid $edge_cmd, under the launcher $launcher)"
echo "  after the load rounds: the edge's host $(mib "$rss_after") MiB, caddy $(mib "$caddy_rss") MiB (1 name)"
echo
echo "$CONNS HTTP/1.1 keep-alive connections, ${DURATION}s, $ROUNDS rounds in turn; median of rounds (each round)"
printf '%-12s %9s  %-24s %8s %8s  %-24s %s\n' peer "req/s" "" "p50 ms" "p99 ms" "" errors
declare -A mr m99
for p in "${peers[@]}"; do
	read -ra a <<<"${rps[$p]}"
	read -ra b <<<"${p50[$p]}"
	read -ra c <<<"${p99[$p]}"
	mr[$p]=$(median "${a[@]}")
	m99[$p]=$(median "${c[@]}")
	printf '%-12s %9s  %-24s %8s %8s  %-24s %s\n' "$p" "${mr[$p]}" "(${a[*]})" "$(median "${b[@]}")" "${m99[$p]}" "(${c[*]})" "${errs[$p]% }"
done
echo
for o in backend backend-tls caddy; do
	awk -v a="${mr[edge]}" -v b="${mr[$o]}" -v pa="${m99[edge]}" -v pb="${m99[$o]}" -v o="$o" \
		'BEGIN {printf "edge/%-12s req/s %.2fx   p99 %.2fx (below 1 is faster)\n", o, a / b, pa / pb}'
done
