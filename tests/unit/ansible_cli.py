"""The collection through Ansible's own command line, for unit tests: the venv's ansible-doc with the
collection on ANSIBLE_COLLECTIONS_PATH (no container, no host)."""
import os
import subprocess
import sys

COLLECTIONS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "collections"))


def ansible_doc(fqcn, kind="module"):
    """`ansible-doc -t kind fqcn`'s text; fails the test, with ansible-doc's stderr, when it does not render."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS)
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-doc"), "-t", kind, fqcn],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout
