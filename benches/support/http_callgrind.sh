#!/bin/bash
# Instructions per request through each HTTP layer of benches/http.rs, counted by
# callgrind: a figure the machine's load does not move, beside criterion's nanoseconds.
# For ours (per key + global) it also breaks the request down by what our `call` path
# calls: the key, the decision, the header fields, the response's drop.
#
#   benches/support/http_callgrind.sh                 # every case, about 10 minutes
#   CASES="hot_key refused" benches/support/http_callgrind.sh
#
# It builds benches/http.rs, then runs each benchmark alone under
# `valgrind --tool=callgrind --toggle-collect='*timed_request*'` with criterion's
# `--profile-time 1`: only the timed requests are counted (not the preloading, not
# criterion), and the count is divided by the number of timed requests. Instructions are
# not nanoseconds (a cache miss or a trapped CPUID costs one instruction), so read this
# with criterion's table.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cases=${CASES:-admitted refused hot_key 1M_keys}
variants=${VARIANTS:-ours governor-headers ours-off ours-per-key-off governor ours-per-key service}

# shellcheck source=benches/support/http_build.sh
source "$root/benches/support/http_build.sh"
need valgrind valgrind
bench_bin=$(build_bench "$root" http)

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# The calls of `timed_request` in a callgrind profile.
calls() {
  callgrind_annotate --inclusive=yes --tree=calling "$1" 2>/dev/null |
    sed -n 's/.*> *???:http::timed_request (\([0-9,]*\)x).*/\1/p' | tr -d , |
    awk '{ sum += $1 } END { print sum + 0 }'
}

# Every instruction the profile counted (all inside `timed_request`).
total() {
  callgrind_annotate "$1" 2>/dev/null | sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,
}

declare -A per_request
for case in $cases; do
  for variant in $variants; do
    out=$dir/$case.$variant
    valgrind --tool=callgrind --callgrind-out-file="$out" --toggle-collect='*timed_request*' \
      "$bench_bin" --bench --profile-time 1 "^http_layer/$case/$variant\$" >/dev/null 2>&1
    n=$(calls "$out")
    if [ "$n" -eq 0 ]; then
      echo "no timed request was counted for $case/$variant" >&2
      exit 1
    fi
    per_request[$case.$variant]=$(($(total "$out") / n))
    echo "$case/$variant: ${per_request[$case.$variant]} instructions per request ($n requests)" >&2
  done
done

echo
echo "Instructions per request (callgrind), the harness and trivial service included:"
echo
printf '| per request |'
for variant in $variants; do printf ' %s |' "$variant"; done
echo
printf '|---|'
for _ in $variants; do printf -- '---|'; done
echo
for case in $cases; do
  printf '| %s |' "$case"
  for variant in $variants; do printf ' %s |' "${per_request[$case.$variant]}"; done
  echo
done

# What ours (per key + global) spends a request on: every function inside the timed
# requests, with all it calls in turn (inclusive), per request, largest first; the
# harness's own frames left out.
if [[ " $variants " == *" ours "* ]]; then
  for case in $cases; do
    out=$dir/$case.ours
    n=$(calls "$out")
    echo
    echo "ours (per key + global), $case: instructions per request, inclusive, down to 20"
    echo
    callgrind_annotate --inclusive=yes --threshold=100 "$out" 2>/dev/null |
      awk -v n="$n" '
        /^ *[0-9,]+ \([ 0-9.%]+\)  / {
          count = $1; gsub(",", "", count)
          name = $0; sub(/^ *[0-9,]+ \([ 0-9.%]+\)  /, "", name); sub(/ \[[^]]*\]$/, "", name)
          sub(/^\?\?\?:/, "", name); sub(/^.*\.S:/, "", name)
          if (name ~ /^0x|below main|PROGRAM TOTALS|^main$|lang_start|rust_begin_short_backtrace|^http::(timed_request|bench|layers|main)|criterion|c_with_alloca|IntoIter|__libc_start/) next
          if (count / n < 20) next
          if (length(name) > 110) name = substr(name, 1, 107) "..."
          printf "  %6d  %s\n", count / n, name
        }'
  done
fi
echo
echo "commands:"
echo "  cargo bench --features axum --bench http --no-run"
echo "  valgrind --tool=callgrind --toggle-collect='*timed_request*' $bench_bin --bench --profile-time 1 '^http_layer/CASE/VARIANT\$'"
echo "  callgrind_annotate --inclusive=yes --tree=calling callgrind.out.PID"
