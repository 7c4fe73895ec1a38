#!/bin/bash
# The HTTP layer beside tower_governor under wrk (issues 22 and 33): requests per second
# of an axum server on loopback (benches/http_server.rs) with no limiter, tower_governor
# and ours, each admitting everything and refusing everything, like for like: ours with
# the RateLimit fields on beside tower_governor's use_headers(), ours with them off
# beside tower_governor as it ships.
#
#   benches/http_wrk.sh
#
# It installs wrk through apt if it is missing, builds the server with the benchmarks'
# release profile, starts one server per variant, each on a free loopback port, then
# runs `wrk -t2 -c64 -d8s` against each in turn, three rounds, keeps each variant's best
# run, and stops the servers. At the end it prints a table of requests per second with
# the ratios to tower_governor (and, admitting, to axum with no limiter), the load
# average before and after, and the commands it ran. About 4 minutes.
#
#   DURATION=8s CONNECTIONS=64 THREADS=2 RUNS=3   the wrk settings (these are the defaults)
#   VARIANTS="none ours-admit"                    a subset of the variants
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
duration=${DURATION:-8s}
connections=${CONNECTIONS:-64}
threads=${THREADS:-2}
runs=${RUNS:-3}
variants=${VARIANTS:-none governor-admit ours-off-admit governor-headers-admit ours-admit governor-refuse ours-off-refuse governor-headers-refuse ours-refuse}

# shellcheck source=benches/support/http_build.sh
source "$root/benches/support/http_build.sh"
need wrk wrk
server_bin=$(build_bench "$root" http_server)

dir=$(mktemp -d)
declare -A server address
stop_servers() {
  local pid
  for pid in "${server[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}
trap 'stop_servers; rm -rf "$dir"' EXIT

# Every variant's server at once, each on its own free port: an idle one costs nothing,
# and the rounds below can then take turns.
for variant in $variants; do
  "$server_bin" "$variant" >"$dir/$variant.out" 2>"$dir/$variant.err" &
  server[$variant]=$!
  # The server's first line names its address; give it 10 s.
  address[$variant]=
  for _ in $(seq 100); do
    address[$variant]=$(sed -n 's|^serving .* on \(http://[0-9.:]*/\)$|\1|p' "$dir/$variant.out")
    [ -n "${address[$variant]}" ] && break
    if ! kill -0 "${server[$variant]}" 2>/dev/null; then break; fi
    sleep 0.1
  done
  if [ -z "${address[$variant]}" ]; then
    echo "the $variant server did not start:" >&2
    cat "$dir/$variant.err" >&2
    exit 1
  fi
done

load_before=$(uptime)
declare -A best
for variant in $variants; do best[$variant]=0; done
# Round by round, each variant in turn: a change in the machine's load falls on every
# variant alike, rather than on whichever ran then.
for run in $(seq "$runs"); do
  for variant in $variants; do
    out=$dir/$variant.$run
    wrk -t"$threads" -c"$connections" -d"$duration" "${address[$variant]}" >"$out" 2>&1
    rate=$(sed -n 's/^Requests\/sec: *\([0-9.]*\)$/\1/p' "$out")
    refused=$(sed -n 's/^ *Non-2xx or 3xx responses: *\([0-9]*\)$/\1/p' "$out")
    total=$(sed -n 's/^ *\([0-9]*\) requests in .*/\1/p' "$out")
    if [ -z "$rate" ] || [ -z "$total" ]; then
      echo "wrk said nothing usable against $variant:" >&2
      cat "$out" >&2
      exit 1
    fi
    printf '%-16s run %d: %10.1f requests/s, %s of %s answered non-2xx\n' \
      "$variant" "$run" "$rate" "${refused:-0}" "$total" >&2
    # A variant meant to admit must not refuse, and one meant to refuse must refuse all
    # but the very first request it ever got: otherwise the figure measures the wrong
    # path.
    case $variant in
      *-refuse) want=$((total - (run == 1 ? 1 : 0))) ;;
      *) want=0 ;;
    esac
    if [ "${refused:-0}" != "$want" ]; then
      echo "$variant answered ${refused:-0} of $total requests non-2xx, $want expected" >&2
      exit 1
    fi
    if awk -v a="$rate" -v b="${best[$variant]}" 'BEGIN { exit !(a > b) }'; then
      best[$variant]=$rate
    fi
  done
done
load_after=$(uptime)

# The tower_governor figure a variant is compared with: the same traffic, the same
# header fields sent or not.
reference() {
  case $1 in
    ours-admit) echo governor-headers-admit ;;
    ours-refuse) echo governor-headers-refuse ;;
    ours-off-admit | none) echo governor-admit ;;
    ours-off-refuse) echo governor-refuse ;;
  esac
}
label() {
  case $1 in
    none) echo "axum with no limiter" ;;
    governor-admit) echo "tower_governor, admitting everything" ;;
    governor-refuse) echo "tower_governor, refusing everything" ;;
    governor-headers-admit) echo "tower_governor use_headers(), admitting everything" ;;
    governor-headers-refuse) echo "tower_governor use_headers(), refusing everything" ;;
    ours-admit) echo "ours (per client + global), fields on, admitting everything" ;;
    ours-refuse) echo "ours (per client + global), fields on, refusing everything" ;;
    ours-off-admit) echo "ours (per client + global), fields off, admitting everything" ;;
    ours-off-refuse) echo "ours (per client + global), fields off, refusing everything" ;;
  esac
}
ratio() {
  if [ -n "${best[$2]:-}" ] && [ "$1" != "$2" ]; then
    awk -v a="${best[$1]}" -v b="${best[$2]}" 'BEGIN { printf "%.3f", a / b }'
  else
    echo "—"
  fi
}

echo
echo "wrk -t$threads -c$connections -d$duration, best of $runs, on 127.0.0.1:"
echo
echo "| server | requests/s | ÷ tower_governor, like for like | ÷ no limiter |"
echo "|---|---|---|---|"
for variant in $variants; do
  ref=$(reference "$variant" || true)
  like=$([ -n "$ref" ] && ratio "$variant" "$ref" || echo "—")
  case $variant in
    *-admit) bare=$(ratio "$variant" none) ;;
    *) bare="—" ;;
  esac
  printf '| %s | %.1fk | %s | %s |\n' "$(label "$variant")" \
    "$(awk -v a="${best[$variant]}" 'BEGIN { print a / 1000 }')" "$like" "$bare"
done
echo
echo "load before: $load_before"
echo "load after:  $load_after"
echo
echo "commands:"
echo "  cargo bench --features axum --bench http_server --no-run"
echo "  $server_bin VARIANT      # prints its address, http://127.0.0.1:PORT/"
echo "  wrk -t$threads -c$connections -d$duration http://127.0.0.1:PORT/      # each variant in turn, $runs rounds, best kept"
