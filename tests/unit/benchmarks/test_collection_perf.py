"""benchmarks/collection_perf.py: PLAY RECAP and fetch_vs_curl parsing, and the idempotence verdict,
driven end to end with stand-in deploy and MainPID commands (the lab deploy is run for real by the
lead with `python benchmarks/collection_perf.py`)."""
import json
import os
import sys

import pytest

import collection_perf as cp

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))

RECAP = """
TASK [x] ****
ok: [dankfleet-lab]

PLAY RECAP *********************************************************************
dankfleet-lab              : ok=41   changed=17   unreachable=0    failed=0    skipped=3    rescued=0    ignored=0
localhost                  : ok=2    changed=1    unreachable=0    failed=0    skipped=0    rescued=0    ignored=0

"""


def test_parse_recap_sums_hosts_and_takes_the_last_recap():
    recap = cp.parse_recap(RECAP)
    assert (recap['ok'], recap['changed'], recap['failed'], recap['unreachable']) == (43, 18, 0, 0)
    assert recap['hosts']['dankfleet-lab']['skipped'] == 3
    two = RECAP + RECAP.replace('changed=17', 'changed=0').replace('changed=1 ', 'changed=0 ')
    assert cp.parse_recap(two)['changed'] == 0
    with pytest.raises(ValueError, match='no PLAY RECAP'):
        cp.parse_recap('ERROR! the playbook could not be found')


def test_parse_fetch_summary():
    text = ('median curl -o: 1.20 s wall (853.3 MiB/s), 0.30 s cpu\n'
            'median gguf_fetch fsync=True: 1.31 s wall (781.7 MiB/s), 2.10 s cpu (sha256 included)  '
            'wall ratio 1.092 (target <= 1.10: met), cpu ratio 7.00\n'
            'median gguf_fetch fsync=False: 1.25 s wall (819.2 MiB/s), 2.00 s cpu (sha256 included)  '
            'wall ratio 1.042 (target <= 1.10: met), cpu ratio 6.67\n')
    assert cp.parse_fetch(text) == [{'fsync': 'True', 'wall_ratio': 1.092, 'cpu_ratio': 7.0, 'met': True},
                                    {'fsync': 'False', 'wall_ratio': 1.042, 'cpu_ratio': 6.67, 'met': True}]


def _fake_deploy(tmp_path, second_changed, pids):
    """A deploy command whose recap says changed=5 first and `second_changed` after, and a pid command."""
    state = tmp_path / 'runs'
    script = tmp_path / 'deploy.sh'
    script.write_text('#!/bin/bash\nn=$(cat %s 2>/dev/null || echo 0); echo $((n+1)) > %s\n'
                      'echo "PLAY RECAP ***"\n'
                      'if [ "$n" = 0 ]; then c=5; else c=%d; fi\n'
                      'echo "lab : ok=9 changed=$c unreachable=0 failed=0 skipped=0"\n' % (state, state, second_changed))
    pid = tmp_path / 'pid.sh'
    pid.write_text('#!/bin/bash\nn=$(cat %s); [ "$n" = 1 ] && echo %s || echo %s\n' % (state, pids[0], pids[1]))
    return 'bash %s' % script, 'bash %s' % pid


