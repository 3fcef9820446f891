"""The tests' one import path (pytest.ini), for a benchmark run as a script.

`ansible_collections.dankfleet.llm.*` from collections/ and the lab tools (`gen_models`) from tests/lab;
the benchmarks import each other from this directory (a script's own). Imported first by every benchmark
that needs them; under pytest both are already on the path and this changes nothing.
"""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _path in (os.path.join(REPO, "tests", "lab"), os.path.join(REPO, "collections")):
    if _path not in sys.path:
        sys.path.insert(0, _path)
