"""`make lab` compiles llama-server in the background beside venv, lab-image and models (issue 37): the
llama-server target needs no venv (so the two cannot race), and tests/lab/steps.sh's bg:/wait: steps time the
background step and the wait, fail the run at the wait with the end of its log, and stop it when the run is
interrupted. steps.sh runs here with a stand-in make (a script that sleeps, writes and exits as told)."""
import os
import shutil
import signal
import subprocess
import time

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
STEPS = os.path.join(REPO, 'tests', 'lab', 'steps.sh')

pytestmark = pytest.mark.skipif(shutil.which('make') is None or shutil.which('setsid') is None,
                                reason='make or setsid is not installed')

FAKE_MAKE = """#!/bin/bash
# $1 is --no-print-directory, $2 the target
echo "$2 $(date +%s.%N)" >> "$FAKE_DIR/order"
case $2 in
  build) echo compiling; sleep "${BUILD_S:-1}"; printf '1\\tok\\tfiner row\\n' >> "$STEPS_TIMINGS"
         echo "build done $(date +%s.%N)" >> "$FAKE_DIR/order"; exit "${BUILD_RC:-0}" ;;
  *) sleep 0.2 ;;
esac
"""


def _make_dry(target, tmp_path):
    out = subprocess.run(['make', '-n', '-B', '-C', REPO, target, 'VENV=%s' % (tmp_path / 'venv')],
                         capture_output=True, text=True, check=True, env=dict(os.environ, MAKEFLAGS=''))
    return out.stdout


def test_make_lab_builds_in_the_background_beside_venv_image_and_models(tmp_path):
    out = _make_dry('lab', tmp_path)
    steps = next(line for line in out.splitlines() if 'steps.sh' in line).split()
    steps = steps[steps.index('lab"') + 1:]
    assert steps == ['host-deps', 'bg:llama-server', 'venv', 'lab-image', 'models', 'wait:llama-server', 'lab-deploy']
    # the background build makes no venv of its own: the venv step makes it once
    build = _make_dry('llama-server', tmp_path)
    assert 'build-llama-server.sh' in build and '-m venv' not in build


def _steps(tmp_path, *steps, **env):
    fake = tmp_path / 'make'
    fake.write_text(FAKE_MAKE)
    fake.chmod(0o755)
    full = dict(os.environ, MAKE=str(fake), FAKE_DIR=str(tmp_path), **env)
    return subprocess.Popen([STEPS, 'fake run'] + list(steps), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=full, cwd=REPO, start_new_session=True)


def _rows(out):
    table = out.split('where the time went', 1)[1].splitlines()[3:]
    return [(line[:49].strip(), line[49:].split()[0], line[49:].split(None, 1)[1]) for line in table if line.strip()]


def test_the_background_step_runs_beside_the_next_ones_and_is_timed(tmp_path):
    proc = _steps(tmp_path, 'first', 'bg:build', 'a', 'b', 'wait:build', 'last', BUILD_S='1.5')
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, out + err
    events = {}
    for line in (tmp_path / 'order').read_text().splitlines():
        words = line.split()
        events[' '.join(words[:-1])] = float(words[-1])
    # a and b ran while the build ran; last only after the build was done
    assert events['a'] < events['build done'] and events['b'] < events['build done']
    assert events['last'] > events['build done']
    names = [r[0] for r in _rows(out)]
    assert names == ['first', 'a', 'b', 'build (background)', 'finer row', 'waiting for build', 'last', 'total']
    rows = dict((r[0], r) for r in _rows(out))
    assert rows['build (background)'][2] == 'ok' and rows['waiting for build'][2] == 'ok'
    assert 'compiling' in open(os.path.join(REPO, '.lab', 'steps-build.log')).read()


def test_a_failed_background_step_fails_the_run_at_its_wait_with_its_log(tmp_path):
    proc = _steps(tmp_path, 'bg:build', 'a', 'wait:build', 'last', BUILD_RC='3')
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3
    assert 'build failed (rc 3)' in err and 'compiling' in err
    rows = dict((r[0], r) for r in _rows(out))
    assert rows['build (background)'][2] == 'FAILED (rc 3)' and rows['total'][2] == 'FAILED'
    assert 'last' not in rows


def test_an_interrupted_run_stops_the_background_step(tmp_path):
    proc = _steps(tmp_path, 'bg:build', 'wait:build', BUILD_S='30')
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode != 0
    rows = dict((r[0], r) for r in _rows(out))
    assert rows['build (background)'][1:] == ('-', 'interrupted')
    time.sleep(0.5)
    assert 'build done' not in (tmp_path / 'order').read_text()
    assert _ours_alive(tmp_path) == []


def _ours_alive(tmp_path):
    found = []
    for pid in subprocess.run(['pgrep', '-f', 'sleep 30'], capture_output=True, text=True).stdout.split():
        try:
            with open('/proc/%s/environ' % pid, 'rb') as handle:
                if str(tmp_path).encode() in handle.read():
                    found.append(pid)
        except OSError:
            pass  # gone meanwhile
    return found
