# -*- coding: utf-8 -*-
"""The launcher: env-driven, no arguments, the drafter/mmproj wiring, refusals before exec."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import subprocess

import pytest

from ansible_collections.dankfleet.llm.tests.unit.roles.serve_roles_helpers import render


@pytest.fixture(scope='module')
def launcher(tmp_path_factory):
    path = tmp_path_factory.mktemp('launcher') / 'serve-llama-server'
    path.write_text(render('llama_server', 'serve-llama-server.sh.j2'))
    path.chmod(0o755)
    assert subprocess.run(['bash', '-n', str(path)]).returncode == 0
    return str(path)


@pytest.fixture
def files(tmp_path):
    """A fake llama-server that prints its arguments one per line, and payload files."""
    fake = tmp_path / 'llama-server'
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    fake.chmod(0o755)
    for name in ('target.gguf', 'draft.gguf', 'mmproj.gguf'):
        (tmp_path / name).write_text('GGUF')
    return tmp_path


def run(launcher, files, *args, **env):
    base = {
        'PATH': '/usr/bin:/bin', 'LLAMA_BIN': str(files / 'llama-server'), 'MODEL_PATH': str(files / 'target.gguf'),
        'DRAFT_MODEL_PATH': str(files / 'draft.gguf'), 'MMPROJ_PATH': str(files / 'mmproj.gguf'),
        'ALIAS': 'frank-medium', 'BIND_ADDR': '127.0.0.1', 'LISTEN_PORT': '7770', 'CTX_SIZE': '2048', 'PARALLEL': '2',
        'SPEC_DRAFT_N_MAX': '3', 'SPEC_NGRAM_MOD_N_MIN': '48', 'SPEC_NGRAM_MOD_N_MAX': '64', 'METRICS': 'on',
    }
    base.update(env)
    base = dict((k, v) for k, v in base.items() if v is not None)
    cmd = subprocess.run([launcher] + list(args), env=base, capture_output=True, text=True)
    return cmd.returncode, cmd.stdout.splitlines(), cmd.stderr


def flag(argv, name):
    return argv[argv.index(name) + 1] if name in argv else None


def test_draft_mtp_never_gets_a_drafter_model(launcher, files):
    rc, argv, err = run(launcher, files, SPEC_TYPE='draft-mtp')
    assert rc == 0, err
    assert flag(argv, '--spec-type') == 'draft-mtp'
    assert '--spec-draft-model' not in argv
    assert flag(argv, '--spec-draft-n-max') == '3'
    assert '--spec-ngram-mod-n-min' not in argv


@pytest.mark.parametrize('spec', ['draft-dflash', 'draft-dspark', 'draft-simple', 'draft-dflash,ngram-mod'])
def test_model_backed_drafters_get_their_model(launcher, files, spec):
    rc, argv, err = run(launcher, files, SPEC_TYPE=spec)
    assert rc == 0, err
    assert flag(argv, '--spec-draft-model') == str(files / 'draft.gguf')
    assert ('--spec-ngram-mod-n-min' in argv) == ('ngram-mod' in spec)


def test_ngram_mod_alone_needs_no_drafter_and_gets_its_window(launcher, files):
    rc, argv, err = run(launcher, files, SPEC_TYPE='ngram-mod', DRAFT_MODEL_PATH='/nonexistent')
    assert rc == 0, err
    assert '--spec-draft-model' not in argv and '--spec-draft-n-max' not in argv
    assert flag(argv, '--spec-ngram-mod-n-min') == '48' and flag(argv, '--spec-ngram-mod-n-max') == '64'


def test_no_spec_type_no_spec_flags(launcher, files):
    rc, argv, err = run(launcher, files)
    assert rc == 0, err
    assert not [a for a in argv if a.startswith('--spec')]


def test_vision_on_passes_mmproj_and_off_passes_no_mmproj(launcher, files):
    rc, argv, _ = run(launcher, files, VISION='on')
    assert rc == 0 and flag(argv, '--mmproj') == str(files / 'mmproj.gguf') and '--no-mmproj' not in argv
    rc, argv, _ = run(launcher, files, VISION='off')
    assert rc == 0 and '--mmproj' not in argv and '--no-mmproj' in argv


def test_the_endpoint_and_the_sizing_flags(launcher, files):
    rc, argv, _ = run(launcher, files, DEVICES='ROCm0,ROCm1', TENSOR_SPLIT='35,30', FIT='off', CACHE_RAM='16384',
                      CTX_CHECKPOINTS='0', CHAT_TEMPLATE_KWARGS='{"enable_thinking":true}')
    assert rc == 0
    assert argv[:8] == ['--model', str(files / 'target.gguf'), '--alias', 'frank-medium', '--host', '127.0.0.1',
                        '--port', '7770']
    assert flag(argv, '--device') == 'ROCm0,ROCm1' and flag(argv, '--tensor-split') == '35,30'
    assert flag(argv, '--fit') == 'off' and flag(argv, '--cache-ram') == '16384'
    assert flag(argv, '--ctx-checkpoints') == '0' and flag(argv, '--ctx-size') == '2048'
    assert flag(argv, '--chat-template-kwargs') == '{"enable_thinking":true}'
    assert '--metrics' in argv
    assert '--api-key' not in argv  # the key travels as LLAMA_API_KEY, never on the command line


def test_extra_args_keep_their_quoting(launcher, files):
    rc, argv, _ = run(launcher, files, EXTRA_ARGS="--override-kv 'a=str:it'\"'\"'s x' --no-webui")
    assert rc == 0
    assert argv[-3:] == ['--override-kv', "a=str:it's x", '--no-webui']


@pytest.mark.parametrize('env, reason', [
    ({'MODEL_PATH': '/nonexistent.gguf'}, 'the model /nonexistent.gguf is missing'),
    ({'LLAMA_BIN': '/nonexistent/llama-server'}, 'binary /nonexistent/llama-server is missing'),
    ({'SPEC_TYPE': 'draft-dflash', 'DRAFT_MODEL_PATH': '/nonexistent.gguf'}, 'the drafter /nonexistent.gguf'),
    ({'SPEC_TYPE': 'draft-dflash', 'DRAFT_MODEL_PATH': None}, 'needs DRAFT_MODEL_PATH'),
    ({'SPEC_TYPE': 'draft-mtp,draft-dspark'}, 'chains draft-mtp with draft-dspark'),
    ({'SPEC_TYPE': 'draft-turbo'}, "names 'draft-turbo'"),
    ({'VISION': 'on', 'MMPROJ_PATH': '/nonexistent.gguf'}, 'the mmproj /nonexistent.gguf is missing'),
    ({'VISION': 'on', 'MMPROJ_PATH': None}, 'VISION=on needs MMPROJ_PATH'),
    ({'VISION': 'maybe'}, 'VISION must be on or off'),
    ({'ALIAS': None}, 'ALIAS is not set'),
    ({'CHAT_TEMPLATE_FILE': '/nonexistent.jinja'}, 'the chat template /nonexistent.jinja is missing'),
])
def test_refusals_exit_78_before_llama_server_runs(launcher, files, env, reason):
    rc, argv, err = run(launcher, files, **env)
    assert rc == 78, (argv, err)
    assert argv == []  # the fake binary never ran
    assert 'refusing to start' in err and reason in err, err


def test_arguments_are_refused(launcher, files):
    rc, argv, err = run(launcher, files, '--port', '1')
    assert rc == 78 and argv == [] and 'takes no arguments' in err


def test_an_env_file_can_be_named_for_a_run_by_hand(launcher, files, tmp_path):
    env = tmp_path / 'x.env'
    env.write_text("ALIAS='by hand'\nSPEC_TYPE=draft-mtp\n")
    rc, argv, err = run(launcher, files, LLAMA_SERVER_ENV_FILE=str(env), ALIAS='ignored')
    assert rc == 0, err
    assert flag(argv, '--alias') == 'by hand'


@pytest.mark.parametrize('env, n_cpu_moe, cpu_moe', [
    ({}, None, False),
    ({'N_CPU_MOE': '0', 'CPU_MOE': 'off'}, None, False),
    ({'N_CPU_MOE': '24', 'CPU_MOE': 'off'}, '24', False),
    ({'N_CPU_MOE': '0', 'CPU_MOE': 'on'}, None, True),
])
def test_experts_on_the_host_become_their_flags(launcher, files, env, n_cpu_moe, cpu_moe):
    """issue 38: N_CPU_MOE (when not 0) is --n-cpu-moe N, CPU_MOE=on is --cpu-moe; nothing otherwise."""
    rc, argv, err = run(launcher, files, **env)
    assert rc == 0, err
    assert flag(argv, '--n-cpu-moe') == n_cpu_moe and ('--cpu-moe' in argv) == cpu_moe


@pytest.mark.parametrize('env, mode', [({}, None), ({'LOAD_MODE': 'auto'}, None), ({'LOAD_MODE': 'none'}, 'none'),
                                       ({'LOAD_MODE': 'mmap+mlock'}, 'mmap+mlock')])
def test_a_load_mode_other_than_auto_becomes_its_flag(launcher, files, env, mode):
    """issue 38: LOAD_MODE (when not auto, llama.cpp's own default) is --load-mode MODE."""
    rc, argv, err = run(launcher, files, **env)
    assert rc == 0, err
    assert flag(argv, '--load-mode') == mode and argv.count('--load-mode') == (mode is not None)


@pytest.mark.parametrize('env, want, absent', [
    ({'VISION': 'on'}, [], ['--mmproj-device', '--no-mmproj-offload', '--image-min-tokens', '--image-max-tokens']),
    ({'VISION': 'on', 'MMPROJ_DEVICE': 'ROCm1', 'MMPROJ_OFFLOAD': 'on', 'IMAGE_MIN_TOKENS': '0', 'IMAGE_MAX_TOKENS': '0'},
     [('--mmproj-device', 'ROCm1')], ['--no-mmproj-offload', '--image-min-tokens', '--image-max-tokens']),
    ({'VISION': 'on', 'MMPROJ_DEVICE': 'ROCm1', 'MMPROJ_OFFLOAD': 'off', 'IMAGE_MAX_TOKENS': '1024'},
     [('--no-mmproj-offload', None), ('--image-max-tokens', '1024')], ['--mmproj-device', '--image-min-tokens']),
    ({'VISION': 'on', 'IMAGE_MIN_TOKENS': '64', 'IMAGE_MAX_TOKENS': '8192'},
     [('--image-min-tokens', '64'), ('--image-max-tokens', '8192')], ['--mmproj-device']),
    ({'VISION': 'off', 'MMPROJ_DEVICE': 'ROCm1', 'MMPROJ_OFFLOAD': 'off', 'IMAGE_MAX_TOKENS': '1024'},
     [('--no-mmproj', None)], ['--mmproj-device', '--no-mmproj-offload', '--image-max-tokens']),
])
def test_the_image_options_become_their_flags_with_vision_on(launcher, files, env, want, absent):
    """issue 34: MMPROJ_DEVICE (set, offload on) is --mmproj-device, MMPROJ_OFFLOAD=off --no-mmproj-offload, the
    image-token limits (when not 0) their flags; none of them without VISION=on."""
    rc, argv, err = run(launcher, files, **env)
    assert rc == 0, err
    for name, value in want:
        assert name in argv and (value is None or flag(argv, name) == value), argv
    assert not [a for a in absent if a in argv], argv


def test_a_bad_mmproj_offload_is_refused(launcher, files):
    rc, _, err = run(launcher, files, VISION='on', MMPROJ_OFFLOAD='maybe')
    assert rc != 0 and 'MMPROJ_OFFLOAD must be on or off' in err
