#!/usr/bin/env python
"""The collection's own figures: first converge vs a no-change re-run of the lab deploy, and the
fetch ratio against curl.

    python benchmarks/collection_perf.py [--fresh CMD] [--deploy CMD] [--pid CMD] [--no-fetch]
                                         [--fetch-args "--size-gib 1 --rounds 3"] [--out FILE]
                                         [--profile] [--floor N]

1. ``--fresh`` (optional, e.g. ``make clean-lab``) puts the lab back to nothing, so the next run
   is a first converge.
2. ``--deploy`` (default ``make lab``) runs twice. Per run: wall time, the PLAY RECAP's changed /
   failed / unreachable counts (summed over hosts; a command that runs several playbooks - make lab's
   prepare play and the deploy - the last recap's, with changed also summed over all of them as
   ``changed_all``), and the endpoint's MainPID read with ``--pid``
   afterwards (default: ``systemctl show`` of frank-medium.service, the lab's endpoint, in the lab container).
   The re-run must report changed=0 (in every recap) and leave MainPID where it was; otherwise this exits 1
   naming what moved - idempotence is a figure here, not a hope. Printed: both wall times, their
   ratio re-run / first converge (target <= 0.20: a no-change re-run is cheap), the tasks each ran
   (the recap's ok, which counts the changed ones too) and, from ``make lab``'s step table, where the re-run's time went.
   ``--profile`` turns on ``ansible.posix.profile_tasks`` for both runs and prints the re-run's
   slowest tasks and its host round trips: the tasks that ran for a host (the callback printed ok,
   changed or failed for them, not only skipping) and took the time of one (>= 0.2 s; a set_fact,
   assert or debug on the controller takes ~0.02 s) - what a no-change re-run should make fewest of
   (``round_trips`` of each run in the JSON). Each run's whole output is kept beside the JSON
   (``<out>.first.log``, ``.rerun.log``).
3. ``benchmarks/fetch_vs_curl.py`` (the fetch branch's benchmark), when present, runs with
   ``--fetch-args``; its median wall ratios gguf_fetch/curl are reported (target <= 1.10).

4. ``--floor N`` (after the runs, on the converged lab): one profiled playbook of N
   ``ansible.builtin.ping`` tasks and N controller-only ``debug`` tasks against ``--floor-host`` of
   ``--floor-inventory`` (default: the lab container): the median seconds of a task over the
   connection and on the controller alone - what one task costs at the least - and the playbook's
   time outside its tasks (start-up, parsing).

Commands run through ``bash -c`` from the repo root. Prints a table and writes JSON to
``--out`` (default benchmarks/results/collection-perf-<UTC stamp>.json).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# the lab's endpoint unit: inventory/lab's llama_server_service_name (frank-medium)
DEFAULT_PID = ("source tests/lab/podman-env.sh && "
               "podman exec dankfleet-lab systemctl show --property=MainPID --value frank-medium.service")
RECAP_LINE = re.compile(r"^(?P<host>\S+)\s*:\s*(?P<counts>(?:\w+=\d+\s*)+)$")
# ansible.posix.profile_tasks' summary: "<task name> ------------ 1.23s"
PROFILE_LINE = re.compile(r"^(?P<task>\S.*?) ?-+ (?P<s>[0-9]+\.[0-9]+)s$")
# tests/lab/steps.sh's table: "  <step>   <seconds>  <result>"
# the default callback's task headers and per-host results (ok/changed/failed/skipping: [host])
TASK_HEAD = re.compile(r"^(?:TASK|RUNNING HANDLER) \[(?P<task>.*)\] \*+\s*$")
TASK_RESULT = re.compile(r"^(?P<status>ok|changed|failed|fatal|skipping|unreachable|included): \[")
# a task that goes to the host takes at least this long (a round trip is ~0.3 s - the --floor figure -, a
# task on the controller ~0.02 s, a big filter or an argument spec check up to ~0.15 s)
ROUND_TRIP_S = 0.2
# ansible's own argument spec check (validate_argument_spec) runs on the controller, however long it takes
CONTROLLER_ONLY = re.compile(r"(?:^|: )Validating arguments against arg spec ")
STEPS_HEAD = re.compile(r"^(?P<title>.+): where the time went$")
STEPS_ROW = re.compile(r"^  (?P<step>\s*\S.*?)\s+(?P<s>[0-9]+)  (?P<result>\S.*)$")
RATIO_TARGET = 0.20
FETCH_LINE = re.compile(r"median gguf_fetch fsync=(?P<fsync>\w+):.*?wall ratio (?P<wall>[0-9.]+)"
                        r".*?cpu ratio (?P<cpu>[0-9.]+)")


def configured_callbacks(cfg: Path = REPO / "ansible.cfg") -> str:
    """The project's ansible.cfg callbacks_enabled ([defaults]), or ''."""
    import configparser
    parser = configparser.ConfigParser(inline_comment_prefixes=("#", ";"))
    parser.read(cfg)
    return parser.get("defaults", "callbacks_enabled", fallback="")


