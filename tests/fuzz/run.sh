#!/usr/bin/env bash
# Runs each fuzz target for SECONDS over its committed corpus (tests/fuzz/corpus/<target>/).
#   tests/fuzz/run.sh BUILD_DIR [SECONDS]
# New inputs go to BUILD_DIR/fuzz-corpus/<target>/ (the committed corpus is only read); a crash
# stops the run with a non-zero exit and leaves the input in BUILD_DIR/fuzz-artifacts/. To keep it:
# copy it to tests/fuzz/regressions/<target>/ (the suite replays it), then fix the bug.
set -euo pipefail
build=${1:?usage: tests/fuzz/run.sh BUILD_DIR [SECONDS]}
seconds=${2:-60}
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$build/fuzz-artifacts"
for target in http_request scenario http_options http_routes; do
  work="$build/fuzz-corpus/$target"
  mkdir -p "$work"
  args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16384 -print_final_stats=1
        -artifact_prefix="$build/fuzz-artifacts/$target-")
  case $target in
    http_request) args+=(-dict="$here/http_request.dict") ;;
    scenario) args+=(-dict="$here/scenario.dict") ;;
  esac
  echo "fuzz: $target for ${seconds}s"
  if ! "$build/tests/fuzz/fuzz_$target" "${args[@]}" "$work" "$here/corpus/$target" > "$build/fuzz-$target.log" 2>&1; then
    tail -n 60 "$build/fuzz-$target.log"
    echo "fuzz: $target FOUND A CRASH (input in $build/fuzz-artifacts/; log $build/fuzz-$target.log)" >&2
    exit 1
  fi
  grep -E "^stat::number_of_executed_units|^Done" "$build/fuzz-$target.log" | tr '\n' ' '; echo
done
