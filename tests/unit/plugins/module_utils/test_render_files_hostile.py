"""render_files against hostile option values (issue 33): any owner, group, mode, validate or destination ends in
the files written as asked or a RenderError naming the file and the option - checked before anything is compared,
run or written - never another exception, never a bare "render_files failed"."""
import os
import pwd
import re
import shlex
import pathlib
import subprocess
import tempfile
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.dankfleet.llm.plugins.module_utils.host.render_files import ID_MAX, RenderError, converge
from ansible_collections.dankfleet.llm.tests.unit import hostile_testlib as hostile

SETTINGS = dict(max_examples=200, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
ME = pwd.getpwuid(os.geteuid()).pw_name
CONTROL = re.compile(u'[\x00-\x1f\x7f-\x9f]')
DEADLINE_S = 10.0
HOST_SAID_NO = ('validate command refused', 'does not exist on the host', 'cannot write', 'cannot set its mode')


def run(command):
    proc = subprocess.run(shlex.split(command), capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


def never(command):
    raise AssertionError('validate ran: %s' % command)


def _converge(files, directories=None, run_with=run, check_mode=False):
    started = time.monotonic()
    try:
        return converge(files, directories=directories, run=run_with, check_mode=check_mode)
    except RenderError as exc:
        assert str(exc) and not CONTROL.search(str(exc)) and 'render_files failed' not in str(exc)
        return exc
    finally:
        assert time.monotonic() - started < DEADLINE_S


def _any_value():
    return st.one_of(hostile.json_values(max_leaves=3), hostile.hostile_text(),
                     st.sampled_from(['4294967296', '4294967295', '-1', '0', '00', '+0', str(ID_MAX), '9' * 30,
                                      ME, 'root', 'no-such-user-here', 'a:b', '-x', 'x y', '%', '%d %s', 'true %s',
                                      'true %s %s', 'true %%s', 'true 100%% %s', '/d/../x', 'rel', '0640', '0o640',
                                      '7777', '10000', 'u+rw', '0_644']))


@settings(**SETTINGS)
@given(st.sampled_from(['owner', 'group', 'mode', 'validate', 'compare', 'content']), _any_value())
def test_any_option_value_is_written_as_asked_or_refused_by_name_first(option, value):
    with tempfile.TemporaryDirectory() as tmp:   # one directory per example: hypothesis reuses tmp_path
        _one_file_option(pathlib.Path(tmp), option, value)


def _one_file_option(tmp_path, option, value):
    first, second = tmp_path / 'a.env', tmp_path / 'b.env'
    files = [{'dest': str(first), 'content': 'A=1\n', 'mode': '0640'},
             {'dest': str(second), 'content': 'B=1\n', 'mode': '0640', option: value}]
    out = _converge(files, run_with=never if option != 'validate' else run)
    if isinstance(out, RenderError):
        # refused before anything: the first file is not written either, except by a refusal of the host itself
        # (a validate that ran and said no, an owner that does not exist when it is written)
        # (a validate that ran and said no, an owner that does not exist or that a non-root run may not give)
        host_said_no = any(said in str(out) for said in HOST_SAID_NO)
        assert host_said_no or not first.exists(), str(out)
        assert str(second) in str(out) or os.path.normpath(str(second)) in str(out)
    else:
        assert first.read_text() == 'A=1\n' and second.exists()


@settings(**SETTINGS)
@given(st.sampled_from(['path', 'owner', 'group', 'mode']), _any_value())
def test_any_directory_option_is_made_as_asked_or_refused_by_name_first(option, value):
    with tempfile.TemporaryDirectory() as tmp:
        _one_directory_option(pathlib.Path(tmp), option, value)


def _one_directory_option(tmp_path, option, value):
    spec = {'path': str(tmp_path / 'd'), 'mode': '0750', option: value}
    out = _converge([], directories=[{'path': str(tmp_path / 'first')}, spec])
    if isinstance(out, RenderError):
        assert any(said in str(out) for said in HOST_SAID_NO) or not (tmp_path / 'first').exists(), str(out)
    else:
        assert (tmp_path / 'first').is_dir()


@settings(**SETTINGS)
@given(st.lists(st.sampled_from(['/', '/.', '//', '/./.', '/./']), min_size=1, max_size=4), st.booleans())
def test_one_destination_spelled_two_ways_is_given_twice(noise, trailing):
    with tempfile.TemporaryDirectory() as tmp:
        _two_spellings(pathlib.Path(tmp), noise, trailing)


def _two_spellings(tmp_path, noise, trailing):
    plain = str(tmp_path / 'a.env')
    spelled = str(tmp_path) + ''.join(noise) + '/a.env' + ('/' if trailing else '')
    spelled = '/' + spelled if noise[0] == '//' else spelled
    out = _converge([{'dest': plain, 'content': 'x\n'}, {'dest': spelled, 'content': 'y\n'}])
    assert isinstance(out, RenderError) and 'given twice' in str(out)
    assert not (tmp_path / 'a.env').exists()


@pytest.mark.parametrize('option, value, message', [
    ('owner', '4294967296', 'owner: .* out of range'),
    ('group', '4294967296', 'group: .* out of range'),
    ('owner', '9' * 5000, 'owner'),
    ('owner', '-1', 'owner'),
    ('group', 'a:b', 'group'),
    ('owner', 'x\n', 'control character'),
    ('validate', 'grep -q 100% %s', 'validate .* other than the one %s'),
    ('validate', 'date +%Y %s', 'validate .* other than the one %s'),
    ('validate', 'diff %s %s', 'exactly once'),
    ('validate', 'true', 'exactly once'),
    ('mode', '0_644', 'not an octal number'),
    ('mode', '10000', 'out of range'),
    ('dest', '/d/../etc/shadow', '".."'),
    ('dest', 'd/a.env', 'absolute'),
    ('dest', '/d/a\x00.env', 'control character'),
])
def test_the_issue_s_values_are_refused_naming_the_option_before_anything(tmp_path, option, value, message):
    first = tmp_path / 'first'
    spec = {'dest': str(tmp_path / 'a.env'), 'content': 'x\n', option: value}
    with pytest.raises(RenderError, match=message):
        converge([{'dest': str(first), 'content': 'x\n'}, spec], run=never)
    assert not first.exists()


def test_an_id_up_to_two_to_the_32_minus_2_is_an_id_and_percent_percent_is_a_literal(tmp_path):
    seen = []

    def validating(command):
        seen.append(command)
        return run(command)
    dest = tmp_path / 'a.env'
    out = converge([{'dest': str(dest), 'content': 'x\n', 'owner': str(os.geteuid()), 'group': str(os.getegid()),
                     'validate': 'test -n 100%%-%s'}], run=validating)
    assert out['changed'] and dest.read_text() == 'x\n'
    assert seen[0].startswith('test -n 100%-/')
    result = converge([{'dest': str(tmp_path / 'b'), 'content': 'x\n', 'owner': str(ID_MAX)}], check_mode=True,
                      run=never)
    assert result['files'][str(tmp_path / 'b')]['reasons'] == ['absent']


def test_the_action_checks_before_it_renders_and_never_says_only_failed():
    from unittest import mock
    from ansible_collections.dankfleet.llm.plugins.action import render_files as action
    task = mock.MagicMock()
    task.args = {'files': [{'dest': '/d/a.env', 'content': 'x'}, {'dest': '/d/./a.env', 'src': 'never.j2'}]}
    task.async_val = 0
    task.check_mode = False
    plugin = action.ActionModule(task, mock.MagicMock(), mock.MagicMock(), loader=None, templar=None,
                                 shared_loader_obj=None)
    plugin._execute_module = mock.Mock(side_effect=AssertionError('the host was asked'))
    plugin._render = mock.Mock(side_effect=AssertionError('rendered'))
    result = plugin.run(task_vars={})
    assert result['failed'] and 'given twice' in result['msg']
    task.args = {'files': [{'dest': '/d/a.env', 'content': 'x'}]}
    plugin._render = lambda spec, task_vars: spec['content']
    plugin._execute_module = lambda **kw: {'failed': True, 'module_stderr': 'Traceback\nOverflowError: \x1b[2Jbig\n'}
    result = plugin.run(task_vars={})
    assert result['msg'] == ('dankfleet.llm.render_files: the module failed on the host without a message: '
                             'OverflowError: \\x1b[2Jbig')