def parse_recap(text: str) -> dict:
    """The PLAY RECAP of an ansible-playbook run -> {hosts: {host: counts}, changed, failed, unreachable,
    recaps, changed_all}.

    The counts are the last recap's (the deploy's: a command may run several playbooks, each with its own
    recap); changed_all sums changed over every recap, so a playbook before the deploy (make lab's prepare
    play) cannot change something unseen. Raises ValueError when there is no recap (the command did not run
    a playbook to the end)."""
    hosts = {}
    in_recap = False
    recaps, changed_all = 0, 0
    for line in text.splitlines():
        if line.startswith("PLAY RECAP"):
            in_recap, hosts = True, {}  # the last recap wins
            recaps += 1
            continue
        if in_recap:
            match = RECAP_LINE.match(line.strip())
            if match:
                hosts[match.group("host")] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", match.group("counts"))}
                changed_all += hosts[match.group("host")].get("changed", 0)
            elif line.strip():
                in_recap = False
    if not hosts:
        raise ValueError("no PLAY RECAP in the output: the command did not run a playbook to its end")
    total = {key: sum(h.get(key, 0) for h in hosts.values()) for key in ("ok", "changed", "failed", "unreachable")}
    return dict(total, hosts=hosts, recaps=recaps, changed_all=changed_all)


def parse_profile(text: str) -> list:
    """profile_tasks' summaries -> [(task, seconds)] in the order printed. One ansible-playbook that runs
    several playbooks prints a summary after each, every one holding the tasks of the ones before: a
    summary that starts with the previous one adds only its own tail."""
    summaries, current = [], None
    for line in text.splitlines():
        match = PROFILE_LINE.match(line)
        if match:
            if current is None:
                current = []
                summaries.append(current)
            current.append((match.group("task"), float(match.group("s"))))
        elif current is not None:
            current = None
    tasks, previous = [], []
    for summary in summaries:
        tasks.extend(summary[len(previous):] if previous and summary[:len(previous)] == previous else summary)
        previous = summary
    return tasks


def parse_task_results(text: str) -> list:
    """The callback's output -> [(task, ran)] in the order run; ran: some host reported ok, changed,
    failed or unreachable (not only skipping; a meta task or an include reports neither: False)."""
    out = []
    for line in text.splitlines():
        head = TASK_HEAD.match(line)
        if head:
            out.append([head.group("task"), False])
            continue
        result = TASK_RESULT.match(line)
        if result and out and result.group("status") not in ("skipping", "included"):
            out[-1][1] = True
    return [tuple(x) for x in out]


def round_trips(tasks: list, results: list) -> dict:
    """Timed tasks + the callback's results -> the host round trips: tasks that ran (not skipped), took
    >= ROUND_TRIP_S and are not ansible's argument spec check. The two lists are matched in order by name;
    a timed task whose result is not found counts when it took that long."""
    trips, j = [], 0
    for task, seconds in tasks:
        ran = None
        for k in range(j, len(results)):
            if results[k][0] == task:
                ran, j = results[k][1], k + 1
                break
        if (ran is None or ran) and seconds >= ROUND_TRIP_S and not CONTROLLER_ONLY.search(task):
            trips.append({"task": task, "s": seconds})
    return {"count": len(trips), "seconds": round(sum(t["s"] for t in trips), 2), "tasks": trips}


