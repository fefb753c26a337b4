# Sourced by bench/http_load.sh and bench/http_instructions.sh, as
#   source "$here/http_common.sh" NAME BUILD_DIR
# sets `root` (the repository), `build` (BUILD_DIR made absolute) and `gateway` (the api_gateway
# sample there, configured and built first if it is missing; NAME prefixes the message saying so),
# and defines await_port.
root="$(dirname "$here")"
build="$2"
[[ "$build" = /* ]] || build="$root/$build"
gateway="$build/samples/api_gateway"
source "$here/build_common.sh"
ensure_built "$1" "$build" api_gateway samples/api_gateway

# await_port LOG PID TENTHS: waits up to TENTHS tenths of a second for the server PID to write
# "listening on http://127.0.0.1:PORT" to LOG and sets $port; fails (port empty) if it does not,
# or if the server exits first.
await_port() {
  port=""
  for _ in $(seq 1 "$3"); do
    port="$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$1" | head -1 | sed 's/.*://')" || true
    [[ -n "$port" ]] && return 0
    kill -0 "$2" 2>/dev/null || break
    sleep 0.1
  done
  return 1
}
