#!/bin/bash
# What each Redis limiter script costs Redis, granted and refused, beside a plain INCR
# (issue 15, part 4): the scripts as the limiters send them (src/redis/lua), and the same
# with the candidate storage of benches/script_cost/string_state.lua (one string per key,
# GET then SET with PX, instead of HMGET, HSET and PEXPIRE).
#
#   benches/script_cost.sh             # redis-benchmark: requests/s, and Redis's µs per call
#   benches/script_cost.sh callgrind   # instructions per call, under callgrind: load-proof
#
# It starts its own redis-server (PORT, 6479 unless set), loads each script with
# SCRIPT LOAD, and runs `redis-benchmark -n 200000 -c 50 EVALSHA <sha> 1 <key> <args>`
# on a key of its own: granted, a bucket gaining a thousand tokens a microsecond (and a
# window of 2^40); refused, a bucket of one token an hour (a window of one an hour), its
# one token taken first. Under callgrind each line is 5,000 calls from one connection,
# the instructions the server ran (network included) divided by the calls.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
lua=$root/src/redis/lua
port=${PORT:-6479}
mode=${1:-benchmark}
dir=$(mktemp -d)
if [ "$mode" = callgrind ]; then
  valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.%n" \
    redis-server --port "$port" --save '' --appendonly no --dir "$dir" >"$dir/log" 2>&1 &
else
  redis-server --port "$port" --save '' --appendonly no --dir "$dir" >"$dir/log" 2>&1 &
fi
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$dir"' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.2; done

# The script of `algorithm` (a file in src/redis/lua); with `string`, the candidate's
# storage after the prelude, and the algorithm reading through it.
assemble() {
  local algorithm=$1 storage=${2:-hash} text
  text=$(cat "$lua/$algorithm.lua")
  if [ "$storage" = string ]; then
    text=${text//"redis.call('HMGET', key, "/"read_state(key, "}
    if [[ $text != *read_state* ]]; then
      echo "$algorithm.lua no longer reads its key with HMGET: update this bench" >&2
      exit 1
    fi
    cat "$lua/prelude.lua" "$root/benches/script_cost/string_state.lua"
  else
    cat "$lua/prelude.lua"
  fi
  printf '%s\n' "$text"
  cat "$lua/decision.lua"
}

# One line: `label`, then the command, run once before (to take a refused bucket's token).
measure() {
  local label=$1
  shift
  redis-cli -p "$port" "$@" >/dev/null
  if [ "$mode" = callgrind ]; then
    local calls=5000
    callgrind_control -z "$server" >/dev/null
    redis-benchmark -p "$port" -n "$calls" -c 1 -q "$@" >/dev/null
    callgrind_control -d "$server" >/dev/null
    local dump total
    dump=$(ls -t "$dir"/callgrind.* | head -1)
    total=$(grep -E '^(summary|totals):' "$dump" | head -1 | awk '{print $2}')
    printf '%-32s %8d instructions per call\n' "$label" $((total / calls))
  else
    local command rps usec
    command=$(echo "$1" | tr '[:upper:]' '[:lower:]')
    redis-cli -p "$port" CONFIG RESETSTAT >/dev/null
    rps=$(redis-benchmark -p "$port" -n 200000 -c 50 -q "$@" | tr '\r' '\n' |
      grep -o '[0-9.]* requests per second' | tail -1)
    usec=$(redis-cli -p "$port" INFO commandstats | tr -d '\r' |
      grep "^cmdstat_$command:" | grep -o 'usec_per_call=[0-9.]*')
    printf '%-32s %s, %s\n' "$label" "$rps" "$usec"
  fi
}

# A script's lines: granted and refused, on keys of their own.
script() {
  local label=$1 text=$2 tag=$3 granted=$4 refused=$5 sha
  sha=$(redis-cli -p "$port" SCRIPT LOAD "$text")
  # shellcheck disable=SC2086 # the arguments are words
  measure "$label, granted" EVALSHA "$sha" 1 "granted:$label" $tag $granted
  # shellcheck disable=SC2086
  measure "$label, refused" EVALSHA "$sha" 1 "refused:$label" $tag $refused
  # Each measured what it says: the script grants, and refuses, and the state is stored.
  # shellcheck disable=SC2086
  expect "$label" 1 EVALSHA "$sha" 1 "granted:$label" $tag $granted
  # shellcheck disable=SC2086
  expect "$label" 0 EVALSHA "$sha" 1 "refused:$label" $tag $refused
  printf '%-32s its state: a %s\n' "$label" "$(redis-cli -p "$port" TYPE "refused:$label")"
}

# Fails unless the script's reply starts with `first`.
expect() {
  local label=$1 first=$2 reply
  shift 2
  reply=$(redis-cli -p "$port" "$@" | head -1)
  if [ "$reply" != "$first" ]; then
    echo "$label: replied $reply, not $first" >&2
    exit 1
  fi
}

measure "INCR" INCR incr
for storage in hash string; do
  script "token bucket ($storage)" "$(assemble token_bucket $storage)" tb \
    "1000000 1000 1" "3600000000 1 3600000000"
  script "fixed window ($storage)" "$(assemble fixed_window $storage)" fw \
    "1099511627776 1000000 1" "1 3600000000 1"
done
# A lease of the token bucket (what a leased front asks for once per batch): granted.
sha=$(redis-cli -p "$port" SCRIPT LOAD "$(cat "$lua/prelude.lua" "$lua/token_bucket.lua" "$lua/lease.lua")")
measure "lease of one token, granted" EVALSHA "$sha" 1 lease take 1000000 1000 1 1 1 0
