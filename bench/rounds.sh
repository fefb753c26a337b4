#!/usr/bin/env bash
# A sitting of rc-bench in rounds, optionally beside a peer, with the medians the README quotes.
#
#   bench/rounds.sh [BUILD_DIR ...]          (default: build; builds rc-bench if it is missing)
#
# Each round runs, for every BUILD_DIR in turn: plain_seq, plain_burst, throttle_open, keys and
# events, then plain_burst on 2 threads and keys_burst on 1 and 2 threads. Absolute speed on a
# virtual machine swings from run to run, so what a sitting reports is per-round ratios and their
# medians: each build's scenarios over the peer's matching ones (when RC_PEER is set), events'
# time per exchange over throttle_open's, two threads over one, and every further BUILD_DIR over
# the first (to compare two builds of the code, e.g. -DRC_UNITY_BUILD=OFF against ON). The events
# scenario measures throttle_open beside itself, in the same process (its over_throttle_open): that
# ratio is quoted first; the one across the round's separate runs is printed after it.
#
# RC_ROUNDS sets the rounds (default 3); RC_N=N runs every scenario with --n N (default: each
# scenario's own, which the README's figures use). RC_PACING=N adds N runs of the pacing scenario
# (real time, about 3 s each) with the first BUILD_DIR after the rounds, and prints each run's p99
# lateness, its most admitted in a 1 s window and the bare OS timer's p99 lateness beside it;
# RC_PACING_RACE=1 makes each of those runs a pair, without and with --timer-race on, alternating.
# RC_PEER=COMMAND runs COMMAND at the start of every round with the peer's scenario names as
# arguments: a-seq a-burst b-step-seq f-keyed-seq g-events-seq (the TypeScript original's names for
# plain_seq, plain_burst, throttle_open, keys and events). COMMAND must print one "name
# exchanges_per_second" line for each; a missing or zero figure leaves that ratio out.
#
# Prints every measurement as "R<round> <build> <scenario> <per_second>" (peer lines with build
# "peer"; "events_over_open" lines carry the events run's over_throttle_open instead), then a
# summary; a scenario that fails to run stops the script.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
source "$here/build_common.sh"
rounds="${RC_ROUNDS:-3}"
pacing="${RC_PACING:-0}"
race_modes=(off)
[[ "${RC_PACING_RACE:-0}" != 1 ]] || race_modes=(off on)
n_args=()
[[ -z "${RC_N:-}" ]] || n_args=(--n "$RC_N")
builds=("$@")
[[ ${#builds[@]} -gt 0 ]] || builds=(build)
for i in "${!builds[@]}"; do
  b="${builds[$i]}"
  [[ "$b" = /* ]] || b="$root/$b"
  ensure_built rounds "$b" rc_bench bench/rc-bench
  builds[i]="$b"
done
command -v python3 >/dev/null || { echo "rounds: python3 is not installed" >&2; exit 1; }

out="$(mktemp)"
trap 'rm -f "$out"' EXIT

# measure LINE_PREFIX BUILD ARGS...: one rc-bench run; prints "LINE_PREFIX per_second" (rounded;
# rc-bench prints its JSON on one line). Stops the script when the run fails or prints none.
measure() {
  local prefix="$1" b="$2" v
  shift 2
  v="$("$b/bench/rc-bench" "$@" "${n_args[@]}" | sed -n 's/.*"per_second":\([-+.0-9eE]*\).*/\1/p')"
  [[ -n "$v" ]] || { echo "rounds: rc-bench $* printed no per_second" >&2; exit 1; }
  awk -v p="$prefix" -v v="$v" 'BEGIN { printf "%s %.0f\n", p, v }'
}

# measure_events LINE_PREFIX BUILD: the events scenario, which runs throttle_open beside itself in
# the same process; prints "LINE_PREFIX events per_second" and "LINE_PREFIX events_over_open RATIO".
measure_events() {
  local prefix="$1" b="$2" line v r
  line="$("$b/bench/rc-bench" --scenario events "${n_args[@]}")"
  v="$(sed -n 's/.*"per_second":\([-+.0-9eE]*\).*/\1/p' <<<"$line")"
  r="$(sed -n 's/.*"over_throttle_open":\([-+.0-9eE]*\).*/\1/p' <<<"$line")"
  [[ -n "$v" ]] || { echo "rounds: rc-bench --scenario events printed no per_second" >&2; exit 1; }
  awk -v p="$prefix" -v v="$v" 'BEGIN { printf "%s events %.0f\n", p, v }'
  # A build from before the paired runs prints no over_throttle_open: its line is left out.
  [[ -z "$r" ]] || awk -v p="$prefix" -v r="$r" 'BEGIN { printf "%s events_over_open %.4f\n", p, r }'
}

# Builds are labelled B1, B2, ... in the order given.
for ((r = 1; r <= rounds; ++r)); do
  if [[ -n "${RC_PEER:-}" ]]; then
    # Word splitting is wanted: RC_PEER is a command with its own arguments.
    # shellcheck disable=SC2086
    $RC_PEER a-seq a-burst b-step-seq f-keyed-seq g-events-seq | awk -v r="$r" 'NF == 2 { print "R" r, "peer", $1, $2 }'
  fi
  for i in "${!builds[@]}"; do
    b="${builds[$i]}"
    tag="R$r B$((i + 1))"
    for sc in plain_seq plain_burst throttle_open keys; do
      measure "$tag $sc" "$b" --scenario "$sc"
    done
    measure_events "$tag" "$b"
    measure "$tag plain_burst@2" "$b" --scenario plain_burst --threads 2
    measure "$tag keys_burst@1" "$b" --scenario keys_burst --threads 1
    measure "$tag keys_burst@2" "$b" --scenario keys_burst --threads 2
  done
done | tee "$out"

echo "# $rounds round(s), ended $(date -u '+%Y-%m-%d %H:%M UTC'); builds:"
for i in "${!builds[@]}"; do echo "#   B$((i + 1)) ${builds[$i]}"; done
python3 - "$out" <<'EOF'
import collections, statistics, sys

runs = collections.defaultdict(dict)  # (build, scenario) -> {round: per_second}
for line in open(sys.argv[1]):
    r, build, scenario, value = line.split()
    if float(value) > 0:
        runs[(build, scenario)][int(r[1:])] = float(value)

def ratios(a, b, invert=False):
    """Per-round a / b (b / a with invert) over the rounds both have; and their median."""
    x, y = runs.get(a, {}), runs.get(b, {})
    per = [(y[r] / x[r]) if invert else (x[r] / y[r]) for r in sorted(x) if r in y]
    return per, (statistics.median(per) if per else None)

def show(label, per, med, digits=2):
    if med is not None:
        print(f"{label}: median {med:.{digits}f} (rounds: {', '.join(f'{v:.{digits}f}' for v in per)})")

peer_of = {"plain_seq": "a-seq", "plain_burst": "a-burst", "throttle_open": "b-step-seq",
           "keys": "f-keyed-seq", "events": "g-events-seq"}
builds = sorted({b for b, _ in runs if b != "peer"}, key=lambda b: int(b[1:]))
for b in builds:
    print(f"== {b}: medians per second")
    for sc in ["plain_seq", "plain_burst", "throttle_open", "keys", "events", "plain_burst@2",
               "keys_burst@1", "keys_burst@2"]:
        v = runs.get((b, sc))
        if v:
            print(f"  {sc} {statistics.median(v.values()):,.0f}")
    for sc, peer in peer_of.items():
        per, med = ratios((b, sc), ("peer", peer))
        show(f"  {sc} over {peer}", per, med, 0)
    per = [v for _, v in sorted(runs.get((b, "events_over_open"), {}).items())]
    if per:
        show("  events over throttle_open, time per exchange (beside each other in one process)", per,
             statistics.median(per))
    show("  events over throttle_open, time per exchange (separate processes)",
         *ratios((b, "events"), (b, "throttle_open"), invert=True))
    show("  plain_burst, 2 threads over 1", *ratios((b, "plain_burst@2"), (b, "plain_burst")))
    show("  keys_burst, 2 threads over 1", *ratios((b, "keys_burst@2"), (b, "keys_burst@1")))
    if b != builds[0]:
        for sc in ["plain_seq", "plain_burst", "throttle_open", "keys", "events", "keys_burst@1", "keys_burst@2"]:
            show(f"  {sc} over {builds[0]}", *ratios((b, sc), (builds[0], sc)))
EOF

if [[ "$pacing" -gt 0 ]]; then
  echo "== pacing, $pacing run(s) with B1: timer_race, p99 lateness (us), most in a 1 s window," \
    "OS timer p99 lateness (us)"
  for ((i = 1; i <= pacing; ++i)); do
    for mode in "${race_modes[@]}"; do
      "${builds[0]}/bench/rc-bench" --scenario pacing --timer-race "$mode" | python3 -c 'import json, sys
d = json.load(sys.stdin)
print("  %s %.0f %d %.0f" % (sys.argv[1], d["p99_lateness_us"], d["max_in_window"], d["os_timer_p99_lateness_us"]))' "$mode"
    done
  done
fi
