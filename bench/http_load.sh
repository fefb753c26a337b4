#!/usr/bin/env bash
# HTTP load benchmark: wrk against the api_gateway sample on 127.0.0.1, 50 connections, a few
# seconds per path: /bench/ok (answers 200) and /bench/limited (answers 429 past 10 a minute).
#
#   bench/http_load.sh [BUILD_DIR]        (default: build; builds the sample if it is missing)
#
# Prints:  ok_rps N, ok_p99_ms N, limited_rps N, limited_p99_ms N, errors N
# where errors counts every response that is neither 2xx nor 429 plus socket errors, both runs.
# When node and npm are available it then runs the same two paths against Express with
# express-rate-limit (bench/express, installed once into BUILD_DIR) in the same run and prints
# express_ok_rps, express_limited_rps, the ratios and whether the target (10x, zero errors) holds.
# Set RC_BENCH_EXPRESS=0 to skip the baseline, RC_BENCH_SECONDS to change the duration (default 3),
# RC_BENCH_THREADS for the gateway's worker threads (default 1).
#
# Everything is bounded: each wrk run by its duration (plus a hard timeout), each server start by
# 10 s; the servers are stopped on exit, whatever happens.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
build="${1:-build}"
[[ "$build" = /* ]] || build="$root/$build"
seconds="${RC_BENCH_SECONDS:-3}"
threads="${RC_BENCH_THREADS:-1}"
connections=50

command -v wrk >/dev/null || { echo "http_load: wrk is not installed (apt-get install wrk)" >&2; exit 1; }
gateway="$build/samples/api_gateway"
if [[ ! -x "$gateway" ]]; then
  echo "http_load: building api_gateway in $build" >&2
  [[ -f "$build/build.ninja" || -f "$build/Makefile" ]] || cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" --target api_gateway >/dev/null
fi

work="$(mktemp -d)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# start NAME COMMAND...: runs a server, waits for its "listening on http://127.0.0.1:PORT" line,
# sets $port.
start() {
  local name="$1"; shift
  "$@" >"$work/$name.log" 2>&1 &
  pids+=("$!")
  port=""
  for _ in $(seq 1 100); do
    port="$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$work/$name.log" | head -1 | sed 's/.*://')" || true
    [[ -n "$port" ]] && return 0
    kill -0 "${pids[-1]}" 2>/dev/null || break
    sleep 0.1
  done
  echo "http_load: $name did not start:" >&2
  cat "$work/$name.log" >&2
  exit 1
}

stop_last() {
  local pid="${pids[-1]}"
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  unset 'pids[-1]'
}

# load PREFIX URL: one wrk run; sets ${PREFIX}_rps, _p99_ms, _errors.
load() {
  local prefix="$1" url="$2" out
  out="$(timeout $((seconds + 15)) wrk -t1 -c"$connections" -d"${seconds}s" -s "$here/http_load.lua" "$url")"
  local value
  value() { echo "$out" | awk -v k="$1" '$1 == k { print $2 }'; }
  printf -v "${prefix}_rps" '%s' "$(value wrk_rps)"
  printf -v "${prefix}_p99_ms" '%s' "$(value wrk_p99_ms)"
  printf -v "${prefix}_errors" '%s' "$(( $(value wrk_other) + $(value wrk_socket_errors) ))"
  printf -v "${prefix}_2xx" '%s' "$(value wrk_2xx)"
  printf -v "${prefix}_429" '%s' "$(value wrk_429)"
}

start gateway "$gateway" --port 0 --quiet --threads "$threads"
load ok "http://127.0.0.1:$port/bench/ok"
load limited "http://127.0.0.1:$port/bench/limited"
stop_last

echo "ok_rps $ok_rps"
echo "ok_p99_ms $ok_p99_ms"
echo "limited_rps $limited_rps"
echo "limited_p99_ms $limited_p99_ms"
echo "errors $((ok_errors + limited_errors))"
echo "# ok: $ok_2xx x 2xx, $ok_429 x 429; limited: $limited_2xx x 2xx, $limited_429 x 429 ($connections connections, ${seconds}s each, $threads gateway thread(s))"

if [[ "${RC_BENCH_EXPRESS:-1}" = 0 ]] || ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "# express baseline skipped (RC_BENCH_EXPRESS=0, or no node/npm)"
  exit 0
fi
baseline="$build/express-baseline"
if [[ ! -d "$baseline/node_modules/express-rate-limit" ]]; then
  mkdir -p "$baseline"
  cp "$here/express/package.json" "$here/express/server.js" "$baseline/"
  if ! timeout 180 npm install --prefix "$baseline" --no-audit --no-fund --silent >"$work/npm.log" 2>&1; then
    echo "# express baseline skipped: npm install failed ($(tail -1 "$work/npm.log"))"
    exit 0
  fi
fi
cp "$here/express/server.js" "$baseline/"
start express node "$baseline/server.js"
load express_ok "http://127.0.0.1:$port/bench/ok"
load express_limited "http://127.0.0.1:$port/bench/limited"
stop_last

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (b > 0 ? a / b : 0) }'; }
ok_ratio="$(ratio "$ok_rps" "$express_ok_rps")"
limited_ratio="$(ratio "$limited_rps" "$express_limited_rps")"
echo "express_ok_rps $express_ok_rps"
echo "express_ok_p99_ms $express_ok_p99_ms"
echo "express_limited_rps $express_limited_rps"
echo "express_limited_p99_ms $express_limited_p99_ms"
echo "express_errors $((express_ok_errors + express_limited_errors))"
echo "ok_ratio $ok_ratio"
echo "limited_ratio $limited_ratio"
met=no
if awk -v a="$ok_ratio" -v b="$limited_ratio" 'BEGIN { exit !(a >= 10 && b >= 10) }' && \
   [[ $((ok_errors + limited_errors)) -eq 0 ]]; then
  met=yes
fi
echo "target_met $met"
