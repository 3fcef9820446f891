#!/usr/bin/env python
"""The runbook's agent-loop harness from a shell, against any endpoint (no Ansible, no restart):

    python benchmarks/bench_turn_latency.py URL FAMILIES TURNS [LABEL] [--document-words 20000]
        [--growth-words 1000] [--n-predict 64] [--model ALIAS] [--api-key KEY] [--out DIR]

e.g. ``bench_turn_latency.py http://127.0.0.1:7770 2 2 LAYERSPLIT``: FAMILIES agent loops at once,
each re-sending its growing document for TURNS turns. Prints latency and cached/prefilled prompt
tokens per turn, writes TSV, JSON and PNG to DIR (default benchmarks/results/<host of URL>/).
The same harness runs on the target as the playbook dankfleet.llm.bench_turns.
"""
from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlparse

import import_paths  # noqa: F401 - run as a script: the collection on sys.path
from ansible_collections.dankfleet.llm.plugins.module_utils.base.endpoint_client import BenchError, Endpoint
from ansible_collections.dankfleet.llm.plugins.module_utils.bench.bench_report import write_report
from ansible_collections.dankfleet.llm.plugins.module_utils.bench.bench_turns import run_turns

REPO = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url")
    ap.add_argument("families", type=int)
    ap.add_argument("turns", type=int)
    ap.add_argument("label", nargs="?", default="")
    ap.add_argument("--document-words", type=int, default=20000)
    ap.add_argument("--growth-words", type=int, default=1000)
    ap.add_argument("--n-predict", type=int, default=64)
    ap.add_argument("--model", default="")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--seed", type=int, default=20260916)
    ap.add_argument("--out", default="")
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args(argv)
    endpoint = Endpoint(args.url, args.api_key, timeout=1800)
    config = {"families": args.families, "turns": args.turns, "document_words": args.document_words,
              "growth_words": args.growth_words, "n_predict": args.n_predict, "seed": args.seed,
              "model": args.model, "timeout": 1800}
    try:
        endpoint.wait_healthy(60)
        props = endpoint.get_json("/props", timeout=30)
        rows = run_turns(endpoint, config)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    host = urlparse(args.url).netloc.replace(":", "_")
    dest = Path(args.out) if args.out else REPO / "benchmarks" / "results" / host
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    meta = dict(config, host=host, label=args.label, url=args.url, build=props.get("build_info"),
                slots=props.get("total_slots"))
    report = write_report("turns", rows, meta, str(dest), f"{stamp}-turns" + (f"-{args.label}" if args.label else ""),
                          plot=not args.no_plot)
    print("\n".join(report["summary"]))
    print("written: " + ", ".join(report["files"][k] for k in sorted(report["files"])))
    return 1 if report["findings"]["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