def parse_steps(text: str) -> list:
    """The last steps.sh table in the output -> [{step, seconds, result}] (finer rows keep their indent)."""
    rows, in_table = [], False
    for line in text.splitlines():
        if STEPS_HEAD.match(line):
            rows, in_table = [], True
            continue
        if in_table:
            match = STEPS_ROW.match(line)
            if match and match.group("step") not in ("step", "----"):
                rows.append({"step": match.group("step"), "seconds": int(match.group("s")), "result": match.group("result").strip()})
            elif not line.strip() or (match is None and not line.startswith("  ")):
                in_table = False
    return rows


def profile_summary(tasks: list, top: int = 12) -> dict:
    """Timed tasks -> count, sum, how many went to the host (>= 0.1 s) and the slowest ones."""
    host = sorted(s for _, s in tasks if s >= 0.1)
    return {"tasks": len(tasks), "seconds": round(sum(s for _, s in tasks), 2),
            "host_tasks": len(host), "host_seconds": round(sum(host), 2),
            "host_median_s": host[len(host) // 2] if host else None,
            "slowest": [{"task": t, "s": s} for t, s in sorted(tasks, key=lambda x: -x[1])[:top]]}


def parse_fetch(text: str) -> list:
    """fetch_vs_curl.py's summary lines -> [{fsync, wall_ratio, cpu_ratio, met}]."""
    out = []
    for match in FETCH_LINE.finditer(text):
        wall = float(match.group("wall"))
        out.append({"fsync": match.group("fsync"), "wall_ratio": wall, "cpu_ratio": float(match.group("cpu")),
                    "met": wall <= 1.10})
    return out


def run(command: str, timeout: float, env: dict = None) -> tuple:
    t0 = time.monotonic()
    proc = subprocess.run(["bash", "-c", command], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})))
    return proc, time.monotonic() - t0


def deploy_once(label: str, deploy: str, pid: str, timeout: float, env: dict = None, log: Path = None) -> dict:
    proc, wall = run(deploy, timeout, env)
    text = proc.stdout + proc.stderr
    if log:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(text)
    if proc.returncode != 0:
        raise SystemExit(f"{label}: `{deploy}` exited {proc.returncode}; its last lines:\n" + "\n".join(text.splitlines()[-30:]))
    try:
        recap = parse_recap(text)
    except ValueError as exc:
        raise SystemExit(f"{label}: {exc}; last lines:\n" + "\n".join(text.splitlines()[-30:]))
    pid_proc, _ = run(pid, 60)
    main_pid = pid_proc.stdout.strip() if pid_proc.returncode == 0 else None
    timed = parse_profile(text)
    return {"run": label, "wall_s": round(wall, 1), "changed": recap["changed"], "ok": recap["ok"],
            "changed_all": recap["changed_all"], "recaps": recap["recaps"],
            "failed": recap["failed"], "unreachable": recap["unreachable"], "hosts": recap["hosts"],
            "main_pid": main_pid, "pid_error": None if main_pid else (pid_proc.stderr.strip() or "no output"),
            "steps": parse_steps(text), "profile": profile_summary(timed),
            "round_trips": round_trips(timed, parse_task_results(text)),
            "log": str(log) if log else None}


def ratio(first: dict, second: dict) -> dict:
    """The re-run's wall time over the first converge's, against the target."""
    value = round(second["wall_s"] / first["wall_s"], 3) if first["wall_s"] > 0 else None
    return {"value": value, "target": RATIO_TARGET, "met": value is not None and value <= RATIO_TARGET}


FLOOR_ENV = ("source tests/lab/podman-env.sh && export ANSIBLE_CONFIG=$PWD/ansible.cfg "
             "ANSIBLE_COLLECTIONS_PATH=$PWD/collections ANSIBLE_ROLES_PATH=$PWD/roles:$PWD/tests/lab/roles && ")


