# shellcheck shell=bash
# Sourced by the bench scripts (rounds.sh, http_common.sh), with `root` set to the repository:
#   ensure_built NAME BUILD_DIR TARGET FILE
# builds TARGET in BUILD_DIR when FILE (a path inside BUILD_DIR) is not there yet, configuring
# BUILD_DIR first (Release, Ninja) when it has no build files; NAME prefixes the message saying so.
ensure_built() {
  [[ -x "$2/$4" ]] && return 0
  echo "$1: building $3 in $2" >&2
  [[ -f "$2/build.ninja" || -f "$2/Makefile" ]] || cmake -S "$root" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$2" --target "$3" >/dev/null
}
