"""trash_files' guarantees of issue 33: a link anywhere above a path, in a directory another user can write, is
refused by name; a mount point never moves, bind mounts included (the mount table decides, not st_dev)."""
import os
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.dankfleet.llm.plugins.module_utils.host import trash_files as tf
from ansible_collections.dankfleet.llm.tests.unit import hostile_testlib as hostile

SERVICE_UID = 4242   # the service user that owns its home, where the trash and the models live


@pytest.fixture
def foreign_home(tmp_path):
    """tmp_path/home owned by another user, with a link 'ln' in it to a root-owned directory elsewhere."""
    if os.geteuid() != 0:
        pytest.fail('these tests chown a directory to another user: run them as root, as the suite is')
    home = tmp_path / 'home'
    home.mkdir()
    target = tmp_path / 'rootdir'
    target.mkdir()
    (target / 'x').mkdir()
    (target / 'x' / 'f').write_text('root file')
    (home / 'ln').symlink_to(target)
    os.chown(str(home), SERVICE_UID, SERVICE_UID)
    return home, target


def test_a_trash_dir_whose_grandparent_is_a_foreign_link_is_refused_by_name(foreign_home, tmp_path):
    home, target = foreign_home
    victim = tmp_path / 'victim'
    victim.write_text('v')
    trash = str(home / 'ln' / 'x' / 'trash')      # the link two levels above the trash directory
    with pytest.raises(tf.TrashError) as e:
        tf.retire(trash, [str(victim)])
    assert str(home / 'ln') in str(e.value) and 'symbolic link' in str(e.value)
    assert not (target / 'x' / 'trash').exists() and victim.read_text() == 'v'
    with pytest.raises(tf.TrashError, match='symbolic link'):
        tf.restore(trash)


@pytest.mark.parametrize('depth', [0, 1, 2])
def test_a_path_below_a_foreign_link_is_refused_at_any_depth(foreign_home, tmp_path, depth):
    home, target = foreign_home
    deep = target / 'x'
    for i in range(depth):
        deep = deep / ('d%d' % i)
    deep.mkdir(parents=True, exist_ok=True)
    (deep / 'g').write_text('g')
    given = os.path.join(str(home / 'ln'), os.path.relpath(str(deep / 'g'), str(target)))
    with pytest.raises(tf.TrashError) as e:
        tf.retire(str(tmp_path / 'trash'), [given])
    assert str(home / 'ln') in str(e.value)
    assert (deep / 'g').read_text() == 'g' and not (tmp_path / 'trash').exists()


def test_a_link_in_a_directory_only_root_writes_is_still_followed(tmp_path):
    real = tmp_path / 'real'
    real.mkdir()
    (real / 'f').write_text('f')
    (tmp_path / 'ln').symlink_to(real)
    r = tf.retire(str(tmp_path / 'trash'), [str(tmp_path / 'ln' / 'f')])
    assert [m['src'] for m in r['moves']] == [str(real / 'f')] and not (real / 'f').exists()


# -- the mount table -------------------------------------------------------------------------------------------

RECORDED = (
    b'22 27 0:21 / /proc rw,relatime - proc proc rw\n'
    b'27 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro\n'
    b'31 27 259:2 /home/dank/models /srv/models rw,relatime shared:1 master:7 - ext4 /dev/nvme0n1p2 rw\n'
    b'32 27 0:4 net:[4026532281] /run/netns/ns1 rw - nsfs nsfs rw\n'
    b'33 27 0:45 / /mnt/with\\040space\\011tab rw - tmpfs  rw\n'
    b'34 27 259:2 /etc/hosts /srv/hosts\\134x rw - ext4 /dev/nvme0n1p2 rw\n'
)


def test_the_mount_table_reader_reads_recorded_lines():
    assert tf.parse_mountinfo(RECORDED) == frozenset(
        ['/proc', '/', '/srv/models', '/run/netns/ns1', '/mnt/with space\ttab', '/srv/hosts\\x'])


