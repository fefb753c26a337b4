#!/usr/bin/env bash
# Installs the Debian packages the build needs, only those missing. Quiet when all are present.
# clang 14 with its runtime libraries (libFuzzer) and clang-format 14: `make fuzz`, `make format`
# and .ci/run; the build itself uses g++. spdlog: the log step's sink; hiredis and redis-server: the
# Redis store, cache and streams, and the tests that start their own redis-server.
set -euo pipefail
packages=(g++ cmake ninja-build make libboost1.81-dev libfmt-dev nlohmann-json3-dev catch2
          libbenchmark-dev libmuparser-dev wrk libssl-dev openssl
          libhowardhinnant-date-dev tzdata clang-14 libclang-rt-14-dev clang-format-14
          libspdlog-dev libhiredis-dev redis-server)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
