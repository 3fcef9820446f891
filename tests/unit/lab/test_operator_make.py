"""The operator's first run in the Makefile: `make venv` needs only Python (no host-deps), the lab/test
targets still install the OS packages first, and `make test` refuses while the lab holds its ports
(tests/lab/lab-idle.sh, run here with stand-in podman and ss)."""
import os
import shutil
import subprocess

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))

pytestmark = pytest.mark.skipif(shutil.which('make') is None, reason='make is not installed')


def _dry_run(target, tmp_path):
    # -n prints every recipe line make would run, prerequisites included; a venv under tmp_path is never
    # up to date, so its recipe is printed too. -B: nothing counts as built.
    out = subprocess.run(['make', '-n', '-B', '-C', REPO, target, 'VENV=%s' % (tmp_path / 'venv')],
                         capture_output=True, text=True, check=True, env=dict(os.environ, MAKEFLAGS=''))
    return out.stdout


def test_make_venv_runs_no_host_deps(tmp_path):
    out = _dry_run('venv', tmp_path)
    assert '-m venv' in out and 'pip install' in out
    assert 'host-deps' not in out


@pytest.mark.parametrize('target', ['unit', 'sanity', 'molecule', 'integration', 'lab-deploy'])
def test_lab_and_test_targets_still_install_the_os_packages_first(tmp_path, target):
    out = _dry_run(target, tmp_path)
    assert 'tests/lab/host-deps.sh' in out
    assert out.index('tests/lab/host-deps.sh') < out.index('-m venv')


def test_make_test_checks_the_lab_first_then_installs_everything(tmp_path):
    out = _dry_run('test', tmp_path)
    steps = next(line for line in out.splitlines() if 'steps.sh' in line).split()
    assert steps[steps.index('"make') + 2:][:3] == ['lab-idle', 'host-deps', 'venv']


def _fake_bin(tmp_path, podman_running, ss_line=''):
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    (bin_dir / 'podman').write_text('#!/bin/sh\n%s\n' % ('echo true' if podman_running else 'exit 125'))
    (bin_dir / 'ss').write_text('#!/bin/sh\nprintf "%%s" %s\n' % repr(ss_line))
    for name in ('podman', 'ss'):
        os.chmod(bin_dir / name, 0o755)
    return str(bin_dir)


def _lab_idle(tmp_path, **fake):
    env = dict(os.environ, PATH='%s:/usr/bin:/bin' % _fake_bin(tmp_path, **fake))
    return subprocess.run([os.path.join(REPO, 'tests/lab/lab-idle.sh')], capture_output=True, text=True, env=env)


def test_lab_idle_refuses_while_the_lab_container_runs(tmp_path):
    run = _lab_idle(tmp_path, podman_running=True)
    assert run.returncode == 1
    assert 'dankfleet-lab is running' in run.stderr
    assert 'make clean-lab' in run.stderr
    assert '18470' in run.stderr


def test_lab_idle_refuses_while_a_lab_port_is_held(tmp_path):
    held = 'LISTEN 0 5 127.0.0.1:18470 0.0.0.0:* users:(("llama-server",pid=42,fd=3))\n'
    run = _lab_idle(tmp_path, podman_running=False, ss_line=held)
    assert run.returncode == 1
    assert '127.0.0.1:18170 is held' in run.stderr or '127.0.0.1:18470 is held' in run.stderr
    assert 'llama-server' in run.stderr


def test_lab_idle_passes_with_no_lab(tmp_path):
    run = _lab_idle(tmp_path, podman_running=False)
    assert run.returncode == 0, run.stderr
