"""benchmarks/collection_perf.py: PLAY RECAP and fetch_vs_curl parsing, and the idempotence verdict,
driven end to end with stand-in deploy and MainPID commands (the lab deploy is run for real by the
lead with `python benchmarks/collection_perf.py`)."""
import json
import os

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
