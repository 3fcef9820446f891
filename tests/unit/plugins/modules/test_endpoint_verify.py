# -*- coding: utf-8 -*-
"""endpoint_verify the module: check mode lists what it would send and sends nothing, bad input is named before
anything is sent, the textfile lands atomically. The checks against a real llama-server are in
tests/integration/test_endpoint_verify.py."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os
import socket
import threading

from ansible_collections.dankfleet.llm.plugins.modules import endpoint_verify as module
from ansible_collections.dankfleet.llm.tests.unit.module_testlib import run_module


ENV = ('ALIAS=frank-medium\nMODEL_PATH=/m.gguf\nBIND_ADDR=127.0.0.1\nLISTEN_PORT={port}\nPARALLEL=2\n'
       'CTX_SIZE=8192\nSPEC_TYPE=draft-mtp,ngram-mod\nVISION=off\nLLAMA_API_KEY=sekrit\n')


class Listener(object):
    """A socket that counts connections: proof that check mode connects to nothing."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(('127.0.0.1', 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = False
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self):
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            self.accepted += 1
            conn.close()

    def close(self):
        self._stop = True
        self.thread.join()
        self.sock.close()


def test_check_mode_lists_every_request_and_sends_nothing(tmp_path, capsys):
    listener = Listener()
    try:
        env = tmp_path / 'x.env'
        env.write_text(ENV.format(port=listener.port))
        out = run_module(capsys, module.main, check_mode=True, env_file=str(env),
                         textfile_dir=str(tmp_path), window_fraction=0.25)
    finally:
        listener.close()
    assert listener.accepted == 0
    assert out['passed'] is None and not out.get('failed') and not out['changed']
    assert [line.split(':')[0] for line in out['would_send']] == ['stream', 'tools', 'reasoning_effort', 'vision',
                                                                  'slots', 'prefix_cache', 'window', 'drafter',
                                                                  'defaults', 'isolation', 'settings']
    # the drafter and isolation checks are listed, not run: no journal read, no request (the listener saw none)
    assert any(line.startswith('drafter: ') and 'repeat no 24-gram' in line for line in out['would_send'])
    assert any(line.startswith('isolation: on each of slot 0..1') for line in out['would_send'])
    assert any(line.startswith('vision: skipped - VISION=off') for line in out['would_send'])
    assert 'a prompt of 0.25 of one slot (4096 tokens)' in out['message']
    assert os.listdir(str(tmp_path)) == ['x.env']                      # no textfile
    assert 'sekrit' not in repr(out)


def test_check_mode_before_the_env_file_exists_says_so(tmp_path, capsys):
    out = run_module(capsys, module.main, check_mode=True, env_file=str(tmp_path / 'absent.env'))
    assert not out.get('failed') and 'does not exist yet' in out['message']


def test_bad_options_are_refused_before_anything_is_sent(tmp_path, capsys):
    env = tmp_path / 'x.env'
    env.write_text(ENV.format(port=1))
    out = run_module(capsys, module.main, env_file=str(env), window_fraction=2.0, reasoning_efforts=['low', 'low'])
    assert out['failed'] and 'window_fraction=2.0' in out['msg'] and 'reasoning_efforts' in out['msg']
    assert out['msg'].endswith('Nothing was sent.')


def test_an_env_file_without_an_alias_is_named(tmp_path, capsys):
    env = tmp_path / 'x.env'
    env.write_text('MODEL_PATH=/m\nLISTEN_PORT=1\nBIND_ADDR=127.0.0.1\n')
    out = run_module(capsys, module.main, env_file=str(env))
    assert out['failed'] and 'ALIAS' in out['msg'] and 'Nothing was sent' in out['msg']


def test_a_missing_textfile_dir_is_refused_unless_optional(tmp_path, capsys):
    env = tmp_path / 'x.env'
    env.write_text(ENV.format(port=1))
    out = run_module(capsys, module.main, env_file=str(env), textfile_dir=str(tmp_path / 'nope'))
    assert out['failed'] and 'textfile_dir' in out['msg'] and 'Nothing was sent' in out['msg']


def test_a_run_against_nothing_fails_the_checks_and_writes_the_textfile(tmp_path, capsys):
    listener = Listener()           # accepts and closes: every request gets no answer
    try:
        env = tmp_path / 'x.env'
        env.write_text(ENV.format(port=listener.port))
        out = run_module(capsys, module.main, env_file=str(env), textfile_dir=str(tmp_path), request_timeout=5,
                         checks=['stream', 'tools'], service='frank-medium.service')
    finally:
        listener.close()
    assert out['passed'] is False and len(out['findings']) == 2 and not out.get('failed')
    text = (tmp_path / 'llm_verify.prom').read_text()
    assert 'llm_verify_check{check="stream",service="frank-medium.service"} 0' in text
    assert 'llm_verify_skipped{check="window",service="frank-medium.service"} 1' in text
    assert out['textfile'] == str(tmp_path / 'llm_verify.prom') and out['changed']


def test_the_deep_window_is_listed_in_check_mode_and_a_bad_depth_is_refused(tmp_path, capsys):
    env = tmp_path / 'x.env'
    env.write_text(ENV.format(port=1))
    out = run_module(capsys, module.main, check_mode=True, env_file=str(env), window_deep=True, window_deep_tokens=140069)
    assert any(line.startswith('window: ') and 'a prompt of 140069 tokens (deep)' in line for line in out['would_send'])
    out = run_module(capsys, module.main, env_file=str(env), window_deep=True, window_deep_tokens=-5)
    assert out['failed'] and 'window_deep_tokens=-5' in out['msg'] and out['msg'].endswith('Nothing was sent.')
