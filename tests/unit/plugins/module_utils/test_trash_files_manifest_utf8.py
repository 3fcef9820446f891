"""A MANIFEST is strict UTF-8 text (issue 33: one with a non-UTF-8 comment restored as ok). v3 writes every
byte outside printable ASCII as \\xHH, so a raw byte that is not UTF-8 was put there by someone else: the
restore refuses naming the line, and nothing moves."""
import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.dankfleet.llm.plugins.module_utils.host import trash_files as tf


def _retired(root):
    victim = os.path.join(root, 'svc', 'x.env')
    os.makedirs(os.path.dirname(victim))
    with open(victim, 'w') as f:
        f.write('PORT=8080\n')
    trash = os.path.join(root, 'trash')
    tf.retire(trash, [victim], comments=['retired by the test'])
    return trash, victim


def _snapshot(root):
    out = {}
    for base, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(base, name), 'rb') as f:
                out[os.path.join(base, name)] = f.read()
    return out


def test_a_manifest_with_a_non_utf8_comment_is_refused_naming_the_line(tmp_path):
    trash, victim = _retired(str(tmp_path))
    manifest = os.path.join(trash, 'MANIFEST')
    with open(manifest, 'rb') as f:
        lines = f.read().split(b'\n')
    lines.insert(2, b'# the operator\xff was here')
    with open(manifest, 'wb') as f:
        f.write(b'\n'.join(lines))
    before = _snapshot(str(tmp_path))
    with pytest.raises(tf.TrashError) as e:
        tf.restore(trash)
    assert 'line 3 is not UTF-8: byte 0xff' in str(e.value) and 'Nothing was moved' in str(e.value)
    assert _snapshot(str(tmp_path)) == before and not os.path.exists(victim)
    with pytest.raises(tf.TrashError, match='line 3 is not UTF-8'):
        tf.retire(trash, [str(tmp_path / 'other')])       # nor does a later retire append to it


@pytest.mark.parametrize('version', [1, 2])
def test_older_manifests_are_held_to_utf8_too(version):
    header = getattr(tf, 'MANIFEST_HEADER_V%d' % version).encode()
    with pytest.raises(tf.TrashError, match='line 2 is not UTF-8'):
        tf.read_manifest(header + b'\n# caf\xe9\n')


# Lines a hand, an editor or a hostile writer may put in a MANIFEST: any bytes, comment-shaped or not.
HOSTILE_LINE = st.one_of(
    st.binary(max_size=40),
    st.binary(max_size=40).map(lambda b: b'# ' + b),
    st.sampled_from([b'\xff', b'# \xc3', b'# \xed\xa0\x80', b'\x85', b'# caf\xc3\xa9', b'## \xfe legend', b'#']),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(at=st.integers(1, 12), line=HOSTILE_LINE)
def test_a_hostile_line_restores_byte_identical_or_is_refused_and_nothing_moves(at, line):
    root = os.path.realpath(tempfile.mkdtemp(prefix='trash-utf8-'))
    try:
        trash, victim = _retired(root)
        manifest = os.path.join(trash, 'MANIFEST')
        with open(manifest, 'rb') as f:
            lines = f.read().split(b'\n')
        lines.insert(min(at, len(lines) - 1), line)
        with open(manifest, 'wb') as f:
            f.write(b'\n'.join(lines))
        before = _snapshot(root)
        try:
            line.decode('utf-8')
            valid = True
        except UnicodeDecodeError:
            valid = False
        try:
            tf.restore(trash)
        except tf.TrashError as exc:
            assert valid or 'is not UTF-8' in str(exc), str(exc)
            assert _snapshot(root) == before and not os.path.exists(victim)
            return
        assert valid, 'a MANIFEST with %r in it restored' % (line,)
        with open(victim) as f:
            assert f.read() == 'PORT=8080\n'
    finally:
        shutil.rmtree(root)
