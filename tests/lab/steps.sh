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
  printf '  %-46s %9s  %s\n' total "$total" "$( ((rc == 0)) && echo ok || echo FAILED)"
}
trap 'table; rm -f "$rows" "$rows".sub' EXIT
trap 'rc=130; exit 130' INT TERM

for step in "$@"; do
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
