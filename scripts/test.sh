#!/usr/bin/env bash
# Every test of the crate, on a machine with only a Rust toolchain: installs what the tests
# need when it is missing, then runs `cargo test --all-features` (extra arguments are passed
# on, such as a test's name).
#
#   bash scripts/test.sh
#
# The Redis tests start their own redis-server on free loopback ports, and a Redis Cluster
# they join with redis-cli, so both must be on the PATH: Debian's and Ubuntu's
# `redis-server` and `redis-tools` packages, installed here through apt-get (with sudo
# when not root). Elsewhere, install Redis 6.2 or newer by hand; this script says so
# rather than fail 40 tests later.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "scripts/test.sh: the Redis tests need redis-server and redis-cli on the PATH," >&2
        echo "and this machine has no apt-get to install them: install Redis 6.2 or newer" >&2
        echo "(for example 'brew install redis' or 'dnf install redis'), then run this again." >&2
        exit 1
    fi
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        sudo="sudo"
    fi
    echo "==> apt-get install -y redis-server redis-tools (the Redis tests start their own servers)"
    $sudo apt-get update
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server redis-tools
fi
echo "==> $(redis-server --version); $(redis-cli --version)"

echo "==> cargo test --all-features $* (includes tests/model.rs: 1,024 model-based cases per property)"
exec cargo test --all-features "$@"
