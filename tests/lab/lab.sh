#!/usr/bin/env bash
# `make lab`: start (or reuse) the systemd lab container `dankfleet-lab` and run
# the real deploy against it. Writes only under .lab/, the build cache
# ($DANKFLEET_CACHE) and podman's storage. Extra args go to ansible-playbook.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
# shellcheck source=tests/lab/podman-env.sh
source tests/lab/podman-env.sh
cache=${DANKFLEET_CACHE:-$HOME/.cache/dankfleet}
name=${LAB_CONTAINER:-dankfleet-lab}
image=${LAB_IMAGE:-localhost/dankfleet-lab:bookworm}

report_dir="$repo/.lab/report"
mkdir -p "$report_dir"
rm -f "$report_dir/$name.json"

# Finer rows for tests/lab/steps.sh's table (when make runs us through it).
phase_t0=$(date +%s)
phase() {
  local now; now=$(date +%s)
  [[ -n ${STEPS_TIMINGS:-} ]] && printf '%s\tok\tlab: %s\n' "$(( now - phase_t0 ))" "$1" >> "$STEPS_TIMINGS"
  phase_t0=$now
}

# The lab shares the host's network with every molecule scenario: the `default`
# scenario deploys the same inventory (mirror 18170, endpoint 18470: inventory/lab
# and the lab_model_mirror role defaults; docs/DEVELOPING.md ports). Starting the
# lab beside it would break both; say who holds the ports instead.
# One podman call says it all: true (running), false (stopped) or absent.
running=$(podman inspect -f '{{.State.Running}}' "$name" 2>/dev/null || echo absent)
if [[ $running != true ]]; then
  for port in 18170 18470; do
    holder=$(ss -ltnpH "sport = :$port" 2>/dev/null | sed -n 's/.*users:((\(.*\))).*/\1/p' | head -1)
    if [[ -n $holder ]]; then
      echo "lab: 127.0.0.1:$port is already held ($holder), and the lab container $name is not running:" >&2
      echo "lab: another lab or the molecule 'default' scenario is using the lab's ports; wait for it, or stop it, then run make lab again." >&2
      exit 1
    fi
  done
fi

# The container's facts, cached by the first converge for the re-runs (see below); a new container
# starts without them.
fact_cache="$repo/.lab/fact-cache/$name"
if [[ $running == absent ]]; then
  rm -rf "$fact_cache"
  podman run -d --name "$name" --hostname "$name" --systemd=always --network host --cap-add SYS_ADMIN \
    -v "$cache:/srv/dankfleet-cache:ro" "$image" /sbin/init >/dev/null
elif [[ $running != true ]]; then
  podman start "$name" >/dev/null
fi
# A container that was already running booted in an earlier run; one started here waits for systemd.
if [[ $running != true ]]; then
  for _ in $(seq 1 60); do
    state=$(podman exec "$name" systemctl is-system-running 2>/dev/null || true)
    [[ $state == running || $state == degraded ]] && break
    sleep 1
  done
fi
phase "container up (systemd running)"
export ANSIBLE_CONFIG="$repo/ansible.cfg"
# Facts are gathered once per container and kept (make clean-lab drops them with it): the setup
# module is the slowest task of a no-change re-run, and the plan reads one fact of it (the RAM).
export ANSIBLE_GATHERING=smart ANSIBLE_CACHE_PLUGIN=ansible.builtin.jsonfile \
  ANSIBLE_CACHE_PLUGIN_CONNECTION="$fact_cache" ANSIBLE_CACHE_PLUGIN_TIMEOUT=0
# The lab's own prepare play (model mirror, ccache seed) and the deploy in one ansible-playbook: one
# start-up. The prepare play is tagged always, so a --tags still prepares. A dry run (--check, -C) of
# the deploy still reads from a real mirror: then the prepare play runs first on its own, for real.
dry_run=false
for arg in "$@"; do
  [[ $arg == --check || $arg =~ ^-[A-Za-z]*C[A-Za-z]*$ ]] && dry_run=true
done
if $dry_run; then
  ansible-playbook -i inventory/lab tests/lab/lab-prepare.yml
  ansible-playbook -i inventory/lab deploy-frank-medium.yml -e dankfleet_report_dir="$report_dir" "$@"
else
  ansible-playbook -i inventory/lab tests/lab/lab-prepare.yml deploy-frank-medium.yml \
    -e dankfleet_report_dir="$report_dir" "$@"
fi
phase "prepare (mirror, ccache) + deploy"

# What a user wants to see at the end: the endpoint, the fit the deploy planned
# (its own table, from its report), one real completion asked with the very
# curl line printed below, and how to tear it all down.
report="$report_dir/$name.json"
if [[ ! -f $report ]]; then
  echo "lab: the deploy wrote no report ($report): ran with --check or a --tags without serve?" >&2
  exit 0
fi
{ read -r url; read -r alias_; read -r key_required; } < <(python3 -c 'import json,sys
r = json.load(open(sys.argv[1]))
print(r["url"]); print(r["alias"]); print(r["api_key_required"])' "$report")
auth=""
if [[ $key_required == True ]]; then
  # shellcheck disable=SC2016 # printed for the user's shell to expand
  auth=' -H "Authorization: Bearer $LLAMA_API_KEY"'
fi
body="{\"model\": \"$alias_\", \"messages\": [{\"role\": \"user\", \"content\": \"Say hello.\"}], \"max_tokens\": 16, \"temperature\": 0}"
curl_line="curl -s $url/chat/completions -H 'Content-Type: application/json'$auth -d '$body'"
answer=""
if [[ -z $auth ]]; then
  answer=$(curl -s "$url/chat/completions" -H 'Content-Type: application/json' -d "$body" | python3 -c 'import json,sys; d=json.load(sys.stdin); t=d["choices"][0]["message"]["content"].strip()
print("".join(c if c.isprintable() else "?" for c in t), "[%s tokens]" % d["usage"]["completion_tokens"])') \
    || answer="(no answer: $?)"
fi
phase "completion from the endpoint"
python3 - "$report" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("\n== the lab endpoint is up")
print("endpoint:   %s  (model alias %s, on container %s)" % (r["url"], r["alias"], r["host"]))
print("fit (the deploy's plan%s):" % ("" if r["fits"] else ", DOES NOT FIT"))
for line in r["table"].splitlines():
    print("  " + line)
for w in r["warnings"]:
    print("  warning: " + w)
text = "".join(c if c.isprintable() else "?" for c in r["completion"])
print("deploy's completion: %s" % (text or "(none)"))
print("  (the lab model has random weights: its words are noise, the tokens are real)")
PY
# The release the deploy built in the container, and how much of it the host's
# ccache gave (tests/lab/build-llama-server.sh compiled the same objects).
podman exec "$name" cat /opt/llama.cpp/current/BUILD_STAMP.json 2>/dev/null | python3 -c '
import json, sys
try:
    o = json.load(sys.stdin)["outputs"]
except ValueError:
    sys.exit(0)
s = o.get("ccache_stats") or {}
hits = s.get("direct_cache_hit", 0) + s.get("preprocessed_cache_hit", 0)
print("llama.cpp:  built in the container in %ss (ccache: %d hits, %d misses)"
      % (round(o.get("build_seconds", 0)), hits, s.get("cache_miss", 0)))' || true
echo "completion now:      ${answer:-(needs the API key: set LLAMA_API_KEY and run the curl line)}"
echo "talk to it:"
echo "  $curl_line"
echo "tear it down:"
echo "  make clean-lab      # removes the container $name (the build cache stays)"
