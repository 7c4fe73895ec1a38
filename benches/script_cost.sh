#!/bin/bash
# What each Redis limiter script costs Redis, granted and refused, beside a plain INCR
# (issue 15, part 4): the scripts as the limiters send them (src/redis/lua, put together
# as src/redis/scripts.rs does), and the token bucket's and the fixed window's with the
# candidate storage of benches/script_cost/string_state.lua (one string per key, GET then
# SET with PX, instead of HMGET, HSET and PEXPIRE).
#
#   benches/script_cost.sh             # redis-benchmark: requests/s, and Redis's µs per call
#   benches/script_cost.sh callgrind   # instructions per call, under callgrind: load-proof
#
# It starts its own redis-server (PORT, 6479 unless set), loads each script with
# SCRIPT LOAD, and runs `redis-benchmark -n 200000 -c 50 EVALSHA <sha> 1 <key> <args>`
# on a key of its own: granted, a bucket gaining a thousand tokens a microsecond (and a
# window of 2^40); refused, a bucket of one token an hour (a window of one an hour), its
# one token taken first. The several-keys script (`redis::all`) decides a token bucket and
# a fixed window together, both granting or both refusing; a lease takes one token.
# Under callgrind each line is 5,000 calls from one connection,
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

# The one-key script of `algorithm` (a file in src/redis/lua) of tag `tag`, as
# src/redis/scripts.rs puts it together; with `string`, the candidate's storage after the
# prelude, and the algorithm reading through it.
assemble() {
  local algorithm=$1 tag=$2 storage=${3:-hash} text
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
  printf 'local decide, commit = %s_decide, %s_commit\n' "$tag" "$tag"
  cat "$lua/one_key.lua"
}

# One line: `label`, then the command, run once before (to take a refused bucket's token).
measure() {
  local label=$1
  shift
  redis-cli -p "$port" "$@" >/dev/null
  if [ "$mode" = callgrind ]; then
    local calls=5000
    callgrind_control -z "$server" >/dev/null 2>&1
    redis-benchmark -p "$port" -n "$calls" -c 1 -q "$@" >/dev/null
    callgrind_control -d "$server" >/dev/null 2>&1
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

# A script's lines: granted and refused, each on keys of its own (`keys` of them).
script() {
  local label=$1 text=$2 keys=$3 granted=$4 refused=$5 sha names
  sha=$(redis-cli -p "$port" SCRIPT LOAD "$text")
  for outcome in granted refused; do
    names=$(seq -f "$outcome:${label// /_}:%g" "$keys")
    local arguments=$granted
    [ "$outcome" = refused ] && arguments=$refused
    # shellcheck disable=SC2086 # the names and arguments are words
    measure "$label, $outcome" EVALSHA "$sha" "$keys" $names $arguments
    # Each measured what it says: the script grants, or refuses, as the line is named.
    # shellcheck disable=SC2086
    expect "$label" "$([ "$outcome" = granted ] && echo 1 || echo 0)" \
      EVALSHA "$sha" "$keys" $names $arguments
  done
  printf '%-32s its state: a %s\n' "$label" "$(redis-cli -p "$port" TYPE "refused:${label// /_}:1")"
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
  script "token bucket ($storage)" "$(assemble token_bucket tb $storage)" 1 \
    "tb 1000000 1000 1" "tb 3600000000 1 3600000000"
  script "fixed window ($storage)" "$(assemble fixed_window fw $storage)" 1 \
    "fw 1099511627776 1000000 1" "fw 1 3600000000 1"
done
script "sliding log" "$(assemble sliding_log sl)" 1 \
  "sl 1099511627776 1000000 1" "sl 1 3600000000 1"
script "several keys (tb and fw)" \
  "$(cat "$lua/prelude.lua" "$lua/token_bucket.lua" "$lua/fixed_window.lua" \
    "$lua/sliding_log.lua" "$lua/several_keys.lua")" 2 \
  "tb 1000000 1000 1 fw 1099511627776 1000000 1" \
  "tb 3600000000 1 3600000000 fw 1 3600000000 1"
# A lease of the token bucket (what a leased front asks for once per batch) of one token.
script "lease" "$(cat "$lua/prelude.lua" "$lua/token_bucket.lua" "$lua/lease.lua")" 1 \
  "take 1000000 1000 1 1 1 0" "take 3600000000 1 3600000000 1 1 0"
