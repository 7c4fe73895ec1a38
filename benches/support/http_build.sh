# Shell functions shared by benches/http_wrk.sh and benches/support/http_callgrind.sh:
# sourced, not run.

# Installs the apt package `package` unless the command `command` is there already.
need() {
  local command=$1 package=$2
  if ! command -v "$command" >/dev/null; then
    echo "$command is missing: installing $package with apt-get" >&2
    apt-get install -y "$package" >&2
  fi
}

# Builds the benchmark `name` (benches/NAME.rs, feature axum) with the bench profile, in
# the checkout `root` (`cargo bench --features axum --bench NAME --no-run`), and prints
# the path of its executable. Cargo's output goes to stderr.
build_bench() {
  local root=$1 name=$2 executable build
  build=(cargo bench --features axum --bench "$name" --no-run)
  echo "building: ${build[*]}" >&2
  # cargo names the executable on stderr: "Executable benches/NAME.rs (path)".
  executable=$(cd "$root" && "${build[@]}" 2>&1 | tee /dev/stderr |
    sed -n "s/.*Executable benches\/$name\.rs (\(.*\))\$/\1/p" | tail -n 1)
  case $executable in "" | /*) ;; *) executable=$root/$executable ;; esac
  if [ -z "$executable" ] || [ ! -x "$executable" ]; then
    echo "could not find the $name executable in cargo's output" >&2
    return 1
  fi
  echo "$executable"
}