def task_floor(n: int, inventory: str, host: str, timeout: float) -> dict:
    """Seconds per task at the least, from one profiled run of n ping tasks (a module over the connection)
    and n debug tasks (the controller alone): the median of each kind, and what the run spent outside tasks."""
    import tempfile
    beside = Path(sys.executable).parent / "ansible-playbook"  # the venv's, when run with its python
    playbook = str(beside) if beside.is_file() else "ansible-playbook"
    tasks = ([{"name": f"floor ping {i}", "ansible.builtin.ping": {}} for i in range(n)]
             + [{"name": f"floor debug {i}", "ansible.builtin.debug": {"msg": "x"}} for i in range(n)])
    with tempfile.TemporaryDirectory() as tmp:
        book = Path(tmp) / "floor.yml"
        book.write_text(json.dumps([{"hosts": host, "gather_facts": False, "tasks": tasks}]))
        proc, wall = run(f"{FLOOR_ENV}{playbook} -i {inventory} {book}", timeout,
                         {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks",
                          "PROFILE_TASKS_TASK_OUTPUT_LIMIT": "all", "PROFILE_TASKS_SORT_ORDER": "none"})
    if proc.returncode != 0:
        raise SystemExit(f"floor: ansible-playbook exited {proc.returncode}:\n" + (proc.stdout + proc.stderr)[-2000:])
    timed = parse_profile(proc.stdout)

    def median(kind):
        values = sorted(s for t, s in timed if t.startswith(f"floor {kind} "))
        if len(values) != n:
            raise SystemExit(f"floor: {len(values)} {kind} task times in the profile, expected {n}")
        return values[n // 2]
    return {"tasks": n, "inventory": inventory, "host": host, "connection_s_per_task": median("ping"),
            "controller_s_per_task": median("debug"),
            "outside_tasks_s": round(wall - sum(s for _, s in timed), 2)}


def judge(first: dict, second: dict) -> list:
    """What a no-change re-run must not do."""
    problems = []
    changed = second["changed_all"]  # every recap's, the last (the deploy's) included
    if changed != 0:
        problems.append(f"the re-run changed {changed} task(s): not idempotent")
    if first["main_pid"] is None or second["main_pid"] is None:
        problems.append(f"MainPID could not be read ({first['pid_error'] or second['pid_error']})")
    elif first["main_pid"] != second["main_pid"]:
        problems.append(f"MainPID moved {first['main_pid']} -> {second['main_pid']}: the re-run restarted the service")
    elif first["main_pid"] in ("", "0"):
        problems.append("MainPID is 0: the service is not running after the deploy")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fresh", default="", help="command that resets the lab first (e.g. 'make clean-lab')")
    ap.add_argument("--deploy", default="make lab", help="the deploy command, run twice (default: make lab)")
    ap.add_argument("--pid", default=DEFAULT_PID, help="command printing the endpoint's MainPID")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds one deploy may take")
    ap.add_argument("--no-fetch", action="store_true", help="skip benchmarks/fetch_vs_curl.py")
    ap.add_argument("--fetch-args", default="--size-gib 1 --rounds 3")
    ap.add_argument("--out", default="", help="JSON result file")
    ap.add_argument("--profile", action="store_true",
                    help="time every task (ansible.posix.profile_tasks) and print the re-run's slowest")
    ap.add_argument("--floor", type=int, default=0, metavar="N",
                    help="after the runs, time N ping and N debug tasks: the per-task floor (0: skip)")
    ap.add_argument("--floor-inventory", default="inventory/lab")
    ap.add_argument("--floor-host", default="dankfleet-lab")
    args = ap.parse_args(argv)
    if args.floor == 1 or args.floor < 0:
        ap.error("--floor needs 2 tasks or more (0 skips it)")

    result = {"started": datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ"), "deploy": args.deploy,
              "fresh": args.fresh, "load": os.getloadavg(), "cores": os.cpu_count()}
    if args.fresh:
        proc, wall = run(args.fresh, args.timeout)
        if proc.returncode != 0:
            raise SystemExit(f"`{args.fresh}` exited {proc.returncode}:\n{proc.stderr[-2000:]}")
        result["fresh_wall_s"] = round(wall, 1)
    out = Path(args.out) if args.out else REPO / "benchmarks" / "results" / f"collection-perf-{result['started']}.json"
    env = {}
    if args.profile:
        # the environment's list replaces ansible.cfg's: keep what the project enables (the preload callback)
        enabled = [c.strip() for c in (os.environ.get("ANSIBLE_CALLBACKS_ENABLED") or configured_callbacks()).split(",")
                   if c.strip()]
        env = {"ANSIBLE_CALLBACKS_ENABLED": ",".join(enabled + ["ansible.posix.profile_tasks"]),
               "PROFILE_TASKS_TASK_OUTPUT_LIMIT": "all", "PROFILE_TASKS_SORT_ORDER": "none"}
    result["profile"] = bool(args.profile)
    first = deploy_once("first converge", args.deploy, args.pid, args.timeout, env, out.with_suffix(".first.log"))
    second = deploy_once("no-change re-run", args.deploy, args.pid, args.timeout, env, out.with_suffix(".rerun.log"))
    result["runs"] = [first, second]
    result["ratio"] = ratio(first, second)
    result["problems"] = judge(first, second)
    if args.floor:
        result["floor"] = task_floor(args.floor, args.floor_inventory, args.floor_host, args.timeout)

    fetch_script = REPO / "benchmarks" / "fetch_vs_curl.py"
    if args.no_fetch:
        result["fetch"] = {"skipped": "--no-fetch"}
    elif not fetch_script.is_file():
        result["fetch"] = {"skipped": f"{fetch_script.relative_to(REPO)} is not here (branch fetch not merged)"}
    else:
        proc, wall = run(f"{sys.executable} {fetch_script} {args.fetch_args}", args.timeout)
        ratios = parse_fetch(proc.stdout)
        result["fetch"] = {"wall_s": round(wall, 1), "ratios": ratios, "rc": proc.returncode,
                           "output": proc.stdout.splitlines()[-6:]}
        if proc.returncode != 0 or not ratios:
            result["problems"].append(f"fetch_vs_curl.py failed (exit {proc.returncode}): {proc.stderr[-500:]}")

    print(f"{'run':<18} {'wall s':>8} {'tasks':>6} {'changed':>8} {'failed':>7} {'MainPID':>9}")
    for r in result["runs"]:
        print(f"{r['run']:<18} {r['wall_s']:>8.1f} {r['ok']:>6} {r['changed']:>8} {r['failed']:>7} {str(r['main_pid']):>9}")
    rt = result["ratio"]
    print(f"re-run / first converge: {rt['value']} ({'met' if rt['met'] else 'NOT met'}, target <= {rt['target']:.2f})")
    if second["steps"]:
        spent = [f"{s['step'].strip()} {s['seconds']} s" for s in second["steps"] if s["step"] != "total"]
        print("re-run, where the time went: " + ", ".join(spent))
    if args.profile:
        p = second["profile"]
        print(f"re-run, profiled: {p['tasks']} tasks in {p['seconds']} s; {p['host_tasks']} of them >= 0.1 s "
              f"({p['host_seconds']} s, median {p['host_median_s']} s); slowest:")
        for t in p["slowest"]:
            print(f"  {t['s']:>6.2f} s  {t['task']}")
        trips = second["round_trips"]
        print(f"re-run, host round trips: {trips['count']} tasks ran on the host ({trips['seconds']} s; "
              f"first converge: {first['round_trips']['count']}):")
        for t in trips["tasks"]:
            print(f"  {t['s']:>6.2f} s  {t['task']}")
    if "floor" in result:
        f = result["floor"]
        print(f"per-task floor ({f['tasks']} tasks on {f['host']}): {f['connection_s_per_task']} s over the connection, "
              f"{f['controller_s_per_task']} s on the controller (medians); {f['outside_tasks_s']} s outside tasks")
    if result["fetch"].get("ratios"):
        for r in result["fetch"]["ratios"]:
            print(f"gguf_fetch/curl fsync={r['fsync']}: wall ratio {r['wall_ratio']:.3f} "
                  f"({'met' if r['met'] else 'NOT met'}, target <= 1.10), cpu ratio {r['cpu_ratio']:.2f}")
    else:
        print(f"fetch ratio: {result['fetch'].get('skipped') or 'no ratio'}")
    for problem in result["problems"]:
        print(f"PROBLEM: {problem}")

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written: {out}")
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
