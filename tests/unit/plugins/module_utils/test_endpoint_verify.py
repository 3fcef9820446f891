# -*- coding: utf-8 -*-
"""endpoint_verify's pure parts: the PNG it draws, what it reads of an env file, its options, the client
contract's diff and the textfile. The checks themselves run against a real llama-server in
tests/integration/test_endpoint_verify.py."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import struct
import zlib

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.dankfleet.llm.plugins.module_utils.serve import endpoint_verify as ev

ENV = {'ALIAS': 'frank-medium', 'MODEL_PATH': '/m.gguf', 'BIND_ADDR': '127.0.0.1', 'LISTEN_PORT': '7770',
       'PARALLEL': '2', 'CTX_SIZE': '8192', 'SPEC_TYPE': 'draft-mtp,ngram-mod', 'VISION': 'off'}


def decode_png(data):
    """IHDR + the raw scanlines of an 8-bit RGB PNG, every chunk's CRC checked (what a decoder does first)."""
    assert data[:8] == b'\x89PNG\r\n\x1a\n'
    pos, chunks = 8, []
    while pos < len(data):
        (length,) = struct.unpack('>I', data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack('>I', data[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xffffffff, kind
        chunks.append((kind, body))
        pos += 12 + length
    assert [k for k, _ in chunks] == [b'IHDR', b'IDAT', b'IEND']
    width, height, depth, colour, _, _, interlace = struct.unpack('>IIBBBBB', chunks[0][1])
    assert (depth, colour, interlace) == (8, 2, 0)
    raw = zlib.decompress(chunks[1][1])
    assert len(raw) == height * (1 + 3 * width)
    rows = [raw[y * (1 + 3 * width):(y + 1) * (1 + 3 * width)] for y in range(height)]
    assert all(r[0] == 0 for r in rows)
    return width, height, [[tuple(r[1 + 3 * x:4 + 3 * x]) for x in range(width)] for r in rows]


@settings(max_examples=25, deadline=None)
@given(st.integers(16, 96), st.integers(8, 64))
def test_the_image_is_a_valid_png_with_its_shapes(width, height):
    w, h, pixels = decode_png(ev.test_image(width, height))
    assert (w, h) == (width, height)
    colours = set(p for row in pixels for p in row)
    # white field, red bars, blue disc, green triangle: a few shapes, not a flat image
    assert {(255, 255, 255), (200, 30, 30), (30, 60, 200), (30, 160, 60)} <= colours


def test_the_image_is_the_same_every_time():
    assert ev.test_image() == ev.test_image()
    assert ev.data_uri(ev.test_image()).startswith('data:image/png;base64,iVBORw0KGgo')


def test_too_small_an_image_is_refused():
    with pytest.raises(ev.VerifyError, match='16x8'):
        ev.test_image(8, 8)


def test_features_read_the_shape():
    f = ev.features(ENV)
    assert f['base'] == 'http://127.0.0.1:7770'
    assert (f['slots'], f['slot_ctx'], f['vision']) == (2, 4096, False)
    assert f['spec_types'] == ['draft-mtp', 'ngram-mod'] and f['ngram'] == ['ngram-mod']
    assert f['jinja'] is True
    assert ev.features(dict(ENV, EXTRA_ARGS='--no-jinja'))['jinja'] is False


def test_an_env_file_without_an_alias_is_named():
    with pytest.raises(ev.VerifyError, match='ALIAS'):
        ev.features(dict(ENV, ALIAS=''))


def test_each_unconfigured_feature_is_skipped_with_its_reason():
    o = dict(ev.DEFAULTS)
    f = ev.features(ENV)
    assert 'VISION=off' in ev.skip_reason('vision', f, o)
    assert ev.skip_reason('vision', ev.features(dict(ENV, VISION='on')), o) == ''
    nj = ev.features(dict(ENV, EXTRA_ARGS='--no-jinja'))
    assert '--no-jinja' in ev.skip_reason('tools', nj, o) and '--no-jinja' in ev.skip_reason('reasoning_effort', nj, o)
    assert 'empty' in ev.skip_reason('reasoning_effort', f, dict(o, reasoning_efforts=[]))
    assert 'not in the checks' in ev.skip_reason('window', f, dict(o, checks=['stream']))
    for name in ('stream', 'tools', 'reasoning_effort', 'slots', 'prefix_cache', 'window'):
        assert ev.skip_reason(name, f, o) == ''


def test_would_send_lists_every_request_and_every_skip():
    lines = ev.would_send(ev.features(ENV), {})
    assert [line.split(':')[0] for line in lines] == list(ev.CHECKS)
    text = '\n'.join(lines)
    assert 'vision: skipped - VISION=off' in text
    assert 'id_slot 0..1' in text and 'draft_n > 0 (SPEC_TYPE=draft-mtp,ngram-mod)' in text
    assert 'reasoning_effort low, medium, high, xhigh' in text


@pytest.mark.parametrize('bad, needle', [
    (dict(window_fraction=0.0), 'window_fraction'), (dict(window_fraction=1.5), 'window_fraction'),
    (dict(window_fraction=float('nan')), 'window_fraction'), (dict(checks=['vison']), 'vison'),
    (dict(reasoning_efforts=['low', 'low']), 'reasoning_efforts'), (dict(reasoning_efforts=['']), 'reasoning_efforts'),
    (dict(slot_max_tokens=0), 'slot_max_tokens'), (dict(prefix_cache_max_reprefill=-1), 'prefix_cache_max_reprefill'),
    (dict(slot_prompt='  '), 'slot_prompt'),
])
def test_bad_options_are_named(bad, needle):
    problems = ev.validate_options(dict(ev.DEFAULTS, **bad))
    assert problems and needle in ' '.join(problems)


def test_the_defaults_are_valid():
    assert ev.validate_options(dict(ev.DEFAULTS)) == []


STATUS = st.sampled_from([200, 400, 500])
EFFORTS = st.dictionaries(st.sampled_from(['low', 'medium', 'high', 'xhigh']), STATUS, min_size=1)


@settings(max_examples=60, deadline=None)
@given(EFFORTS, EFFORTS)
def test_a_contract_change_names_each_effort_that_moved(old, new):
    f = ev.features(ENV)
    before, after = ev.contract(f, old), ev.contract(f, new)
    changes = ev.contract_changes(before, after)
    moved = [e for e in old if e in new and old[e] != new[e]]
    assert len(changes) == len(moved)
    for e in moved:
        assert any(('reasoning_effort %s answered HTTP %s, now %s' % (e, old[e], new[e])) == c for c in changes)
    assert ev.contract_changes(before, before) == []
    assert ev.contract_changes({}, after) == [] and ev.contract_changes(None, after) == []


def test_a_contract_change_of_the_window_or_modalities_is_named():
    f = ev.features(ENV)
    before = ev.contract(f, {'low': 200})
    after = ev.contract(ev.features(dict(ENV, CTX_SIZE='16384')), {'low': 200}, {'vision': True})
    changes = ev.contract_changes(before, after)
    assert any(c.startswith('context_per_slot 4096 -> 8192') for c in changes)
    assert any(c.startswith('modalities') for c in changes)


def test_the_textfile_has_one_series_per_check_run_and_the_skips():
    checks = [{'name': 'stream', 'status': 'pass'}, {'name': 'tools', 'status': 'fail'},
              {'name': 'prefix_cache', 'status': 'warn'}, {'name': 'vision', 'status': 'skip'}]
    text = ev.render_textfile(checks, 'frank-medium.service', now=1.0)
    assert 'llm_verify_check{check="stream",service="frank-medium.service"} 1' in text
    assert 'llm_verify_check{check="tools",service="frank-medium.service"} 0' in text
    assert 'llm_verify_check{check="prefix_cache",service="frank-medium.service"} 0' in text
    assert 'llm_verify_check{check="vision"' not in text
    assert 'llm_verify_skipped{check="vision",service="frank-medium.service"} 1' in text
    assert text.endswith('\n') and 'llm_verify_timestamp_seconds{service="frank-medium.service"} 1.000' in text


def test_filler_is_deterministic_and_sized():
    assert ev.filler(50) == ev.filler(50)
    assert len(ev.filler(500).split()) == 500


EVENT = st.sampled_from(['chunk', 'bad-json', 'no-choices', 'comment'])


@settings(max_examples=80, deadline=None)
@given(st.lists(EVENT, max_size=8), st.booleans(), st.lists(EVENT, max_size=3))
def test_sse_parsing_counts_chunks_done_and_anything_malformed(events, done, after):
    text = {'chunk': 'data: {"choices":[{"delta":{"content":"x"}}]}', 'bad-json': 'data: {not json',
            'no-choices': 'data: {"error":{"message":"boom"}}', 'comment': ': keep-alive'}
    lines = [text[e] for e in events] + (['data: [DONE]'] + [text[e] for e in after] if done else [])
    chunks, seen_done, bad = ev.parse_sse('\n\n'.join(lines))
    assert chunks == events.count('chunk')
    assert seen_done == done
    assert bad == events.count('bad-json') + events.count('no-choices') + (
        sum(1 for e in after if e != 'comment') if done else 0)


@pytest.mark.parametrize('msg, needle', [
    ({'content': 'sunny'}, None),
    ({'content': None, 'tool_calls': [{'function': {'name': 'get_weather', 'arguments': '{"city": "Oslo"}'}}]}, None),
    ({'content': None}, 'neither tool_calls nor a content string'),
    ({'tool_calls': {'function': {}}}, 'not a list'),
    ({'tool_calls': [{'function': {'name': 'rm_rf', 'arguments': '{}'}}]}, "names 'rm_rf'"),
    ({'tool_calls': [{'function': {'name': 'get_weather', 'arguments': '{"city": '}}]}, 'not a JSON object'),
    ({'tool_calls': [{'function': {'name': 'get_weather', 'arguments': '[1]'}}]}, 'not a JSON object'),
    ({'tool_calls': ['get_weather']}, 'names None'),
])
def test_a_tool_answer_is_well_formed_or_named(msg, needle):
    problems = ev.tool_message_problems(msg)
    if needle is None:
        assert problems == []
    else:
        assert problems and needle in ' '.join(problems)


# --- issue 35: the drafter's journal lines, the prompt no n-gram matches, the defaults, the first difference

def test_b11434_logs_the_init_line_at_info_only_for_block_drafters():
    from ansible_collections.dankfleet.llm.plugins.module_utils.base import llama_cpp_rules as rules
    assert [t for t in rules.SPEC_TYPES if rules.spec_init_logged(t, 3)] == ['draft-dflash', 'draft-dspark']
    assert all(rules.spec_init_logged(t, 4) for t in rules.SPEC_TYPES)
    journal = ("0.01 I common_speculative_impl_draft_dflash: adding speculative implementation 'draft-dflash'\n"
               "spec common_specu: adding speculative implementation 'draft-mtp'\n")
    assert ev.spec_init_lines(journal, ['draft-dflash', 'ngram-mod'], 3) == (['draft-dflash'], [], ['ngram-mod'])
    assert ev.spec_init_lines(journal, ['draft-mtp', 'ngram-mod'], 4) == (['draft-mtp'], ['ngram-mod'], [])
    # a line that names the type inside another word is not its line
    assert ev.spec_init_lines("adding speculative implementation 'draft-dflash2'", ['draft-dflash'], 3)[1] == ['draft-dflash']


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2 ** 31 - 1), st.integers(3, 552))
def test_novel_prose_never_repeats_a_word_pair(seed, words):
    text = ev.novel_prose(words, seed).split()
    pairs = list(zip(text, text[1:]))
    assert len(pairs) == len(set(pairs)) and all(a != b for a, b in pairs)
    assert len(text) >= min(words, 200) and ev.novel_prose(words, seed) == ' '.join(text)
    assert ev.repeated_ngram(text, 2) == -1


def test_repeated_ngram_finds_the_first_repeat():
    assert ev.repeated_ngram([1, 2, 3, 1, 2, 4], 2) == 3 and ev.repeated_ngram([1, 2, 3, 1, 2, 4], 3) == -1
    assert ev.repeated_ngram([], 24) == -1


@pytest.mark.parametrize('a, b, at', [('abc', 'abc', -1), ('abc', 'abd', 2), ('abc', 'ab', 2), ('', 'x', 0)])
def test_first_difference(a, b, at):
    assert ev.first_difference(a, b) == at


def test_a_float32_served_default_equals_its_configured_value():
    assert ev.same_default(float, 0.7, 0.699999988079071) and ev.same_default(float, 0.0, 0.0)
    assert not ev.same_default(float, 0.7, 0.75) and ev.same_default(int, 20, 20) and not ev.same_default(int, 20, 40)


def test_features_read_the_drafter_and_sampler_settings():
    f = ev.features(dict(ENV, TEMPERATURE='0.7', TOP_K='20', TOP_P='', SPEC_NGRAM_MOD_N_MATCH='48'))
    assert f['sampler'] == {'TEMPERATURE': 0.7, 'TOP_K': 20} and f['ngram_n_match'] == 48
    assert f['model_drafters'] == ['draft-mtp'] and f['log_verbosity'] == 3
    with pytest.raises(ev.VerifyError, match="TEMPERATURE='nan'"):
        ev.features(dict(ENV, TEMPERATURE='nan'))


def test_would_send_names_the_new_checks():
    text = '\n'.join(ev.would_send(ev.features(dict(ENV, TEMPERATURE='0.7', LOG_VERBOSITY='4')), {}))
    assert "drafter: journalctl _SYSTEMD_INVOCATION_ID" in text and 'draft-mtp, ngram-mod' in text
    assert 'repeat no 24-gram' in text and 'defaults: GET http://127.0.0.1:7770/props' in text and 'temperature=0.7' in text
    assert 'isolation: on each of slot 0..1' in text and 'cache_prompt false' in text
