"""The render_files action: what the host_state reading (known) shows already as wanted - a file's content, mode,
owner and group, a directory's mode, owner and group - is not sent; nothing to send is no round trip at all."""
from unittest import mock

from ansible_collections.dankfleet.llm.plugins.action import render_files as action

DIR = {'exists': True, 'type': 'directory', 'mode': '0755', 'uid': 0, 'gid': 0, 'owner': 'root', 'group': 'root'}
FILE = dict(DIR, type='file', mode='0644', checksum='2aae6c35c94fcfb415dbe95f408b9ce91ee846ed')  # sha1('hello world')


def _run(args, answer=None):
    task = mock.MagicMock()
    task.args = args
    task.async_val = 0
    task.check_mode = False
    task.diff = False
    plugin = action.ActionModule(task, mock.MagicMock(), mock.MagicMock(), loader=None, templar=None,
                                 shared_loader_obj=None)
    calls = []

    def execute(module_name, module_args, task_vars):
        calls.append((module_name, module_args))
        return dict(answer or {'changed': True, 'values_changed': False, 'files': {}, 'directories': {
            d['path']: {'changed': True, 'reasons': ['absent']} for d in module_args['directories']}})
    plugin._execute_module = execute
    return plugin.run(task_vars={}), calls


def test_directories_the_reading_shows_as_wanted_are_not_sent():
    known = {'/etc/a': DIR, '/etc/b': dict(DIR, mode='0700'), '/etc/a/f': FILE}
    result, calls = _run({'known': known, 'directories': [
        {'path': '/etc/a', 'owner': 'root', 'group': 'root', 'mode': '0755'},
        {'path': '/etc/b', 'owner': 'root', 'group': 'root', 'mode': '0755'},   # mode differs
        {'path': '/etc/c', 'mode': '0755'}],                                   # not read: unknown, sent
        'files': [{'dest': '/etc/a/f', 'content': 'hello world', 'template': False, 'mode': '0644'}]})
    ((name, sent),) = calls
    assert name == 'dankfleet.llm.render_files' and sent['files'] == []
    assert [d['path'] for d in sent['directories']] == ['/etc/b', '/etc/c']
    assert result['round_trips'] == 1 and result['changed'] and not result['values_changed']
    assert result['directories']['/etc/a'] == {'changed': False, 'reasons': []}
    assert result['directories']['/etc/c'] == {'changed': True, 'reasons': ['absent']}


def test_everything_current_is_no_round_trip():
    result, calls = _run({'known': {'/etc/a': DIR, '/etc/a/f': FILE},
                          'directories': [{'path': '/etc/a', 'owner': 'root', 'mode': '0755'}],
                          'files': [{'dest': '/etc/a/f', 'content': 'hello world', 'owner': '0'}]})
    assert calls == [] and result['round_trips'] == 0 and not result['changed']
    assert set(result['files']) == {'/etc/a/f'} and set(result['directories']) == {'/etc/a'}


def test_a_file_entry_is_no_directory_and_without_known_everything_is_sent():
    _, calls = _run({'known': {'/etc/a': FILE}, 'directories': [{'path': '/etc/a', 'mode': '0644'}]})
    assert [d['path'] for d in calls[0][1]['directories']] == ['/etc/a']
    _, calls = _run({'directories': [{'path': '/etc/a'}], 'files': [{'dest': '/x', 'content': 'y', 'item': 1}]})
    assert len(calls) == 1 and 'item' not in calls[0][1]['files'][0]   # item is the controller's, never sent


def test_nothing_given_is_nothing_done():
    result, calls = _run({})
    assert calls == [] and result['round_trips'] == 0 and result['files'] == {} and result['directories'] == {}
