"""The collection through Ansible's own command line, for unit tests: the venv's ansible-doc with the
collection on ANSIBLE_COLLECTIONS_PATH (no container, no host).

The same under `pytest` (the repo's collections/ link) and under `ansible-test units`, which runs the tests
in a copy at <root>/ansible_collections/dankfleet/llm (no collections/ link there) with a PYTHONPATH that
restricts what module tests may import: an Ansible command line started from a test gets neither."""
import os
import subprocess
import sys

REPO = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(REPO)))
COLLECTIONS = (_ROOT if os.path.basename(os.path.dirname(os.path.dirname(REPO))) == "ansible_collections"
               and os.path.isdir(os.path.join(_ROOT, "ansible_collections", "dankfleet", "llm"))
               else os.path.join(REPO, "collections"))
BIN = os.path.dirname(sys.executable)


def ansible_env(**extra):
    """os.environ for an Ansible command line (or a Python importing the collection) started from a test:
    the collection on ANSIBLE_COLLECTIONS_PATH, no PYTHONPATH of the test runner's; `extra` on top."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS)
    env.pop("PYTHONPATH", None)
    env.update(extra)
    return env


def ansible_doc(fqcn, kind="module"):
    """`ansible-doc -t kind fqcn`'s text; fails the test, with ansible-doc's stderr, when it does not render."""
    proc = subprocess.run([os.path.join(BIN, "ansible-doc"), "-t", kind, fqcn],
                          env=ansible_env(), capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout
