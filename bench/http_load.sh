#!/usr/bin/env bash
# HTTP load benchmark: wrk against the api_gateway sample on 127.0.0.1, 50 connections, a few
# seconds per path: /bench/ok (answers 200 under a per-client limit it never reaches, with
# draft-7 RateLimit headers), /bench/limited (answers 429 past 10 a minute) and /bench/plain
# (answers the same 200 with no limit, as a fixed text: nginx's 200 path does the same).
#
#   bench/http_load.sh [BUILD_DIR]        (default: build; builds the sample if it is missing)
#
# Prints:  ok_rps N, ok_p99_ms N, limited_rps N, limited_p99_ms N, plain_rps N, plain_p99_ms N,
#          errors N
# where errors counts socket errors and every response that is neither 2xx nor 429, all runs.
# Throughput is measured without a Lua call per response (it would slow wrk, not the server);
# statuses are then checked in a 1 s run per path that counts every response (2xx, 429, other).
# Lines starting with '#' add detail: counts, the gateway's CPU time per request, the load, and
# how busy each server kept the core(s) it had (requests/s x CPU per request), and how busy wrk
# was (its own user + system time). A server well under 100% busy was waiting for wrk, not
# working: its rate is what wrk could send, and a ratio of two such rates measures the load
# generator, not the servers. With both near 100% (on loopback each side's system time includes
# part of the other's TCP work), the rate is what the two cores give, shared by server and wrk.
#
# When nginx is installed it then measures nginx (bench/nginx/nginx.conf: /bench/ok a plain 200,
# /bench/limited behind limit_req, 429 past 10 a minute) with RC_BENCH_THREADS workers, same load
# and duration, and prints nginx_*, its CPU per request (utime + stime of its workers over the
# run, per request, as for the gateway) and the gateway / nginx ratios: nginx_plain_ratio (the
# gateway's /bench/plain over nginx's 200: the same work), nginx_limited_ratio, and
# nginx_ok_ratio (the gateway's /bench/ok, which also counts a limit and sends its headers, over
# nginx's plain 200). RC_BENCH_NGINX=0 skips it.
#
# When node and npm are available it then measures Express with express-rate-limit doing the same
# work as /bench/ok and /bench/limited (bench/express, installed once into BUILD_DIR) in the same
# run, and prints express_*, the ratios and target_met: both Express ratios >= 20, the plain and
# limited nginx ratios >= 1 when nginx was measured, and zero errors. RC_BENCH_EXPRESS=0 skips it;
# When redis-server is installed the gateway also serves the two paths with their counts in Redis
# (rc::redis_store on a redis-server of its own, loopback): redis_ok_* and redis_limited_*, measured
# in the same run. RC_BENCH_REDIS=0 skips them.
# RC_BENCH_SECONDS sets the duration (default 3); RC_BENCH_THREADS the gateway's threads (1);
# RC_BENCH_PIN=0 leaves the placement of servers and wrk to the scheduler (see below).
#
# Bounded: every wrk run has a hard timeout, every server start 10 s; servers are stopped on exit.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
seconds="${RC_BENCH_SECONDS:-3}"
threads="${RC_BENCH_THREADS:-1}"
connections=50
# One core for the server under test, another for wrk, so that the scheduler never puts the two
# on one core for a while (it did, on 2 cores, and a run then read a third lower). Every server is
# pinned alike; RC_BENCH_PIN=0 leaves placement to the scheduler. Only with one server thread and
# at least two cores.
server_cpu=()
wrk_cpu=()
if [[ "${RC_BENCH_PIN:-1}" != 0 && "$threads" = 1 ]] && command -v taskset >/dev/null &&
  [[ "$(nproc)" -ge 2 ]]; then
  server_cpu=(taskset -c 0)
  wrk_cpu=(taskset -c 1)
fi

command -v wrk >/dev/null || { echo "http_load: wrk is not installed (apt-get install wrk)" >&2; exit 1; }
source "$here/http_common.sh" http_load "${1:-build}"