def test_idempotent_rerun_passes(tmp_path, capsys):
    deploy, pid = _fake_deploy(tmp_path, 0, ('4242', '4242'))
    out = tmp_path / 'perf.json'
    assert cp.main(['--deploy', deploy, '--pid', pid, '--no-fetch', '--out', str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [(r['run'], r['changed'], r['main_pid']) for r in doc['runs']] == [
        ('first converge', 5, '4242'), ('no-change re-run', 0, '4242')]
    assert doc['problems'] == [] and doc['fetch'] == {'skipped': '--no-fetch'}
    assert 'no-change re-run' in capsys.readouterr().out


def test_rerun_that_changes_or_restarts_fails(tmp_path):
    deploy, pid = _fake_deploy(tmp_path, 2, ('4242', '5151'))
    out = tmp_path / 'perf.json'
    assert cp.main(['--deploy', deploy, '--pid', pid, '--no-fetch', '--out', str(out)]) == 1
    problems = json.loads(out.read_text())['problems']
    assert problems == ['the re-run changed 2 task(s): not idempotent',
                        'MainPID moved 4242 -> 5151: the re-run restarted the service']


def test_a_failed_deploy_stops_with_its_output(tmp_path):
    with pytest.raises(SystemExit, match=r"first converge: `bash -c 'echo boom; exit 3'` exited 3(?s:.*)boom"):
        cp.main(['--deploy', "bash -c 'echo boom; exit 3'", '--pid', 'echo 1', '--no-fetch',
                 '--out', str(tmp_path / 'x.json')])


def test_missing_fetch_benchmark_is_reported_not_fatal(tmp_path, monkeypatch):
    deploy, pid = _fake_deploy(tmp_path, 0, ('7', '7'))
    monkeypatch.setattr(cp, 'REPO', tmp_path)  # a tree without benchmarks/fetch_vs_curl.py
    out = tmp_path / 'perf.json'
    assert cp.main(['--deploy', deploy, '--pid', pid, '--out', str(out)]) == 0
    assert 'fetch_vs_curl.py is not here' in json.loads(out.read_text())['fetch']['skipped']


PROFILED = """
PLAY RECAP *********************************************************************
dankfleet-lab              : ok=3    changed=0    unreachable=0    failed=0    skipped=1    rescued=0    ignored=0

Tuesday 01 December 2026  15:00:00 +0000 (0:00:00.011)       0:00:04.000 *****
===============================================================================
Gathering Facts --------------------------------------------------------- 2.10s
llama_server : Gate 1 - /health reaches 200 in time ------------------------ 0.92s
a task whose name is longer than the terminal is wide, so no dashes pad it - 123.45s
dankfleet.llm.llama_server : Settle the values -------------------------- 0.02s

make lab: where the time went
  step                                             seconds  result
  ----                                             -------  ------
  host-deps                                              0  ok
  lab-deploy                                            80  ok
    lab: converge (deploy-frank-medium.yml)             75  ok
  total                                                 81  ok
"""


def test_profile_and_steps_are_read_from_the_output():
    tasks = cp.parse_profile(PROFILED)
    assert tasks == [('Gathering Facts', 2.10), ('llama_server : Gate 1 - /health reaches 200 in time', 0.92),
                     ('a task whose name is longer than the terminal is wide, so no dashes pad it', 123.45),
                     ('dankfleet.llm.llama_server : Settle the values', 0.02)]
    summary = cp.profile_summary(tasks, top=2)
    assert (summary['tasks'], summary['host_tasks'], summary['host_median_s']) == (4, 3, 2.10)
    assert [t['s'] for t in summary['slowest']] == [123.45, 2.10]
    assert cp.parse_steps(PROFILED) == [
        {'step': 'host-deps', 'seconds': 0, 'result': 'ok'}, {'step': 'lab-deploy', 'seconds': 80, 'result': 'ok'},
        {'step': '  lab: converge (deploy-frank-medium.yml)', 'seconds': 75, 'result': 'ok'},
        {'step': 'total', 'seconds': 81, 'result': 'ok'}]


def test_ratio_against_the_target():
    assert cp.ratio({'wall_s': 100.0}, {'wall_s': 20.0}) == {'value': 0.2, 'target': 0.2, 'met': True}
    assert cp.ratio({'wall_s': 172.0}, {'wall_s': 88.0})['met'] is False
    assert cp.ratio({'wall_s': 0.0}, {'wall_s': 1.0})['value'] is None


def test_ratio_and_logs_are_written(tmp_path, capsys):
    deploy, pid = _fake_deploy(tmp_path, 0, ('4242', '4242'))
    out = tmp_path / 'perf.json'
    assert cp.main(['--deploy', deploy, '--pid', pid, '--no-fetch', '--out', str(out)]) == 0
    doc = json.loads(out.read_text())
    assert set(doc['ratio']) == {'value', 'target', 'met'} and doc['ratio']['target'] == 0.2
    assert 'changed=5' in (tmp_path / 'perf.first.log').read_text()
    assert 'changed=0' in (tmp_path / 'perf.rerun.log').read_text()
    assert 're-run / first converge:' in capsys.readouterr().out


def test_floor_times_tasks_for_real_on_the_controller(tmp_path, capsys):
    """--floor's playbooks, run for real against the implicit localhost (no container needed)."""
    inventory = tmp_path / 'hosts.ini'
    inventory.write_text('here ansible_connection=local ansible_python_interpreter=%s\n' % sys.executable)
    floor = cp.task_floor(2, str(inventory), 'here', 300)
    # a module round trip (even over the local connection) costs more than a debug on the controller
    assert floor['connection_s_per_task'] > floor['controller_s_per_task'] >= 0
    assert floor['outside_tasks_s'] > 0
    with pytest.raises(SystemExit):
        cp.main(['--floor', '1', '--out', str(tmp_path / 'x.json')])
    assert '--floor needs 2 tasks or more' in capsys.readouterr().err


# The default callback's output of one play (as make lab prints it with profile_tasks), shortened.
CALLBACK = """
TASK [lab_model_mirror : Validating arguments against arg spec 'main' - Lab-only model mirror] ***
Tuesday 01 December 2026  17:00:31 +0000 (0:00:00.010)       0:00:00.010 ******
ok: [dankfleet-lab]

TASK [lab_model_mirror : Read the mirror's files and unit (one read-only probe)] ***
ok: [dankfleet-lab]

TASK [lab_model_mirror : Install the Range HTTP server] ************************
skipping: [dankfleet-lab]

TASK [lab_model_mirror : Apply pending restarts] *******************************

TASK [dankfleet.llm._common : Create the directories] **************************
skipping: [dankfleet-lab] => (item=/etc/prometheus/rules.d)
skipping: [dankfleet-lab] => (item=/var/lib/grafana/dashboards)
skipping: [dankfleet-lab]

TASK [dankfleet.llm._common : Create the directories] **************************
skipping: [dankfleet-lab] => (item=/etc/a)
changed: [dankfleet-lab] => (item=/etc/b)

TASK [Say what it did] *********************************************************
ok: [dankfleet-lab] =>
    msg: done

RUNNING HANDLER [lab_model_mirror : Restart the lab model mirror] **************
fatal: [dankfleet-lab]: FAILED! => changed=false

TASKS RECAP ********************************************************************
===============================================================================
lab_model_mirror : Validating arguments against arg spec 'main' - Lab-only model mirror --- 0.25s
lab_model_mirror : Read the mirror's files and unit (one read-only probe) --- 0.31s
lab_model_mirror : Install the Range HTTP server ------------------------ 0.24s
lab_model_mirror : Apply pending restarts ------------------------------- 0.00s
dankfleet.llm._common : Create the directories -------------------------- 0.02s
dankfleet.llm._common : Create the directories -------------------------- 0.61s
Say what it did --------------------------------------------------------- 0.03s
lab_model_mirror : Restart the lab model mirror ------------------------- 0.70s
"""


def test_task_results_say_which_tasks_ran_for_a_host():
    assert cp.parse_task_results(CALLBACK) == [
        ("lab_model_mirror : Validating arguments against arg spec 'main' - Lab-only model mirror", True),
        ("lab_model_mirror : Read the mirror's files and unit (one read-only probe)", True),
        ('lab_model_mirror : Install the Range HTTP server', False),
        ('lab_model_mirror : Apply pending restarts', False),
        ('dankfleet.llm._common : Create the directories', False),
        ('dankfleet.llm._common : Create the directories', True),
        ('Say what it did', True),
        ('lab_model_mirror : Restart the lab model mirror', True)]


def test_round_trips_are_the_tasks_that_ran_on_the_host():
    """Not a skipped task however long it took, not the controller's argument spec check nor a debug; the
    second of two tasks with one name by its own result; a handler that failed still went to the host."""
    trips = cp.round_trips(cp.parse_profile(CALLBACK), cp.parse_task_results(CALLBACK))
    assert trips == {'count': 3, 'seconds': 1.62, 'tasks': [
        {'task': "lab_model_mirror : Read the mirror's files and unit (one read-only probe)", 's': 0.31},
        {'task': 'dankfleet.llm._common : Create the directories', 's': 0.61},
        {'task': 'lab_model_mirror : Restart the lab model mirror', 's': 0.70}]}
    # without the callback's results (another stdout callback): every task that took a round trip's time
    assert cp.round_trips(cp.parse_profile(CALLBACK), [])['count'] == 4


def test_the_rerun_round_trips_are_printed_and_written(tmp_path, capsys):
    script = tmp_path / 'deploy.sh'
    script.write_text('#!/bin/bash\ncat <<"OUT"\n%s\nPLAY RECAP ***\nlab : ok=5 changed=0 unreachable=0 failed=0\nOUT\n'
                      % CALLBACK.replace('fatal: [dankfleet-lab]: FAILED! => changed=false', 'ok: [dankfleet-lab]'))
    out = tmp_path / 'perf.json'
    assert cp.main(['--deploy', 'bash %s' % script, '--pid', 'echo 7', '--no-fetch', '--profile', '--out', str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [r['round_trips']['count'] for r in doc['runs']] == [3, 3]
    printed = capsys.readouterr().out
    assert 're-run, host round trips: 3 tasks ran on the host (1.62 s; first converge: 3):' in printed


def test_one_command_of_two_playbooks_the_prepare_play_counts_and_nothing_twice(tmp_path):
    """make lab runs the prepare play and the deploy in one ansible-playbook: a recap each (the last one's
    counts are the deploy's, a change in the first still fails the re-run), and profile_tasks' second
    summary repeats the first one's tasks (counted once)."""
    text = ("PLAY RECAP ***\nlab : ok=3 changed=1 unreachable=0 failed=0\n\n"
            "===============================================================================\n"
            "Read the probe ------------------------------------------------------------ 0.46s\n"
            "Publish it ---------------------------------------------------------------- 0.02s\n\n"
            "PLAY [Deploy] ***\n"
            "PLAY RECAP ***\nlab : ok=91 changed=0 unreachable=0 failed=0\n\n"
            "===============================================================================\n"
            "Read the probe ------------------------------------------------------------ 0.46s\n"
            "Publish it ---------------------------------------------------------------- 0.02s\n"
            "Ask the endpoint ---------------------------------------------------------- 0.87s\n")
    recap = cp.parse_recap(text)
    assert (recap['ok'], recap['changed'], recap['recaps'], recap['changed_all']) == (91, 0, 2, 1)
    assert cp.parse_profile(text) == [('Read the probe', 0.46), ('Publish it', 0.02), ('Ask the endpoint', 0.87)]
    # two commands (each its own summary, not a prefix of the next): both kept
    assert len(cp.parse_profile(PROFILED + PROFILED.replace('2.10s', '2.20s'))) == 8
    script = tmp_path / 'deploy.sh'
    script.write_text('#!/bin/bash\ncat <<"OUT"\n%s\nOUT\n' % text)
    out = tmp_path / 'perf.json'
    assert cp.main(['--deploy', 'bash %s' % script, '--pid', 'echo 7', '--no-fetch', '--out', str(out)]) == 1
    assert json.loads(out.read_text())['problems'] == ['the re-run changed 1 task(s): not idempotent']
