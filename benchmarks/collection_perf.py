#!/usr/bin/env python
"""The collection's own figures: first converge vs a no-change re-run of the lab deploy, and the
fetch ratio against curl.

    python benchmarks/collection_perf.py [--fresh CMD] [--deploy CMD] [--pid CMD] [--no-fetch]
                                         [--fetch-args "--size-gib 1 --rounds 3"] [--out FILE]

1. ``--fresh`` (optional, e.g. ``make clean-lab``) puts the lab back to nothing, so the next run
   is a first converge.
2. ``--deploy`` (default ``make lab``) runs twice. Per run: wall time, the PLAY RECAP's changed /
   failed / unreachable counts (summed over hosts), and the endpoint's MainPID read with ``--pid``
   afterwards (default: ``systemctl show`` of llama-server.service in the lab container).
   The re-run must report changed=0 and leave MainPID where it was; otherwise this exits 1
   naming what moved - idempotence is a figure here, not a hope.
3. ``benchmarks/fetch_vs_curl.py`` (the fetch branch's benchmark), when present, runs with
   ``--fetch-args``; its median wall ratios gguf_fetch/curl are reported (target <= 1.10).

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
DEFAULT_PID = ("source tests/lab/podman-env.sh && "
               "podman exec dankfleet-lab systemctl show --property=MainPID --value llama-server.service")
RECAP_LINE = re.compile(r"^(?P<host>\S+)\s*:\s*(?P<counts>(?:\w+=\d+\s*)+)$")
FETCH_LINE = re.compile(r"median gguf_fetch fsync=(?P<fsync>\w+):.*?wall ratio (?P<wall>[0-9.]+)"
                        r".*?cpu ratio (?P<cpu>[0-9.]+)")


def parse_recap(text: str) -> dict:
    """The PLAY RECAP of an ansible-playbook run -> {hosts: {host: counts}, changed, failed, unreachable}.

    Raises ValueError when there is no recap (the command did not run a playbook to the end)."""
    hosts = {}
    in_recap = False
    for line in text.splitlines():
        if line.startswith("PLAY RECAP"):
            in_recap, hosts = True, {}  # the last recap wins (a command may run several playbooks)
            continue
        if in_recap:
            match = RECAP_LINE.match(line.strip())
            if match:
                hosts[match.group("host")] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", match.group("counts"))}
            elif line.strip():
                in_recap = False
    if not hosts:
        raise ValueError("no PLAY RECAP in the output: the command did not run a playbook to its end")
    total = {key: sum(h.get(key, 0) for h in hosts.values()) for key in ("ok", "changed", "failed", "unreachable")}
    return dict(total, hosts=hosts)


def parse_fetch(text: str) -> list:
    """fetch_vs_curl.py's summary lines -> [{fsync, wall_ratio, cpu_ratio, met}]."""
    out = []
    for match in FETCH_LINE.finditer(text):
        wall = float(match.group("wall"))
        out.append({"fsync": match.group("fsync"), "wall_ratio": wall, "cpu_ratio": float(match.group("cpu")),
                    "met": wall <= 1.10})
    return out


def run(command: str, timeout: float) -> tuple:
    t0 = time.monotonic()
    proc = subprocess.run(["bash", "-c", command], cwd=REPO, capture_output=True, text=True, timeout=timeout)
    return proc, time.monotonic() - t0


def deploy_once(label: str, deploy: str, pid: str, timeout: float) -> dict:
    proc, wall = run(deploy, timeout)
    text = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise SystemExit(f"{label}: `{deploy}` exited {proc.returncode}; its last lines:\n" + "\n".join(text.splitlines()[-30:]))
    try:
        recap = parse_recap(text)
    except ValueError as exc:
        raise SystemExit(f"{label}: {exc}; last lines:\n" + "\n".join(text.splitlines()[-30:]))
    pid_proc, _ = run(pid, 60)
    main_pid = pid_proc.stdout.strip() if pid_proc.returncode == 0 else None
    return {"run": label, "wall_s": round(wall, 1), "changed": recap["changed"], "ok": recap["ok"],
            "failed": recap["failed"], "unreachable": recap["unreachable"], "hosts": recap["hosts"],
            "main_pid": main_pid, "pid_error": None if main_pid else (pid_proc.stderr.strip() or "no output")}


def judge(first: dict, second: dict) -> list:
    """What a no-change re-run must not do."""
    problems = []
    if second["changed"] != 0:
        problems.append(f"the re-run changed {second['changed']} task(s): not idempotent")
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
    args = ap.parse_args(argv)

    result = {"started": datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ"), "deploy": args.deploy,
              "fresh": args.fresh, "load": os.getloadavg(), "cores": os.cpu_count()}
    if args.fresh:
        proc, wall = run(args.fresh, args.timeout)
        if proc.returncode != 0:
            raise SystemExit(f"`{args.fresh}` exited {proc.returncode}:\n{proc.stderr[-2000:]}")
        result["fresh_wall_s"] = round(wall, 1)
    first = deploy_once("first converge", args.deploy, args.pid, args.timeout)
    second = deploy_once("no-change re-run", args.deploy, args.pid, args.timeout)
    result["runs"] = [first, second]
    result["problems"] = judge(first, second)

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

    print(f"{'run':<18} {'wall s':>8} {'changed':>8} {'failed':>7} {'MainPID':>9}")
    for r in result["runs"]:
        print(f"{r['run']:<18} {r['wall_s']:>8.1f} {r['changed']:>8} {r['failed']:>7} {str(r['main_pid']):>9}")
    if result["fetch"].get("ratios"):
        for r in result["fetch"]["ratios"]:
            print(f"gguf_fetch/curl fsync={r['fsync']}: wall ratio {r['wall_ratio']:.3f} "
                  f"({'met' if r['met'] else 'NOT met'}, target <= 1.10), cpu ratio {r['cpu_ratio']:.2f}")
    else:
        print(f"fetch ratio: {result['fetch'].get('skipped') or 'no ratio'}")
    for problem in result["problems"]:
        print(f"PROBLEM: {problem}")

    out = Path(args.out) if args.out else REPO / "benchmarks" / "results" / f"collection-perf-{result['started']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written: {out}")
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
