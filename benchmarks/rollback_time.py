#!/usr/bin/env python
"""Time to roll back, measured (issue 36): the switch half of a staged deploy, from the command to a verified endpoint.

The one figure the operator of dankserver cares about: from "radiance is broken" to "the layer split answers and is
verified". The slow half (build or adopt, fetch, plan, render) ran the day before as ``--tags stage``; this times
``--tags switch`` and prints its parts (the settle/facts/plan it still does, the staged-record check, the serve
preflight re-run, retire, start, gate, verify, report), when the endpoint was verified, and how long the port was
dark (no ``200`` from ``/health``: from the predecessor's last answer to the new shape's first).

Run it against an already-staged lab (the lab container from ``make lab``; any predecessor serving the port -
the lab's own earlier shape, or a stand-in - keeps serving while you stage). The staged shape must differ from what
serves (a stage of the very shape that runs changes no file, and its switch restarts nothing: nothing to time), so
stage the lab with a changed value and hand the switch the same one:

    make lab                                   # once: the lab container, the image, the models, a gated shape
    make lab-deploy LAB_ARGS='--tags stage -e llama_server_ctx_size=4096'   # the stage half: restarts nothing
    .venv/bin/python benchmarks/rollback_time.py -e llama_server_ctx_size=4096 [--inventory inventory/lab]
        [--playbook deploy-frank-medium.yml] [--container dankfleet-lab] [--port 18470]
        [--state-dir /var/lib/frank-medium] [--json OUT]

Against the production rehearsal's container (molecule/production, after its converge) the same works with
``--inventory inventory/rehearsal --container dankserver --port 7770 --playbook rollback-frank-medium.yml``.

It refuses (exit 2, changing nothing) when nothing is staged or the staged shape was switched to already: stage
again first. It also says whether the switch built or downloaded anything (it must not: a task of the build or the
fetch role that ran is listed). Nothing here is a test; the numbers go to README's rolling-back section by hand.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import threading
import time
from datetime import datetime

import import_paths  # noqa: F401 - run as a script: the collection on sys.path
from ansible_collections.dankfleet.llm.plugins.module_utils.serve import staged_shape
from ansible_collections.dankfleet.llm.plugins.module_utils.base import typed_reader as tr

REPO = import_paths.REPO
# The switch's parts, in the order they run. Everything up to the staged-record check (or the retire, on a path with
# no record to check) is the settle/facts/plan/decide every run does - the rollback's first play reads the serve
# role's recorded shape there ("Look for the last gated shape"), which is no preflight and no gate. From then on a
# task moves the switch on to the latest part whose marker it matches (its role's prefix or its name), never back:
# the gate's own "Plan vs actual after a passing gate" stays in verify.
PARTS = (
    ("settle, facts, plan", ()),
    ("staged-record check", ("Switch - refuse when nothing is staged",)),
    ("serve preflight again (nothing rendered)", ("dankfleet.llm.llama_server : ",)),
    ("retire the predecessor", ("dankfleet.llm.runtime_retire : ", "Retire what serves the endpoint now")),
    ("start", ("Enable the unit", "Start the unit when it is down", "Restart onto the staged shape",
               "Run the restart handler now", "Restart llama-server", "journal watch")),
    ("gate", ("Gate the new shape", "Gate: ")),
    ("verify", ("Verify the gated shape", "Verify the live shape", "Verify: ")),
    ("mark, report", ("Switch - mark the staged shape switched", "Ask the endpoint for one real completion")),
)
SLOW_ROLES = ("dankfleet.llm.llama_cpp_build : ", "dankfleet.llm.gguf_fetch : ")


def parse_time(text):
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class PortWatch(threading.Thread):
    """GET /health every `every` seconds; records (time, ok) where ok is a 200 answer."""

    def __init__(self, host, port, every=0.05):
        threading.Thread.__init__(self, daemon=True)
        self.host, self.port, self.every = host, port, every
        self.samples, self.stopped = [], threading.Event()

    def probe(self):
        try:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=1.0)
            conn.request("GET", "/health")
            status = conn.getresponse().status
            conn.close()
            return status == 200
        except (OSError, http.client.HTTPException):
            return False

    def run(self):
        while not self.stopped.is_set():
            self.samples.append((time.time(), self.probe()))
            time.sleep(self.every)


def dark_spans(samples):
    """[(start, end)] of each run of failed probes: from the last answer before it to the first answer after it."""
    spans, last_ok, dark_from = [], None, None
    for moment, ok in samples:
        if ok:
            if dark_from is not None:
                spans.append((last_ok if last_ok is not None else dark_from, moment))
                dark_from = None
            last_ok = moment
        elif dark_from is None:
            dark_from = moment
    if dark_from is not None:
        spans.append((last_ok if last_ok is not None else dark_from, None))  # never answered again
    return spans


def parts_of(result, host):
    """{part: (first start, last end)} and the tasks of the slow roles that ran, from the json callback's output."""
    parts, current, slow = {}, 0, []
    for play in result.get("plays", []):
        for task in play.get("tasks", []):
            name = task["task"]["name"]
            matched = [i for i, (_, markers) in enumerate(PARTS) if any(m in name for m in markers)]
            if current or any(i in matched for i in (1, 3)):  # the staged-record check, or the retire, starts it
                current = max([current] + matched)
            outcome = task.get("hosts", {}).get(host)
            if outcome is None or outcome.get("skipped"):
                continue
            if name.startswith(SLOW_ROLES) and not name.split(" : ", 1)[1].startswith("Validating arguments"):
                slow.append(name)
            span = task["task"].get("duration") or {}
            if not span.get("start") or not span.get("end"):
                continue
            start, end = parse_time(span["start"]), parse_time(span["end"])
            first, last = parts.get(PARTS[current][0], (start, end))
            parts[PARTS[current][0]] = (min(first, start), max(last, end))
    return parts, slow


