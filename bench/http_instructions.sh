#!/usr/bin/env bash
# Instructions the api_gateway sample executes per request, counted by valgrind's callgrind:
# within 2% from run to run of the same binary, whatever else the machine is doing, where
# requests/s on these virtual machines swing by a third between runs (bench/http_load.sh). It
# counts user space only (the gateway's code, the libraries it calls, malloc), not the kernel:
# what a change to our own request path moves.
#
#   bench/http_instructions.sh [BUILD_DIR]     (default: build; builds the sample if it is missing)
#
# Prints, for /bench/ok (200 under a limit), /bench/limited (429 after the first 10) and
# /bench/plain (200, no limit):
#   ok_instructions N, ok_allocations N, limited_instructions N, limited_allocations N,
#   plain_instructions N, plain_allocations N
# each per request: instructions (callgrind's Ir) and calls to malloc. The client is one keep-alive
# connection sending GET requests one after another (python3's http.client), so each request also
# pays the gateway's wait for the next one, which wrk's 50 connections mostly spare it. Counting
# starts after WARMUP requests (connection set-up, first-use allocations and the limited path's
# first 10 admissions are left out) and covers the next REQUESTS.
# RC_INSN_REQUESTS sets REQUESTS (default 2000), RC_INSN_WARMUP sets WARMUP (default 200).
# RC_INSN_KEEP=DIR keeps the dumps there (DIR/ok.callgrind, DIR/limited.callgrind,
# DIR/plain.callgrind) for callgrind_annotate, to see where a path's instructions and allocations
# go.
# Needs valgrind and python3; bounded: every step has a timeout, the gateway is stopped on exit.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
requests="${RC_INSN_REQUESTS:-2000}"
warmup="${RC_INSN_WARMUP:-200}"

for tool in valgrind callgrind_control python3; do
  command -v "$tool" >/dev/null || { echo "http_instructions: $tool is not installed" >&2; exit 1; }
done
source "$here/http_common.sh" http_instructions "${1:-build}"

work="$(mktemp -d)"
pid=""
cleanup() {
  [[ -n "$pid" ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# send PATH COUNT: COUNT sequential GETs on one keep-alive connection; fails on a status other
# than 200 or 429.
send() {
  timeout 600 python3 - "$port" "$1" "$2" <<'EOF'
import http.client, sys
port, path, count = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
for _ in range(count):
    conn.request("GET", path)
    response = conn.getresponse()
    response.read()
    if response.status not in (200, 429):
        sys.exit(f"http_instructions: {path} answered {response.status}")
EOF
}

# counts FILE: "IR MALLOCS", the Ir total and the calls to malloc in one callgrind dump. A dump
# names a function once, then refers to it by its number.
counts() {
  python3 - "$1" <<'PY'
import re, sys
names, callee, total, mallocs = {}, None, 0, 0
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"(c?)fn=\((\d+)\)(?: (.*))?", line)
    if m:
        if m.group(3):
            names[m.group(2)] = m.group(3).strip()
        if m.group(1):
            callee = m.group(2)
    elif line.startswith("calls=") and names.get(callee) == "malloc":
        mallocs += int(line.split()[0][len("calls="):])
    elif line.startswith("totals:"):
        total = int(line.split()[1])
print(total, mallocs)
PY
}

valgrind --tool=callgrind --callgrind-out-file="$work/cg.%p" --collect-atstart=yes \
  "$gateway" --port 0 --quiet >"$work/gateway.log" 2>"$work/valgrind.log" &
pid=$!
await_port "$work/gateway.log" "$pid" 300 || { echo "http_instructions: the gateway did not start:" >&2; cat "$work/gateway.log" "$work/valgrind.log" >&2; exit 1; }

# dumps: how many dumps callgrind has written so far.
dumps() { ls "$work" | grep -c '^cg\.' || true; }

# measure PREFIX PATH: warm up, zero the counters, send, dump; sets ${PREFIX}_instructions and
# ${PREFIX}_allocations (per request).
measure() {
  local prefix="$1" path="$2" dump before ir mallocs
  send "$path" "$warmup"
  timeout 60 callgrind_control -z "$pid" >/dev/null 2>&1
  send "$path" "$requests"
  before="$(dumps)"
  timeout 60 callgrind_control -d "$pid" >/dev/null 2>&1
  for _ in $(seq 1 100); do
    [[ "$(dumps)" -gt "$before" ]] && break
    sleep 0.1
  done
  # An older dump would hold other requests' counts: no figures rather than wrong ones.
  [[ "$(dumps)" -gt "$before" ]] ||
    { echo "http_instructions: callgrind wrote no dump for $path within 10 s" >&2; exit 1; }
  dump="$(ls -t "$work"/cg.* | head -1)"
  if [[ -n "${RC_INSN_KEEP:-}" ]]; then
    mkdir -p "$RC_INSN_KEEP"
    cp "$dump" "$RC_INSN_KEEP/$prefix.callgrind"
  fi
  read -r ir mallocs <<<"$(counts "$dump")"
  printf -v "${prefix}_instructions" '%s' "$(awk -v t="$ir" -v n="$requests" 'BEGIN { printf "%.0f", t / n }')"
  printf -v "${prefix}_allocations" '%s' "$(awk -v t="$mallocs" -v n="$requests" 'BEGIN { printf "%.1f", t / n }')"
}

measure ok /bench/ok
measure limited /bench/limited
measure plain /bench/plain
echo "ok_instructions $ok_instructions"
echo "ok_allocations $ok_allocations"
echo "limited_instructions $limited_instructions"
echo "limited_allocations $limited_allocations"
echo "plain_instructions $plain_instructions"
echo "plain_allocations $plain_allocations"
echo "# per request, $requests requests after $warmup warm-up ones, one keep-alive connection (python3 http.client)"
