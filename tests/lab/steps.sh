#!/usr/bin/env bash
# Run make targets one after the other, time each, and print where the time
# went as a table at the end (also when a step fails: the table so far, the
# failed step marked). Used by `make test`, `make test-fast` and `make lab`.
#
#   tests/lab/steps.sh TITLE STEP...
#
# A STEP is a make target, or `molecule/<scenario>` for one molecule scenario.
# A step may add finer rows of its own (lab.sh does) by appending
# "<seconds>\t<status>\t<name>" lines to $STEPS_TIMINGS; they are shown indented
# under it.
#
# `bg:<target>` starts the target in the background (its own process group, its
# output in .lab/steps-<target>.log) and the next steps run beside it;
# `wait:<target>` waits for it: its row gives its own seconds, and the wait its
# row (the time it added to the total). A failed background step prints the tail
# of its log and fails the run at its wait; an interrupted run stops it too.
# `make lab` compiles llama-server (CPU-bound) beside the venv, the image and the
# models (mostly downloads and unpacking).
set -uo pipefail

title=$1; shift
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo" || exit 1
rows=$(mktemp)
t0=$(date +%s)
rc=0
current=""
MAKE=${MAKE:-make}

# shellcheck disable=SC2317 # called from the EXIT trap
table() {
  local total=$(( $(date +%s) - t0 ))
  printf '\n%s: where the time went\n' "$title"
  printf '  %-46s %9s  %s\n' step seconds result
  printf '  %-46s %9s  %s\n' ---- ------- ------
  while IFS=$'\t' read -r secs status name; do
    printf '  %-46s %9s  %s\n' "$name" "$secs" "$status"
  done < "$rows"
  [[ -n $current ]] && printf '  %-46s %9s  %s\n' "$current" - interrupted
  [[ -n $bg_name ]] && printf '  %-46s %9s  %s\n' "$bg_name (background)" - interrupted
  printf '  %-46s %9s  %s\n' total "$total" "$( ((rc == 0)) && echo ok || echo FAILED)"
}
bg_name="" bg_pid="" bg_t0=0 bg_log=""
# shellcheck disable=SC2317 # called from the EXIT trap
stop_bg() {
  [[ -n $bg_pid ]] && kill -- "-$bg_pid" 2>/dev/null && wait "$bg_pid" 2>/dev/null
  return 0
}
trap 'stop_bg; table; rm -f "$rows" "$rows".sub "$rows".bgsub' EXIT
trap 'rc=130; exit 130' INT TERM

for step in "$@"; do
  case $step in
    bg:*)
      bg_name=${step#bg:}
      mkdir -p .lab
      bg_log=".lab/steps-$bg_name.log"
      : > "$rows.bgsub"
      bg_t0=$(date +%s)
      echo "=== $bg_name: in the background (log: $bg_log)"
      # setsid: a process group of its own, so an interrupted run stops the whole build
      STEPS_TIMINGS="$rows.bgsub" setsid -w "$MAKE" --no-print-directory "$bg_name" > "$bg_log" 2>&1 &
      bg_pid=$!
      continue ;;
    wait:*)
      [[ ${step#wait:} == "$bg_name" ]] || { echo "steps.sh: $step: no background step of that name" >&2; rc=2; exit 2; }
      current="waiting for $bg_name"
      s0=$(date +%s)
      wait "$bg_pid"
      rc=$?
      bg_pid=""
      status=$( ((rc == 0)) && echo ok || echo "FAILED (rc $rc)")
      printf '%s\t%s\t%s\n' "$(( $(date +%s) - bg_t0 ))" "$status" "$bg_name (background)" >> "$rows"
      while IFS=$'\t' read -r secs st name; do
        printf '%s\t%s\t  %s\n' "$secs" "$st" "$name" >> "$rows"
      done < "$rows.bgsub"
      printf '%s\t%s\t%s\n' "$(( $(date +%s) - s0 ))" "$status" "waiting for $bg_name" >> "$rows"
      name=$bg_name bg_name="" current=""
      if ((rc != 0)); then
        echo "=== $name failed (rc $rc); the end of $bg_log:" >&2
        tail -n 40 "$bg_log" >&2
        exit "$rc"
      fi
      continue ;;
  esac
  current=$step
  : > "$rows.sub"
  s0=$(date +%s)
  case $step in
    molecule/*) STEPS_TIMINGS="$rows.sub" $MAKE --no-print-directory molecule MOLECULE_SCENARIOS="${step#molecule/}" ;;
    *) STEPS_TIMINGS="$rows.sub" $MAKE --no-print-directory "$step" ;;
  esac
  rc=$?
  status=$( ((rc == 0)) && echo ok || echo "FAILED (rc $rc)")
  printf '%s\t%s\t%s\n' "$(( $(date +%s) - s0 ))" "$status" "$step" >> "$rows"
  while IFS=$'\t' read -r secs st name; do
    printf '%s\t%s\t  %s\n' "$secs" "$st" "$name" >> "$rows"
  done < "$rows.sub"
  current=""
  ((rc == 0)) || exit "$rc"
done
exit 0
