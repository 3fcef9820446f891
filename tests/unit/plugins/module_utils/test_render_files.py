# -*- coding: utf-8 -*-
"""render_files' host side: what it writes, what it calls a change of values, how a refused validate stops the
set, check mode and diff, and that it never writes through a link another user could have put in place."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os
import pwd
import shlex
import stat
import subprocess

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils.host.render_files import (
    RenderError, converge, env_values, values_differ)

ME = pwd.getpwuid(os.geteuid()).pw_name
ENV = "# reasons beside each value\nCTX_SIZE=4096\nALIAS='frank medium'\n"


def run(command):
    proc = subprocess.run(shlex.split(command), capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


def spec(path, content, **extra):
    item = {'dest': str(path), 'content': content, 'owner': ME, 'mode': '0640'}
    item.update(extra)
    return item


def test_new_files_are_written_with_their_mode_and_a_rerun_changes_nothing(tmp_path):
    files = [spec(tmp_path / 'a.env', ENV, compare='values'), spec(tmp_path / 'b.sh', 'echo hi\n', mode='0755')]
    first = converge(files, run=run)
    assert first['changed'] and first['values_changed']
    assert first['files'][str(tmp_path / 'a.env')]['reasons'] == ['absent']
    assert (tmp_path / 'a.env').read_text() == ENV
    assert stat.S_IMODE(os.stat(str(tmp_path / 'b.sh')).st_mode) == 0o755
    again = converge(files, run=run)
    assert not again['changed'] and not again['values_changed']
    assert all(not f['changed'] and f['reasons'] == [] for f in again['files'].values())


@pytest.mark.parametrize('new, values_changed', [
    ("# reasons, reworded\n\nCTX_SIZE=4096\nALIAS='frank medium'\n", False),   # comments and blank lines only
    ('# reasons beside each value\nCTX_SIZE="4096"\nALIAS=frank\\ medium\n', False),  # quoting only: same values
    ("# reasons beside each value\nCTX_SIZE=8192\nALIAS='frank medium'\n", True),    # a value
    ("# reasons beside each value\nCTX_SIZE=4096\nALIAS='frank medium'\nNEW=1\n", True),  # a new variable
])
def test_an_env_file_changes_values_only_when_what_systemd_reads_changes(tmp_path, new, values_changed):
    path = tmp_path / 'a.env'
    converge([spec(path, ENV, compare='values')], run=run)
    result = converge([spec(path, new, compare='values')], run=run)
    assert result['changed'] and path.read_text() == new  # the file is always brought to the render
    assert result['values_changed'] is values_changed
    assert result['files'][str(path)]['values_changed'] is values_changed


def test_a_bytes_file_changes_values_with_any_byte_and_a_mode_change_is_no_change_of_env_values(tmp_path):
    unit = tmp_path / 'x.service'
    converge([spec(unit, '[Unit]\n# a\n')], run=run)
    assert converge([spec(unit, '[Unit]\n# b\n')], run=run)['values_changed']
    env = tmp_path / 'a.env'
    converge([spec(env, ENV, compare='values')], run=run)
    result = converge([spec(env, ENV, compare='values', mode='0600')], run=run)
    assert result['changed'] and not result['values_changed']
    assert result['files'][str(env)]['reasons'] == ['mode']
    assert stat.S_IMODE(os.stat(str(env)).st_mode) == 0o600
    assert converge([spec(unit, '[Unit]\n# b\n', mode='0600')], run=run)['values_changed']


def test_a_refused_file_stops_the_set_there(tmp_path):
    seen = []

    def validating(command):
        seen.append(command)
        return run(command)
    files = [spec(tmp_path / 'one', 'ok\n', validate='grep -q ok %s'),
             spec(tmp_path / 'two.service', 'bad\n', validate='grep -q ok %s'),
             spec(tmp_path / 'three', 'ok\n')]
    with pytest.raises(RenderError, match='two.service: the validate command refused'):
        converge(files, run=validating)
    assert (tmp_path / 'one').exists() and not (tmp_path / 'two.service').exists()
    assert not (tmp_path / 'three').exists()
    # the candidate was a private copy named like the file (systemd-analyze verify needs the unit's name)
    candidate = seen[1].split()[-1]
    assert os.path.basename(candidate) == 'two.service' and not candidate.startswith(str(tmp_path))
    assert not os.path.exists(candidate)


def test_check_mode_writes_nothing_validates_nothing_and_diffs(tmp_path):
    path = tmp_path / 'a.env'
    converge([spec(path, ENV, compare='values')], run=run)

    def never(command):
        raise AssertionError('validate ran in check mode: %s' % command)
    new = ENV.replace('4096', '8192')
    result = converge([spec(path, new, compare='values', validate='false %s'),
                       spec(tmp_path / 'new', 'x\n')], check_mode=True, want_diff=True, run=never)
    assert result['changed'] and result['values_changed']
    assert path.read_text() == ENV and not (tmp_path / 'new').exists()
    assert result['diff'][0] == {'before': ENV, 'after': new, 'before_header': str(path), 'after_header': str(path)}
    assert result['diff'][1]['before'] == ''


def test_check_mode_on_a_fresh_host_reports_a_missing_directory_and_group(tmp_path):
    dest = tmp_path / 'not-yet' / 'a.env'
    result = converge([spec(dest, ENV, group='no-such-group-here')], check_mode=True, run=run)
    assert result['files'][str(dest)]['reasons'] == ['absent (its directory too)']
    with pytest.raises(RenderError, match='does not exist on the host'):
        converge([spec(tmp_path / 'b', 'x\n', group='no-such-group-here')], run=run)


def test_a_link_in_place_of_the_file_is_replaced_never_written_through(tmp_path):
    target = tmp_path / 'victim'
    target.write_text('precious\n')
    shared = tmp_path / 'shared'
    shared.mkdir()
    os.chmod(str(shared), 0o777)  # another user could have put the link here
    os.symlink(str(target), str(shared / 'a.env'))
    result = converge([spec(shared / 'a.env', ENV, compare='values')], run=run)
    assert result['files'][str(shared / 'a.env')]['reasons'] == ['not a regular file']
    assert result['values_changed']  # a link has no values: what the service reads changed
    assert target.read_text() == 'precious\n'
    assert not os.path.islink(str(shared / 'a.env')) and (shared / 'a.env').read_text() == ENV


@pytest.mark.parametrize('bad, message', [
    ({'dest': 'relative/a', 'content': 'x'}, 'must be an absolute path'),
    ({'dest': '/tmp/x', 'content': None}, 'no content'),
    ({'dest': '/tmp/x', 'content': 'x', 'mode': 'rw'}, 'not an octal number'),
    ({'dest': '/tmp/x', 'content': 'x', 'compare': 'lines'}, 'compare'),
])
def test_bad_inputs_are_refused_naming_the_file(bad, message):
    with pytest.raises(RenderError, match=message):
        converge([bad], run=run)


def test_a_directory_where_the_file_belongs_and_a_file_given_twice_are_refused(tmp_path):
    (tmp_path / 'd').mkdir()
    with pytest.raises(RenderError, match='is a directory where a file belongs'):
        converge([spec(tmp_path / 'd', 'x')], run=run)
    with pytest.raises(RenderError, match='given twice'):
        converge([spec(tmp_path / 'a', 'x'), spec(tmp_path / 'a', 'y')], run=run)


def test_values_are_what_the_env_reader_reads():
    assert env_values(ENV) == {'CTX_SIZE': '4096', 'ALIAS': 'frank medium'}
    assert env_values('not an assignment\n') is None
    assert values_differ(None, ENV)                     # a new file
    assert values_differ('garbage line\n', ENV)         # an old file the reader refuses
    assert not values_differ(ENV, '\n' + ENV + '# trailing comment\n')


def test_an_old_env_file_that_is_not_text_has_no_values_and_a_mode_left_out_is_kept(tmp_path):
    path = tmp_path / 'a.env'
    path.write_bytes(b'CTX_SIZE=\xff\n')
    os.chmod(str(path), 0o600)
    result = converge([{'dest': str(path), 'content': ENV, 'compare': 'values'}], run=run)
    assert result['files'][str(path)]['reasons'] == ['content'] and result['values_changed']
    assert stat.S_IMODE(os.stat(str(path)).st_mode) == 0o600 and path.read_text() == ENV


def directory(path, **extra):
    item = {'path': str(path), 'owner': ME, 'mode': '0750'}
    item.update(extra)
    return item


def test_directories_are_made_first_with_every_missing_parent_and_a_rerun_changes_nothing(tmp_path):
    top, leaf = tmp_path / 'etc', tmp_path / 'etc' / 'llm'
    dirs = [directory(leaf)]
    files = [spec(leaf / 'a.env', ENV)]
    first = converge(files, directories=dirs, run=run)
    assert first['changed'] and first['directories'] == {str(leaf): {'changed': True, 'reasons': ['absent']}}
    for made in (top, leaf):  # made under any umask, each with the mode given (like ansible.builtin.file)
        assert stat.S_IMODE(os.stat(str(made)).st_mode) == 0o750
    assert (leaf / 'a.env').read_text() == ENV
    again = converge(files, directories=dirs, run=run)
    assert not again['changed'] and again['directories'][str(leaf)] == {'changed': False, 'reasons': []}


def test_an_existing_directory_gets_its_mode_and_a_directory_alone_is_no_change_of_values(tmp_path):
    path = tmp_path / 'd'
    path.mkdir()
    os.chmod(str(path), 0o700)
    result = converge([], directories=[directory(path, mode='0755', group=None)], run=run)
    assert result['changed'] and not result['values_changed']
    assert result['directories'][str(path)]['reasons'] == ['mode']
    assert stat.S_IMODE(os.stat(str(path)).st_mode) == 0o755
    assert not converge([], directories=[directory(path, mode=None)], run=run)['changed']  # no mode: kept


def test_directories_in_check_mode_make_nothing_and_diff(tmp_path):
    path = tmp_path / 'new' / 'd'
    result = converge([spec(path / 'f', 'x\n')], directories=[directory(path, group='no-such-group-here')],
                      check_mode=True, want_diff=True, run=run)
    assert result['changed'] and not (tmp_path / 'new').exists()
    assert result['directories'][str(path)]['reasons'] == ['absent']
    assert result['files'][str(path / 'f')]['reasons'] == ['absent (its directory too)']
    assert result['diff'][0] == {'before': 'absent\n', 'after': 'directory 0750 %s:no-such-group-here\n' % os.geteuid(),
                                 'before_header': str(path), 'after_header': str(path)}
    with pytest.raises(RenderError, match='does not exist on the host'):
        converge([], directories=[directory(path, group='no-such-group-here')], run=run)
    assert not (tmp_path / 'new').exists()


@pytest.mark.parametrize('make, message', [
    (lambda p: p.write_text('x'), 'not a directory'),
    (lambda p: None, 'given twice'),
])
def test_a_file_where_a_directory_belongs_and_a_directory_given_twice_are_refused(tmp_path, make, message):
    path = tmp_path / 'd'
    make(path)
    with pytest.raises(RenderError, match=message):     # checked before anything: given twice comes first
        converge([], directories=[directory(path)] * (2 if message == 'given twice' else 1), run=run)


def test_a_directory_is_not_made_through_a_link_another_user_can_change(tmp_path):
    shared = tmp_path / 'shared'
    shared.mkdir()
    os.chmod(str(shared), 0o777)
    (tmp_path / 'elsewhere').mkdir()
    os.symlink(str(tmp_path / 'elsewhere'), str(shared / 'link'))
    with pytest.raises(RenderError, match='symbolic link'):
        converge([], directories=[directory(shared / 'link' / 'd')], run=run)
    assert not (tmp_path / 'elsewhere' / 'd').exists()
    with pytest.raises(RenderError, match='must be an absolute path'):
        converge([], directories=[{'path': 'rel/d', 'mode': '0755'}], run=run)
