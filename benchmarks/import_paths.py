"""The tests' one import path (pytest.ini), for a benchmark run as a script.

`ansible_collections.dankfleet.llm.*` from collections/ and the lab tools (`gen_models`) from tests/lab;
the benchmarks import each other from this directory (a script's own). Imported first by every benchmark
that needs them; under pytest both are already on the path and this changes nothing.
"""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The repo's collections/ link; in a copy at <root>/ansible_collections/dankfleet/llm (ansible-test units'),
# <root> (as tests/unit/ansible_cli.py's COLLECTIONS).
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(REPO)))
COLLECTIONS = os.path.join(REPO, "collections")
if not os.path.isdir(COLLECTIONS) and os.path.isdir(os.path.join(_ROOT, "ansible_collections", "dankfleet", "llm")):
    COLLECTIONS = _ROOT
for _path in (os.path.join(REPO, "tests", "lab"), COLLECTIONS):
    if _path not in sys.path:
        sys.path.insert(0, _path)
