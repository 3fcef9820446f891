# -*- coding: utf-8 -*-
"""gate_health_timeout: the gate's /health formula for a payload a play is about to deploy."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.dankfleet.llm.plugins.filter.gate_health_timeout import FilterModule
from ansible_collections.dankfleet.llm.plugins.module_utils.serve.llama_server_gate import health_timeout

F = FilterModule().filters()['gate_health_timeout']
MIB = 1048576


@pytest.mark.parametrize('payload, args', [(0, ()), (200 * MIB + 1, (0, 60, 200)), ('1073741824', ('0', '90', '50')),
                                           (5 * 1024 * MIB, (45,)), (MIB, (0, 0, 0.5))])
def test_the_filter_is_the_modules_formula(payload, args):
    expect = health_timeout(int(payload), *[float(a) if i == 2 else int(a) for i, a in enumerate(args)])
    assert F(payload, *args) == expect


def test_the_figures():
    assert F(200 * MIB + 1) == 62 and F(1024 * MIB, 0, 90, 50) == 90 + 21 and F(10 ** 12, 45) == 45


def test_a_load_rate_of_zero_is_refused_by_name():
    with pytest.raises(AnsibleFilterError, match='gate_health_timeout: load_mib_per_s must be above 0'):
        F(MIB, 0, 60, 0)
    with pytest.raises(AnsibleFilterError, match="payload_bytes='lots'"):
        F('lots')