def read_record(container, state_dir):
    """The staged record in the container, read through staged_shape's shape; None when there is none."""
    path = state_dir.rstrip("/") + "/staged.json"
    run = subprocess.run(["bash", "-c", 'source tests/lab/podman-env.sh && podman exec "$0" cat "$1"', container, path],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    if run.returncode != 0:
        return None
    return tr.load_json(run.stdout, "the staged record %s in %s" % (path, container), staged_shape.RECORD_SHAPE)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inventory", default="inventory/lab")
    ap.add_argument("--playbook", default="deploy-frank-medium.yml")
    ap.add_argument("--container", default="dankfleet-lab")
    ap.add_argument("--host", default="", help="the inventory host (default: the container's name)")
    ap.add_argument("--port", type=int, default=18470)
    ap.add_argument("--address", default="127.0.0.1")
    ap.add_argument("--state-dir", default="/var/lib/frank-medium")
    ap.add_argument("--json", default="", help="also write the figures to this file")
    ap.add_argument("-e", "--extra-vars", action="append", default=[], help="handed to the switch (as to the stage)")
    args = ap.parse_args(argv)
    host = args.host or args.container

    try:
        record = read_record(args.container, args.state_dir)
    except tr.ShapeError as exc:
        print("rollback_time: %s - stage again (make lab-deploy LAB_ARGS='--tags stage')" % exc, file=sys.stderr)
        return 2
    if record is None or "switched_at" in record:
        why = "switched already at %s" % record["switched_at"] if record else "no staged record"
        print("rollback_time: nothing staged to switch to in %s (%s): run the stage half first, e.g. make lab-deploy "
              "LAB_ARGS='--tags stage'" % (args.container, why), file=sys.stderr)
        return 2

    watch = PortWatch(args.address, args.port)
    watch.start()
    time.sleep(1.0)  # what serves the port before the command
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    command = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", args.inventory, args.playbook,
               "--tags", "switch"] + [a for value in args.extra_vars for a in ("-e", value)]
    started = time.time()
    run = subprocess.run(["bash", "-c", 'source tests/lab/podman-env.sh && exec "$@"', "switch"] + command,
                         cwd=REPO, env=env, capture_output=True, text=True)
    ended = time.time()
    time.sleep(1.0)  # what serves the port after it
    watch.stopped.set()
    watch.join()
    try:
        result = json.loads(run.stdout)
    except ValueError:
        print(run.stdout[-4000:] + run.stderr[-4000:], file=sys.stderr)
        print("rollback_time: the switch's output is no JSON (rc %d)" % run.returncode, file=sys.stderr)
        return 1
    parts, slow = parts_of(result, host)
    spans = [s for s in dark_spans(watch.samples) if s[1] is None or s[1] >= started]
    dark = max(((end or ended) - start for start, end in spans), default=0.0)
    verified = max((end for name, (_, end) in parts.items() if name in ("gate", "verify")), default=None)

    print("switch (%s --tags switch on %s): rc %d, %.1f s from the command to its end" % (
        args.playbook, host, run.returncode, ended - started))
    print("staged %s%s" % (record["staged_at"], " in %.0f s" % record["stage_seconds"] if "stage_seconds" in record else ""))
    for part, _ in PARTS:
        if part in parts:
            first, last = parts[part]
            print("  %-44s %7.1f s  (at +%.1f s)" % (part, last - first, first - started))
    print("verified endpoint at +%.1f s" % (verified - started) if verified else "verified endpoint: not reached")
    print("port %s:%d dark for %.1f s (%d dark span(s) during the switch)" % (args.address, args.port, dark, len(spans)))
    print("built or downloaded in the switch: %s" % (", ".join(slow) if slow else "nothing"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rc": run.returncode, "seconds": ended - started, "stage_seconds": record.get("stage_seconds"),
                       "parts": dict((k, v[1] - v[0]) for k, v in parts.items()),
                       "verified_at": verified - started if verified else None, "dark_seconds": dark,
                       "slow_tasks": slow}, f, indent=1)
    return 0 if run.returncode == 0 and not slow else 1


if __name__ == "__main__":
    sys.exit(main())
