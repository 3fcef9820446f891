# -*- coding: utf-8 -*-
"""module_utils/base/controller_file: the report file on the controller - written atomically with its mode,
left alone when current, never in check mode, and bad input refused before anything is written."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os
import stat

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils.base.controller_file import (
    ControllerFileError, parse_mode, write_text)
from ansible_collections.dankfleet.llm.tests.unit.ansible_cli import ansible_doc


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_written_then_current_then_rewritten_on_another_byte_or_mode(tmp_path):
    dest = str(tmp_path / 'host.json')
    assert write_text(dest, '{"url": "x"}\n', '0644') == {'changed': True, 'before': None}
    assert open(dest).read() == '{"url": "x"}\n' and mode_of(dest) == 0o644
    assert write_text(dest, '{"url": "x"}\n', '0644') == {'changed': False, 'before': '{"url": "x"}\n'}
    assert write_text(dest, '{"url": "y"}\n', '0644') == {'changed': True, 'before': '{"url": "x"}\n'}
    assert write_text(dest, '{"url": "y"}\n', 0o600)['changed'] is True and mode_of(dest) == 0o600
    assert sorted(os.listdir(str(tmp_path))) == ['host.json']  # no temp file left beside it


def test_check_mode_says_and_writes_nothing(tmp_path):
    dest = str(tmp_path / 'host.json')
    assert write_text(dest, 'a', check=True) == {'changed': True, 'before': None}
    assert not os.path.exists(dest)
    write_text(dest, 'a')
    assert write_text(dest, 'b', check=True)['changed'] is True and open(dest).read() == 'a'


@pytest.mark.parametrize('dest, message', [
    ('relative/host.json', 'is not absolute'),
    ('/nonexistent-dankfleet/dir/host.json', 'does not exist on the controller; create it first'),
])
def test_a_dest_it_cannot_take_is_refused(dest, message):
    with pytest.raises(ControllerFileError, match=message):
        write_text(dest, 'x')


def test_a_dest_that_is_not_a_regular_file_is_left_alone(tmp_path):
    (tmp_path / 'host.json').mkdir()
    with pytest.raises(ControllerFileError, match='is not a regular file; move it away, nothing was written'):
        write_text(str(tmp_path / 'host.json'), 'x')
    assert os.path.isdir(str(tmp_path / 'host.json'))


@pytest.mark.parametrize('mode, value', [('0644', 0o644), ('640', 0o640), (0o600, 0o600)])
def test_modes(mode, value):
    assert parse_mode(mode) == value


@pytest.mark.parametrize('mode', ['rw-r--r--', '99999', True, -1])
def test_a_mode_that_is_not_octal_is_refused(mode):
    with pytest.raises(ControllerFileError, match='is not an octal permission'):
        parse_mode(mode)


def test_the_action_is_documented():
    text = ansible_doc('dankfleet.llm.controller_file')
    assert 'corresponding action plugin' in text and 'dest' in text and 'content' in text
