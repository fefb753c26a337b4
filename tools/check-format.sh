#!/usr/bin/env bash
# Fails when a tracked C++ file (*.cpp, *.hpp) is not formatted as .clang-format says.
#   tools/check-format.sh         check (clang-format --dry-run -Werror), as CI does
#   tools/check-format.sh --fix   reformat in place (`make format`)
# Uses clang-format 14 (tools/install-deps.sh installs it): another version may format differently.
set -euo pipefail
cd "$(dirname "$0")/.."
fmt=$(command -v clang-format-14 || command -v clang-format || true)
[ -n "$fmt" ] || { echo "check-format: clang-format not found (tools/install-deps.sh)" >&2; exit 2; }
mapfile -d '' files < <(git ls-files -z -- '*.cpp' '*.hpp')
[ ${#files[@]} -gt 0 ] || exit 0
if [ "${1:-}" = "--fix" ]; then
  "$fmt" -i "${files[@]}"
else
  "$fmt" --dry-run -Werror "${files[@]}"
fi
