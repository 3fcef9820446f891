# -*- coding: utf-8 -*-
"""llama-env-check: the validator every env file passes before it goes live."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import subprocess
import sys

import pytest

from ansible_collections.dankfleet.llm.tests.unit.roles.serve_roles_helpers import load_role_script, role_file

CHECKER = role_file('llama_server', 'files', 'llama_env_check.py')
check_mod = load_role_script('llama_server', 'llama_env_check')

GOOD = """# a comment
LLAMA_BIN=/opt/llama.cpp/current/bin/llama-server
MODEL_PATH=/models/t.gguf
DRAFT_MODEL_PATH=/models/d.gguf
ALIAS=frank-medium
BIND_ADDR=0.0.0.0
LISTEN_PORT=7770
CTX_SIZE=327680
PARALLEL=2
BATCH_SIZE=6144
UBATCH_SIZE=512
DEVICES=ROCm0,ROCm1
TENSOR_SPLIT=36,29
FIT=off
FLASH_ATTN=on
TEMPERATURE=0.7
SPEC_TYPE=draft-dflash,ngram-mod
CHAT_TEMPLATE_KWARGS='{"enable_thinking":true,"preserve_thinking":true}'
VISION=on
MMPROJ_PATH=/models/mmproj.gguf
"""


def problems(text):
    variables, found = check_mod.parse(text)
    return found + check_mod.check(variables)


def test_the_runbook_shape_passes():
    assert problems(GOOD) == []


@pytest.mark.parametrize('name', ['TEMP', 'HOST', 'GPU_MAX_HEAP_SIZE'])
def test_names_hip_reads_bare_are_refused(name):
    found = problems(GOOD + '%s=/tmp\n' % name)
    assert len(found) == 1 and found[0].startswith('%s is set: HIP reads %s bare' % (name, name))


@pytest.mark.parametrize('edit, message', [
    (('SPEC_TYPE=draft-dflash,ngram-mod', 'SPEC_TYPE=draft-mtp,draft-dflash'), 'chains draft-mtp with draft-dflash'),
    (('SPEC_TYPE=draft-dflash,ngram-mod', 'SPEC_TYPE=draft-turbo'), "names 'draft-turbo'"),
    (('DRAFT_MODEL_PATH=/models/d.gguf', 'DRAFT_MODEL_PATH='), 'DRAFT_MODEL_PATH is empty'),
    (('MMPROJ_PATH=/models/mmproj.gguf', 'MMPROJ_PATH='), 'VISION=on but MMPROJ_PATH is empty'),
    (('CTX_SIZE=327680', 'CTX_SIZE=327681'), 'not divisible by PARALLEL=2'),
    (('UBATCH_SIZE=512', 'UBATCH_SIZE=8192'), 'UBATCH_SIZE=8192 is above BATCH_SIZE=6144'),
    (('TENSOR_SPLIT=36,29', 'TENSOR_SPLIT=36,29,1'), 'has 3 shares for 2 DEVICES'),
    (('FIT=off', 'FIT=False'), "FIT='False' must be one of on|off"),
    (('LISTEN_PORT=7770', 'LISTEN_PORT=seventy'), "LISTEN_PORT='seventy' is not an integer"),
    (('LISTEN_PORT=7770', 'LISTEN_PORT=70000'), 'is not a TCP port'),
    (('TEMPERATURE=0.7', 'TEMPERATURE=warm'), "TEMPERATURE='warm' is not a number"),
    (("CHAT_TEMPLATE_KWARGS='{\"enable_thinking\":true,\"preserve_thinking\":true}'", "CHAT_TEMPLATE_KWARGS='[1]'"),
     'must be a JSON object'),
    (("CHAT_TEMPLATE_KWARGS='{\"enable_thinking\":true,\"preserve_thinking\":true}'", "CHAT_TEMPLATE_KWARGS='{oops'"),
     'is not JSON'),
    (('ALIAS=frank-medium', 'ALIAS='), 'ALIAS is missing or empty'),
    (('ALIAS=frank-medium', 'ALIAS=a\nALIAS=b'), 'ALIAS is set twice'),
    (('ALIAS=frank-medium', 'ALIAS frank'), 'neither a comment nor NAME=VALUE'),
    (('ALIAS=frank-medium', '1ALIAS=frank'), "'1ALIAS' is not a valid variable name"),
    (('ALIAS=frank-medium', "ALIAS='frank"), 'unterminated single quote'),
    (('ALIAS=frank-medium', 'ALIAS=frank-medium\nN_CPU_MOE=half'), "N_CPU_MOE='half' is not an integer"),
    (('ALIAS=frank-medium', 'ALIAS=frank-medium\nCPU_MOE=yes'), "CPU_MOE='yes' must be one of on|off"),
    (('ALIAS=frank-medium', 'ALIAS=frank-medium\nLOAD_MODE=pinned'), "LOAD_MODE='pinned' must be one of auto|none"),
])
def test_each_problem_is_named(edit, message):
    text = GOOD.replace(*edit)
    assert text != GOOD
    found = problems(text)
    assert any(message in p for p in found), found


@pytest.mark.parametrize('raw, value', [
    ('plain', 'plain'),
    ("'{\"a\":true}'", '{"a":true}'),
    ('"it\'s \\$x \\"q\\" \\\\ \\`c\\`"', 'it\'s $x "q" \\ `c`'),
    ("  padded  ", 'padded'),
    ('"keep \\n as is"', 'keep \\n as is'),
])
def test_values_are_read_as_systemd_reads_them(raw, value):
    assert check_mod.parse_value(raw) == value


def test_the_command_line_exits_1_with_one_line_per_problem_and_dumps_json(tmp_path):
    bad = tmp_path / 'x.env'
    bad.write_text(GOOD + 'TEMP=/tmp\nHOST=0.0.0.0\n')
    cmd = subprocess.run([sys.executable, CHECKER, '--json', str(bad)], capture_output=True, text=True)
    assert cmd.returncode == 1
    assert len(cmd.stderr.strip().splitlines()) == 2
    assert json.loads(cmd.stdout)['ALIAS'] == 'frank-medium'
    good = tmp_path / 'y.env'
    good.write_text(GOOD)
    assert subprocess.run([sys.executable, CHECKER, str(good)]).returncode == 0
    assert subprocess.run([sys.executable, CHECKER]).returncode == 2
