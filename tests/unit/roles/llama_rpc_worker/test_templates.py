# -*- coding: utf-8 -*-
"""The worker role's files as the role renders them: the allowlist admits only the heads (nft -c when nft is
installed, a structural reading always) and the unit binds the private address, hardened."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os
import re
import shutil
import subprocess
import tempfile

import pytest

from ansible_collections.dankfleet.llm.tests.unit.roles.serve_roles_helpers import render

CACHE = os.environ.get('DANKFLEET_CACHE', os.path.expanduser('~/.cache/dankfleet'))
RELEASE = os.path.join(CACHE, 'llama-b11434-cpu-rpc')
BASE = {'llama_rpc_worker_address': '10.89.7.11', 'llama_rpc_worker_allow_from': ['10.89.7.10', 'fd00::10'],
        'llama_rpc_worker_devices': [{'device': 'CPU', 'port': 50052}, {'device': 'CPU', 'port': 50053}]}


def nft_text(**over):
    v = dict(BASE)
    v.update(over)
    return render('llama_rpc_worker', 'dankfleet-llama-rpc.nft.j2', v)


def unit_text(item, **over):
    v = dict(BASE, item=item)
    v.update(over)
    return render('llama_rpc_worker', 'llama-rpc-worker.service.j2', v)


def rules(text):
    """The input chain's rules, as (ports, family, sources, verdict)."""
    out = []
    for line in text.splitlines():
        m = re.match(r'^\s*tcp dport \{ ([\d, ]+) \}(?: (ip6?) saddr \{ ([^}]+) \})?(?: counter)? (accept|drop)$', line)
        if m:
            out.append((m.group(1), m.group(2), [s.strip() for s in (m.group(3) or '').split(',') if s.strip()],
                        m.group(4)))
    return out


def test_the_allowlist_admits_only_the_heads_then_drops():
    text = nft_text()
    assert text.count('{') == text.count('}')
    got = rules(text)
    assert got == [('50052, 50053', 'ip', ['10.89.7.10'], 'accept'), ('50052, 50053', 'ip6', ['fd00::10'], 'accept'),
                   ('50052, 50053', None, [], 'drop')]
    assert 'policy accept' in text and 'delete table inet dankfleet_llama_rpc' in text   # only its own table


def test_an_ipv4_only_allowlist_has_no_ip6_rule():
    assert [r[1] for r in rules(nft_text(llama_rpc_worker_allow_from=['10.89.7.10']))] == ['ip', None]


@pytest.mark.skipif(not shutil.which('nft'), reason='nft not installed: the structural reading above stands in')
def test_nft_accepts_the_allowlist():
    with tempfile.NamedTemporaryFile('w', suffix='.nft') as fh:
        fh.write(nft_text())
        fh.flush()
        out = subprocess.run(['nft', '-c', '-f', fh.name], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr


def test_the_unit_binds_the_private_address_and_is_hardened():
    text = unit_text({'device': 'CPU', 'port': 50053}, llama_rpc_worker_threads=2)
    assert re.search(r'^ExecStart=/opt/llama.cpp/current/bin/ggml-rpc-server -H 10.89.7.11 -p 50053 -d CPU -t 2$', text, re.M)
    for line in ('DynamicUser=yes', 'NoNewPrivileges=yes', 'ProtectSystem=strict', 'CapabilityBoundingSet=',
                 'IPAddressDeny=any', 'IPAddressAllow=10.89.7.11 10.89.7.10 fd00::10', 'PrivateDevices=yes'):
        assert re.search('^' + re.escape(line) + '$', text, re.M), line
    gpu = unit_text({'device': 'ROCm0', 'port': 50052}, llama_rpc_worker_backend='hip')
    assert 'DevicePolicy=closed' in gpu and 'DeviceAllow=/dev/kfd rw' in gpu and 'PrivateDevices' not in gpu


@pytest.mark.skipif(not (shutil.which('systemd-analyze') and os.path.exists(os.path.join(RELEASE, 'bin', 'ggml-rpc-server'))),
                    reason='needs systemd-analyze and the lab build (make llama-server)')
def test_systemd_accepts_the_unit():
    d = tempfile.mkdtemp()
    try:
        path = os.path.join(d, 'llama-rpc-worker-50052.service')
        with open(path, 'w') as fh:
            fh.write(unit_text({'device': 'CPU', 'port': 50052}, llama_rpc_worker_release_dir=RELEASE))
        out = subprocess.run(['systemd-analyze', 'verify', path], capture_output=True, text=True, check=False)
        assert out.returncode == 0, out.stderr
    finally:
        shutil.rmtree(d)
