"""The job_progress action: with delay and a results file it polls the module until the job has finished,
printing each poll's line on the controller; without them it is one module call."""
from unittest import mock

import pytest

from ansible_collections.dankfleet.llm.plugins.action import job_progress as action


def _action(args, answers):
    task = mock.MagicMock()
    task.args = args
    task.async_val = 0
    task.check_mode = False
    plugin = action.ActionModule(task, mock.MagicMock(), mock.MagicMock(), loader=None, templar=None,
                                 shared_loader_obj=None)
    calls = []

    def execute(module_name, module_args, task_vars):
        calls.append((module_name, dict(module_args)))
        return dict(answers[len(calls) - 1])
    plugin._execute_module = execute
    return plugin, calls


def _run(args, answers):
    plugin, calls = _action(args, answers)
    with mock.patch.object(action.display, 'display') as shown:
        result = plugin.run(task_vars={'inventory_hostname': 'dankserver'})
    return result, calls, [c.args[0] for c in shown.call_args_list]


def test_polls_until_finished_with_a_line_each_poll():
    answers = [{'msg': 'built 10 of 234 objects (4%)', 'finished': False},
               {'msg': 'built 200 of 234 objects (85%)', 'finished': False},
               {'msg': 'built 234 of 234 objects (100%)', 'finished': True, 'done': 234, 'total': 234}]
    result, calls, lines = _run({'log': '/b.log', 'format': 'build', 'results_file': '/r/j1', 'delay': 30}, answers)
    assert len(calls) == 3
    sent = {'log': '/b.log', 'format': 'build', 'results_file': '/r/j1', 'wait': 30.0}
    assert all(name == 'dankfleet.llm.job_progress' and a == sent for name, a in calls)
    assert [line.split(' (poll')[0] for line in lines] == ['[dankserver] ' + a['msg'] for a in answers]
    assert lines[-1].endswith('(poll 3, finished)')
    assert result['polls'] == 3 and result['done'] == 234 and not result.get('failed')


def test_without_delay_it_is_one_read():
    result, calls, lines = _run({'log': '/f.log', 'format': 'fetch', 'label': 'm.gguf'},
                                [{'msg': 'm.gguf: 1 of 2', 'finished': False}])
    assert calls == [('dankfleet.llm.job_progress', {'log': '/f.log', 'format': 'fetch', 'label': 'm.gguf',
                                                     'wait': 0.0})]
    assert lines == [] and result['msg'] == 'm.gguf: 1 of 2'


def test_a_module_failure_ends_the_wait():
    result, calls, _ = _run({'log': '/b.log', 'format': 'build', 'results_file': '/r/j', 'delay': 5},
                            [{'failed': True, 'msg': 'cannot read the log /b.log'}])
    assert len(calls) == 1 and result['failed'] and 'cannot read the log' in result['msg']


def test_it_gives_up_after_the_timeout():
    answers = [{'msg': 'configuring (cmake)', 'finished': False}] * 3
    plugin, calls = _action({'log': '/b.log', 'format': 'build', 'results_file': '/r/j', 'delay': 5, 'timeout': 8},
                            answers)
    clock = iter([0.0, 5.0, 10.0, 15.0])
    with mock.patch.object(action.display, 'display'), mock.patch.object(action.time, 'monotonic', lambda: next(clock)):
        result = plugin.run(task_vars={})
    assert len(calls) == 2 and result['failed'] and 'did not finish within 8s' in result['msg']


@pytest.mark.parametrize('delay', [0, -1])
def test_a_delay_must_be_positive(delay):
    result, calls, _ = _run({'format': 'build', 'results_file': '/r/j', 'delay': delay}, [])
    assert result['failed'] and calls == []
