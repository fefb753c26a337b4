# Sourced by bench/http_load.sh and bench/http_instructions.sh, as
#   source "$here/http_common.sh" NAME BUILD_DIR
# sets `root` (the repository), `build` (BUILD_DIR made absolute) and `gateway` (the api_gateway
# sample there, configured and built first if it is missing; NAME prefixes the message saying so).
root="$(dirname "$here")"
build="$2"
[[ "$build" = /* ]] || build="$root/$build"
gateway="$build/samples/api_gateway"
if [[ ! -x "$gateway" ]]; then
  echo "$1: building api_gateway in $build" >&2
  [[ -f "$build/build.ninja" || -f "$build/Makefile" ]] || cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" --target api_gateway >/dev/null
fi
