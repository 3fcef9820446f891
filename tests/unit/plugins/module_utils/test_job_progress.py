"""job_progress: the build's [N/M] and the fetch's bytes/rate/ETA, read from the real log formats
(llama_cpp_release.run_logged's `$ argv` lines, gguf_fetch's ProgressLog), and the wait on a results file."""
import json
import os

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils.host import job_progress as jp
from ansible_collections.dankfleet.llm.plugins.module_utils.host.gguf_fetch import ProgressLog
from ansible_collections.dankfleet.llm.plugins.module_utils.host.llama_cpp_release import run_logged


def test_build_counts_objects_of_the_current_command_only():
    lines = ['$ cmake --build /b -j 2', '[233/234] Building CXX object old.o', 'FAILED',
             '$ cmake -S /s -B /b -G Ninja', '-- Configuring done',
             '$ cmake --build /b -j 2 --target llama-server',
             '[1/120] Building C object ggml.c.o', '[57/120] Building CXX object llama.cpp.o', 'warning: x']
    out = jp.build_progress(lines)
    assert (out['done'], out['total'], out['percent']) == (57, 120, 47.5)
    assert out['msg'] == 'built 57 of 120 objects (48%)'


@pytest.mark.parametrize('lines, msg', [
    ([], 'not started yet'),
    (['$ cmake -S /s -B /b', '-- The C compiler'], 'configuring (cmake)'),
    (['$ cmake -S /s -B /b', '$ cmake --build /b -j 2'], 'built 0 objects yet (the build has started)'),
    (['$ make -j2', '[ 42%] Building CXX object x.o'], 'built 42% of the objects'),
    (['$ cmake --build /b -j 2', 'ninja: no work to do.'], 'built 0 objects: ninja had no work to do'),
])
def test_build_says_where_it_is_before_any_count(lines, msg):
    assert jp.build_progress(lines)['msg'] == msg


def test_build_reads_a_log_written_by_run_logged(tmp_path):
    log = tmp_path / 'build.log'
    script = 'import sys\nfor i in range(1, 4): print("[%d/7] Building CXX object o%d.o" % (i, i))\n'
    run_logged(['python3', '-c', script, '--build'], dict(os.environ), str(log))
    out = jp.progress(str(log), 'build')
    assert (out['done'], out['total'], out['finished']) == (3, 7, False)


def test_fetch_reads_its_own_file_after_its_last_start(tmp_path):
    path = tmp_path / 'fetch.log'
    log = ProgressLog(str(path), 'model.gguf', 0)
    log.line('start http://m/model.gguf -> /m/model.gguf (1000 bytes, sha256 x)')
    log.progress(900, 1000, 100.0)          # an earlier run's figures
    log.line('start http://m/model.gguf -> /m/model.gguf (3221225472 bytes, sha256 x)')
    log.progress(1073741824, 3221225472, 50 * 1048576.0)
    other = ProgressLog(str(path), 'drafter.gguf', 0)
    other.progress(5, 10, 1.0)
    log.close()
    other.close()
    out = jp.progress(str(path), 'fetch', label='model.gguf')
    assert (out['done'], out['total'], out['rate'], out['eta_s']) == (1073741824, 3221225472, '50.00 MiB/s', 40)
    assert out['msg'] == 'model.gguf: 1.00 GiB of 3.00 GiB (33.3%), 50.00 MiB/s, ETA 40s'


def test_fetch_names_a_retry_and_the_wait_for_the_first_line(tmp_path):
    path = tmp_path / 'fetch.log'
    assert jp.progress(str(path), 'fetch', label='m.gguf')['msg'] == 'm.gguf: waiting for its first progress line'
    log = ProgressLog(str(path), 'm.gguf', 0)
    log.line('resume from byte 10 (x)')
    log.progress(4000, 10000, 1000.0)
    log.line('attempt 2 failed: timed out; retry in 2.0s')
    log.close()
    out = jp.progress(str(path), 'fetch', label='m.gguf')
    assert out['msg'] == 'm.gguf: 3.91 KiB of 9.77 KiB (40.0%), 1000 B/s, ETA 6s; attempt 2 failed: timed out; retry in 2.0s'


def test_fetch_without_a_rate_has_no_eta():
    out = jp.fetch_progress(['t m.gguf start x', 't m.gguf progress 0/10 bytes (0.0%) 0 B/s/s eta ?'.replace('/s/s', '/s')],
                            'm.gguf')
    assert out['eta_s'] is None and out['msg'].endswith('ETA ?')


@pytest.mark.parametrize('seconds, text', [(5, '5s'), (125, '2m05s'), (3725, '1h02m')])
def test_human_seconds(seconds, text):
    assert jp.human_seconds(seconds) == text


def test_wait_returns_when_the_results_file_holds_the_result(tmp_path):
    results = tmp_path / 'jid'
    results.write_text(json.dumps({'started': 1, 'finished': 0, 'ansible_job_id': 'j'}))
    now = [0.0]

    def sleep(s):
        now[0] += s
        if now[0] >= 2:
            results.write_text(json.dumps({'changed': True, 'msg': 'built'}))
    assert jp.wait(str(results), 30, clock=lambda: now[0], sleep=sleep) is True
    assert now[0] == 2.0


def test_wait_gives_up_after_the_delay(tmp_path):
    results = tmp_path / 'jid'
    results.write_text('{"started": 1, "finished": 0}')
    now = [0.0]
    assert jp.wait(str(results), 3, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s)) is False
    assert now[0] == 3.0
    assert jp.job_finished(str(tmp_path / 'absent')) is False
    results.write_text('{"started": 1, "fin')     # async_wrapper renames a whole record in: a cut one is no record
    with pytest.raises(jp.ProgressError, match='not JSON'):
        jp.job_finished(str(results))


def test_a_log_that_is_a_link_is_refused(tmp_path):
    (tmp_path / 'real.log').write_text('[1/2] x\n')
    os.symlink(tmp_path / 'real.log', tmp_path / 'link.log')
    with pytest.raises(jp.ProgressError, match='link.log'):
        jp.progress(str(tmp_path / 'link.log'), 'build')


def test_the_tail_drops_its_cut_first_line(tmp_path):
    log = tmp_path / 'big.log'
    log.write_text('$ cmake --build b\n' + ''.join('[%d/900] Building CXX object %s.o\n' % (i, 'x' * 40) for i in range(1, 901)))
    lines = jp.tail_lines(str(log), max_bytes=1000)
    assert all(line.startswith('[') and line.endswith('.o') for line in lines)
    assert jp.build_progress(lines)['done'] == 900


def test_fetch_needs_its_label():
    with pytest.raises(jp.ProgressError, match='label'):
        jp.progress(None, 'fetch')
