"""Shared by the trash_files tests: a snapshot of a tree by its bytes paths, a small tmpfs of its own, root-only marks."""
import contextlib
import hashlib
import os
import subprocess

import pytest

NOBODY = 65534


def snapshot(root):
    """Every file and link below root (bytes paths): kind, mode, owner and sha256 or link target."""
    out = {}
    for base, dirs, files in os.walk(os.fsencode(str(root))):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(base, d))]:
            path = os.path.join(base, name)
            st = os.lstat(path)
            if os.path.islink(path):
                out[path] = ('link', os.readlink(path), st.st_uid)
            else:
                with open(path, 'rb') as handle:
                    out[path] = ('file', st.st_mode, st.st_uid, hashlib.sha256(handle.read()).hexdigest())
    return out


@contextlib.contextmanager
def tmpfs(path, size='1m'):
    """A small real filesystem of its own at path (root only; the test skips elsewhere)."""
    os.makedirs(path)
    if os.geteuid() != 0 or subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=%s' % size, 'tmpfs', path],
                                           capture_output=True).returncode:
        pytest.skip('cannot mount a tmpfs here (needs root)')
    try:
        yield path
    finally:
        subprocess.run(['umount', '-l', path], check=True)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason='chown to another user needs root')