work="$(mktemp -d)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# start NAME COMMAND...: runs a server, waits for its "listening on http://127.0.0.1:PORT" line;
# sets $port and $server_pid.
start() {
  local name="$1"; shift
  "${server_cpu[@]}" "$@" >"$work/$name.log" 2>&1 &
  server_pid=$!
  pids+=("$server_pid")
  await_port "$work/$name.log" "$server_pid" 100 && return 0
  echo "http_load: $name did not start:" >&2
  cat "$work/$name.log" >&2
  exit 1
}

stop_server() {
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  pids=()
}

# CPU ticks (utime + stime, all threads) of the processes serving: $cpu_pids, else $server_pid.
cpu_pids=()
cpu_ticks() {
  local pid total=0
  for pid in "${cpu_pids[@]:-$server_pid}"; do
    total=$((total + $(awk '{ print $14 + $15 }' "/proc/$pid/stat")))
  done
  echo "$total"
}

# wrk_run DURATION URL [count]: one wrk run; prints its "name value" lines.
wrk_run() {
  WRK_COUNT_STATUS="${3:-0}" timeout $(($1 + 15)) \
    "${wrk_cpu[@]}" wrk -t1 -c"$connections" -d"${1}s" -s "$here/http_load.lua" "$2"
}

# load PREFIX URL EXPECTED: measures, then checks statuses; sets ${PREFIX}_rps, _p99_ms, _errors,
# _cpu_us, _2xx, _429. EXPECTED is "2xx" (every response must be 2xx) or "429" (2xx or 429).
load() {
  local prefix="$1" url="$2" expected="$3" out check before after wrk_cpu_s
  before="$(cpu_ticks)"
  # wrk's own user + system seconds (bash's `time` counts every process it waited for).
  out="$( { TIMEFORMAT='%U %S'; time wrk_run "$seconds" "$url"; } 2>"$work/wrk_time")"
  after="$(cpu_ticks)"
  wrk_cpu_s="$(awk 'END { print $1 + $2 }' "$work/wrk_time")"
  check="$(wrk_run 1 "$url" 1)"
  get() { awk -v k="$2" '$1 == k { print $2 }' <<<"$1"; }
  local requests rps errors
  requests="$(get "$out" wrk_requests)"
  rps="$(get "$out" wrk_rps)"
  errors=$(( $(get "$out" wrk_socket_errors) + $(get "$check" wrk_socket_errors) + $(get "$check" wrk_other) ))
  [[ "$expected" = 2xx ]] && errors=$(( errors + $(get "$out" wrk_non_2xx) + $(get "$check" wrk_429) ))
  printf -v "${prefix}_rps" '%s' "$rps"
  printf -v "${prefix}_p99_ms" '%s' "$(get "$out" wrk_p99_ms)"
  printf -v "${prefix}_errors" '%s' "$errors"
  printf -v "${prefix}_2xx" '%s' "$(get "$check" wrk_2xx)"
  printf -v "${prefix}_429" '%s' "$(get "$check" wrk_429)"
  printf -v "${prefix}_cpu_us" '%s' "$(awk -v t=$((after - before)) -v n="$requests" \
    'BEGIN { printf "%.1f", (n > 0 ? t * 1e6 / 100 / n : 0) }')"
  printf -v "${prefix}_wrk_cpu_us" '%s' "$(awk -v t="$wrk_cpu_s" -v n="$requests" \
    'BEGIN { printf "%.1f", (n > 0 ? t * 1e6 / n : 0) }')"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
# busy RPS CPU_US CORES: the share of its cores a server was busy, in per cent.
busy() { awk -v r="$1" -v c="$2" -v n="$3" 'BEGIN { printf "%.0f%%", r * c / 1e4 / n }'; }

redis_args=()
if [[ "${RC_BENCH_REDIS:-1}" != 0 ]] && command -v redis-server >/dev/null; then
  redis_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$work" --save "" --appendonly no \
    --logfile "$work/redis.log" &
  redis_pid=$!
  pids+=("$redis_pid")
  for _ in $(seq 1 100); do
    redis-cli -p "$redis_port" ping 2>/dev/null | grep -q PONG && break
    sleep 0.1
  done
  redis_args=(--redis "127.0.0.1:$redis_port")
fi

start gateway "$gateway" --port 0 --quiet --threads "$threads" "${redis_args[@]}"
load ok "http://127.0.0.1:$port/bench/ok" 2xx
load limited "http://127.0.0.1:$port/bench/limited" 429
load plain "http://127.0.0.1:$port/bench/plain" 2xx
if [[ ${#redis_args[@]} -gt 0 ]]; then
  load redis_ok "http://127.0.0.1:$port/bench/redis-ok" 2xx
  load redis_limited "http://127.0.0.1:$port/bench/redis-limited" 429
fi
stop_server
if [[ -n "${redis_pid:-}" ]]; then
  kill "$redis_pid" 2>/dev/null || true
  wait "$redis_pid" 2>/dev/null || true
fi

echo "ok_rps $ok_rps"
echo "ok_p99_ms $ok_p99_ms"
echo "limited_rps $limited_rps"
echo "limited_p99_ms $limited_p99_ms"
echo "plain_rps $plain_rps"
echo "plain_p99_ms $plain_p99_ms"
echo "errors $((ok_errors + limited_errors + plain_errors))"
if [[ ${#redis_args[@]} -gt 0 ]]; then
  echo "redis_ok_rps $redis_ok_rps"
  echo "redis_ok_p99_ms $redis_ok_p99_ms"
  echo "redis_limited_rps $redis_limited_rps"
  echo "redis_limited_p99_ms $redis_limited_p99_ms"
  echo "redis_errors $((redis_ok_errors + redis_limited_errors))"
  echo "# gateway CPU per request with the counts in Redis: ok ${redis_ok_cpu_us} us, limited ${redis_limited_cpu_us} us"
fi
echo "# $connections connections, ${seconds}s per path, $threads gateway thread(s), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# placement: ${server_cpu[*]:-any core} for each server, ${wrk_cpu[*]:-any core} for wrk"
echo "# gateway CPU per request: ok ${ok_cpu_us} us, limited ${limited_cpu_us} us, plain ${plain_cpu_us} us"
echo "# gateway busy ($threads core(s)): ok $(busy "$ok_rps" "$ok_cpu_us" "$threads"), limited $(busy "$limited_rps" "$limited_cpu_us" "$threads"), plain $(busy "$plain_rps" "$plain_cpu_us" "$threads")"
echo "# wrk busy (1 thread) against the gateway: ok $(busy "$ok_rps" "$ok_wrk_cpu_us" 1), limited $(busy "$limited_rps" "$limited_wrk_cpu_us" 1), plain $(busy "$plain_rps" "$plain_wrk_cpu_us" 1)"
echo "# status check (1 s each): ok $ok_2xx x 2xx, $ok_429 x 429; limited $limited_2xx x 2xx, $limited_429 x 429; plain $plain_2xx x 2xx"

if [[ "${RC_BENCH_NGINX:-1}" != 0 ]] && command -v nginx >/dev/null; then
  nginx_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  mkdir -p "$work/nginx/empty"
  sed -e "s|@WORKERS@|$threads|" -e "s|@PORT@|$nginx_port|" -e "s|@DIR@|$work/nginx|g" \
    "$here/nginx/nginx.conf" >"$work/nginx/nginx.conf"
  "${server_cpu[@]}" nginx -c "$work/nginx/nginx.conf" -p "$work/nginx" >"$work/nginx.log" 2>&1 &
  server_pid=$!
  pids+=("$server_pid")
  for _ in $(seq 1 100); do
    mapfile -t cpu_pids < <(pgrep -P "$server_pid" || true)
    [[ ${#cpu_pids[@]} -ge $threads ]] && curl -so /dev/null "http://127.0.0.1:$nginx_port/bench/ok" && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [[ ${#cpu_pids[@]} -lt $threads ]]; then
    echo "http_load: nginx did not start:" >&2
    cat "$work/nginx.log" >&2
    exit 1
  fi
  load nginx_ok "http://127.0.0.1:$nginx_port/bench/ok" 2xx
  load nginx_limited "http://127.0.0.1:$nginx_port/bench/limited" 429
  cpu_pids=()
  stop_server
  echo "nginx_ok_rps $nginx_ok_rps"
  echo "nginx_ok_p99_ms $nginx_ok_p99_ms"
  echo "nginx_limited_rps $nginx_limited_rps"
  echo "nginx_limited_p99_ms $nginx_limited_p99_ms"
  echo "nginx_errors $((nginx_ok_errors + nginx_limited_errors))"
  nginx_ok_ratio="$(ratio "$ok_rps" "$nginx_ok_rps")"
  nginx_plain_ratio="$(ratio "$plain_rps" "$nginx_ok_rps")"
  nginx_limited_ratio="$(ratio "$limited_rps" "$nginx_limited_rps")"
  echo "nginx_ok_ratio $nginx_ok_ratio"
  echo "nginx_plain_ratio $nginx_plain_ratio"
  echo "nginx_limited_ratio $nginx_limited_ratio"
  echo "# nginx ($threads worker(s)) CPU per request: ok ${nginx_ok_cpu_us} us, limited ${nginx_limited_cpu_us} us"
  echo "# nginx busy ($threads core(s)): ok $(busy "$nginx_ok_rps" "$nginx_ok_cpu_us" "$threads"), limited $(busy "$nginx_limited_rps" "$nginx_limited_cpu_us" "$threads")"
  echo "# wrk busy (1 thread) against nginx: ok $(busy "$nginx_ok_rps" "$nginx_ok_wrk_cpu_us" 1), limited $(busy "$nginx_limited_rps" "$nginx_limited_wrk_cpu_us" 1)"
  echo "# CPU per request, gateway / nginx: ok $(ratio "$ok_cpu_us" "$nginx_ok_cpu_us"), plain $(ratio "$plain_cpu_us" "$nginx_ok_cpu_us"), limited $(ratio "$limited_cpu_us" "$nginx_limited_cpu_us")"
  echo "# nginx status check (1 s each): ok $nginx_ok_2xx x 2xx, $nginx_ok_429 x 429; limited $nginx_limited_2xx x 2xx, $nginx_limited_429 x 429"
else
  echo "# nginx baseline skipped (RC_BENCH_NGINX=0, or no nginx)"
fi

if [[ "${RC_BENCH_EXPRESS:-1}" = 0 ]] || ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "# express baseline skipped (RC_BENCH_EXPRESS=0, or no node/npm)"
  exit 0
fi
baseline="$build/express-baseline"
if [[ ! -d "$baseline/node_modules/express-rate-limit" ]]; then
  mkdir -p "$baseline"
  cp "$here/express/package.json" "$baseline/"
  if ! timeout 180 npm install --prefix "$baseline" --no-audit --no-fund --silent >"$work/npm.log" 2>&1; then
    echo "# express baseline skipped: npm install failed ($(tail -1 "$work/npm.log"))"
    exit 0
  fi
fi
cp "$here/express/server.js" "$baseline/"
start express node "$baseline/server.js"
load express_ok "http://127.0.0.1:$port/bench/ok" 2xx
load express_limited "http://127.0.0.1:$port/bench/limited" 429
stop_server

ok_ratio="$(ratio "$ok_rps" "$express_ok_rps")"
limited_ratio="$(ratio "$limited_rps" "$express_limited_rps")"
echo "express_ok_rps $express_ok_rps"
echo "express_ok_p99_ms $express_ok_p99_ms"
echo "express_limited_rps $express_limited_rps"
echo "express_limited_p99_ms $express_limited_p99_ms"
echo "express_errors $((express_ok_errors + express_limited_errors))"
echo "# express CPU per request: ok ${express_ok_cpu_us} us, limited ${express_limited_cpu_us} us"
echo "# express busy (1 core): ok $(busy "$express_ok_rps" "$express_ok_cpu_us" 1), limited $(busy "$express_limited_rps" "$express_limited_cpu_us" 1)"
echo "# wrk busy (1 thread) against Express: ok $(busy "$express_ok_rps" "$express_ok_wrk_cpu_us" 1), limited $(busy "$express_limited_rps" "$express_limited_wrk_cpu_us" 1)"
echo "ok_ratio $ok_ratio"
echo "limited_ratio $limited_ratio"
met=no
if awk -v a="$ok_ratio" -v b="$limited_ratio" -v c="${nginx_plain_ratio:-1}" -v d="${nginx_limited_ratio:-1}" \
  'BEGIN { exit !(a >= 20 && b >= 20 && c >= 1 && d >= 1) }' && [[ $((ok_errors + limited_errors + plain_errors)) -eq 0 ]]; then
  met=yes
fi
echo "target_met $met"