@pytest.mark.parametrize('line', [
    b'27 1 259:2 / / rw,relatime shared:1 ext4 /dev/nvme0n1p2 rw',       # no '-' separator
    b'x 1 259:2 / / rw - ext4 /dev/sda rw',                               # an id that is no number
    b'27 1 259:2 / relative rw - ext4 /dev/sda rw',                       # a mount point that is not absolute
    b'27 1 259:2 / / rw - ext4 /dev/sda rw trailing',                     # one field too many
    b'',                                                                  # an empty line inside
])
def test_a_line_not_of_the_tables_shape_is_a_named_refusal(line):
    with pytest.raises(tf.TrashError) as e:
        tf.parse_mountinfo(RECORDED + line + b'\n' + RECORDED, '/proc/self/mountinfo')
    assert '/proc/self/mountinfo line 7 ' in str(e.value)


def test_an_empty_table_is_no_table():
    with pytest.raises(tf.TrashError, match='no mount point'):
        tf.parse_mountinfo(b'')


@settings(max_examples=300, deadline=None)
@given(index=st.integers(0, 5), text=hostile.hostile_text())
def test_hostile_mount_table_lines_read_or_are_refused(index, text):
    lines = RECORDED.split(b'\n')
    lines[index] = text.encode('utf-8', 'surrogatepass')
    data = b'\n'.join(lines)
    try:
        points = tf.parse_mountinfo(data)
    except tf.TrashError as exc:
        assert 'line' in str(exc) or 'no mount point' in str(exc)
        return
    assert all(p.startswith('/') for p in points)


def test_this_hosts_mount_table_reads():
    points = tf.mount_points()
    assert '/' in points and '/proc' in points


@pytest.fixture
def bind_mount(tmp_path):
    """tmp_path/dst bind-mounted from tmp_path/src (same filesystem: st_dev cannot tell). Needs root with
    CAP_SYS_ADMIN; an unprivileged container cannot mount, and then the reader's tests above carry the rule."""
    src, dst = tmp_path / 'src', tmp_path / 'tree' / 'dst'
    src.mkdir()
    (src / 'weights.gguf').write_text('the mounted filesystem')
    dst.mkdir(parents=True)
    (tmp_path / 'tree' / 'plain').write_text('p')
    done = subprocess.run(['mount', '--bind', str(src), str(dst)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip('mount --bind needs CAP_SYS_ADMIN, which this test run lacks (%s); the mount table reader is '
                    'tested with recorded text above' % (done.stderr.strip() or done.returncode))
    try:
        yield src, dst
    finally:
        subprocess.run(['umount', str(dst)], check=True)


def test_a_bind_mount_point_never_moves(bind_mount, tmp_path):
    src, dst = bind_mount
    assert os.stat(str(dst)).st_dev == os.stat(str(dst.parent)).st_dev   # what os.path.ismount() cannot see
    for path, needle in ((dst, 'is a mount point'), (dst.parent, 'has a mount point inside')):
        with pytest.raises(tf.TrashError, match=needle):
            tf.retire(str(tmp_path / 'trash'), [str(path)])
    assert (src / 'weights.gguf').read_text() == 'the mounted filesystem'
    assert (dst / 'weights.gguf').exists() and (tmp_path / 'tree' / 'plain').exists()
    assert not (tmp_path / 'trash').exists()


def test_a_bind_mounted_file_never_moves(tmp_path):
    over = tmp_path / 'over'
    over.write_text('underneath')
    top = tmp_path / 'top'
    top.write_text('mounted')
    done = subprocess.run(['mount', '--bind', str(top), str(over)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip('mount --bind needs CAP_SYS_ADMIN, which this test run lacks (%s)' % (done.stderr.strip(),))
    try:
        with pytest.raises(tf.TrashError, match='is a mount point'):
            tf.retire(str(tmp_path / 'trash'), [str(over)])
        assert over.read_text() == 'mounted'
    finally:
        subprocess.run(['umount', str(over)], check=True)


def test_resolve_path_follows_only_links_nobody_else_can_change(foreign_home, tmp_path):
    from ansible_collections.dankfleet.llm.plugins.module_utils.base.regular_file import FileRefused, resolve_path
    home, target = foreign_home
    (tmp_path / 'mine').symlink_to(target)               # in a directory only root writes: followed
    assert resolve_path(str(tmp_path / 'mine' / 'x' / 'not' / 'yet')) == str(target / 'x' / 'not' / 'yet')
    assert resolve_path(str(tmp_path / 'none' / '..' / 'f')) == str(tmp_path / 'f')
    with pytest.raises(FileRefused) as e:                 # in the service user's home: refused, naming the link
        resolve_path(str(home / 'ln' / 'x' / 'not' / 'yet'))
    assert str(e.value).startswith(str(home / 'ln') + ':')
