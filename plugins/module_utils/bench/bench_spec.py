# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Speculative-decoding A/B: identical prompts at temperature 0, three shapes, greedy text compared.

The runbook's bench-spec-ab.py, as a library: the endpoint is whatever configuration is live,
``run_configuration`` measures it, and ``compare_greedy`` checks across configurations that
speculation bought speed and nothing else - the same token ids for every configuration on
every shape. Measuring a proposer only on the text it cannot match calls it useless, so three
shapes run (runbook "Chaining the draftless n-gram matcher"):

- ``prose``: a filler essay to continue - where a trained drafter earns its keep,
- ``echo``: a document to reproduce verbatim - what an n-gram matcher can match; the share of
  the output copied from the prompt is measured (``copy_ratio``),
- ``structured``: JSON records with unique ids - a negative control for self-repetition.

The prompts are generated from a fixed seed, so two runs (and two configurations) send the
same bytes. Stdlib only: this runs on the target.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import hashlib
import random
import time

from ansible_collections.dankfleet.llm.plugins.module_utils.base.endpoint_client import (
    BenchError, METRIC_ACCEPTED, METRIC_DRAFT_TOKENS, METRIC_DRAFTS, metric_delta)
from ansible_collections.dankfleet.llm.plugins.module_utils.bench.bench_vram import read_vram, vram_summary

SHAPES = ('prose', 'echo', 'structured')

WORDS = (
    'the river carried silt past quiet towns where farmers read the weather in the clouds and '
    'merchants counted barrels of grain against the coming winter while children ran along the '
    'levee shouting at barges that moved slower than walking men a ferry crossed at noon each day '
    'and its bell marked the hour better than any clock in the county the old mill had burned '
    'twice and twice been rebuilt by the same family who kept its ledgers in a tin box under the '
    'floor those ledgers told of floods and droughts of prices rising and falling of debts paid '
    'late and favors never forgotten a school stood on the hill with a single room and a stove '
    'that smoked whenever the wind came from the north teachers arrived each autumn and left each '
    'spring some wrote letters home describing the mud and the kindness of strangers'
).split()
CITIES = ('Albany', 'Boise', 'Cairo', 'Dover', 'Eugene', 'Flint', 'Gary', 'Helena', 'Irvine', 'Joliet')


def prose_text(words, seed):
    """``words`` words of deterministic filler prose in sentences of 8-20 words."""
    rng = random.Random('prose-%s' % seed)
    out = []
    sentence = []
    length = rng.randint(8, 20)
    for _ in range(int(words)):
        word = rng.choice(WORDS)
        sentence.append(word.capitalize() if not sentence else word)
        if len(sentence) >= length:
            out.append(' '.join(sentence) + '.')
            sentence = []
            length = rng.randint(8, 20)
    if sentence:
        out.append(' '.join(sentence) + '.')
    paragraphs = []
    for i in range(0, len(out), 6):
        paragraphs.append(' '.join(out[i:i + 6]))
    return '\n\n'.join(paragraphs)


def structured_records(count, seed):
    """``count`` JSON Lines records, every id unique, so no line repeats another."""
    rng = random.Random('structured-%s' % seed)
    lines = []
    for i in range(int(count)):
        lines.append('{"id": "rec-%04d-%06x", "sku": "%s-%d", "qty": %d, "price": "%d.%02d", "city": "%s"}' % (
            i + 1, rng.getrandbits(24), rng.choice(WORDS), rng.randint(100, 999), rng.randint(1, 500),
            rng.randint(1, 999), rng.randint(0, 99), rng.choice(CITIES)))
    return '\n'.join(lines)


def build_prompts(sizes, seed=20260916, shapes=SHAPES):
    """{shape: {prompt, n_predict}} from ``sizes`` (prose_words, prose_n_predict, echo_words,
    echo_n_predict, structured_records, structured_n_predict)."""
    prompts = {}
    for shape in shapes:
        if shape == 'prose':
            prompt = ('Continue the following essay in the same style.\n\n%s\n\n'
                      % prose_text(sizes['prose_words'], seed))
        elif shape == 'echo':
            document = prose_text(sizes['echo_words'], '%s-echo' % seed)
            # Ends on the opening marker of the copy, so the continuation IS the copy.
            prompt = ('Repeat the document between the markers exactly, word for word.\n\n<<<\n%s\n>>>\n\n'
                      'Copy:\n<<<\n' % document)
        elif shape == 'structured':
            prompt = ('Continue this JSON Lines log with new records in exactly the same schema.\n\n%s\n'
                      % structured_records(sizes['structured_records'], seed))
        else:
            raise BenchError('unknown shape %r; the shapes are %s' % (shape, ', '.join(SHAPES)))
        prompts[shape] = {'prompt': prompt, 'n_predict': int(sizes['%s_n_predict' % shape])}
    return prompts


def copy_ratio(prompt_tokens, output_tokens, span=8):
    """Share of the output's tokens that sit inside a run of >= ``span`` tokens also found in the prompt."""
    if not output_tokens:
        return None
    span = max(1, int(span))
    if len(output_tokens) < span:
        return 0.0
    grams = set(tuple(prompt_tokens[i:i + span]) for i in range(len(prompt_tokens) - span + 1))
    covered = [False] * len(output_tokens)
    for j in range(len(output_tokens) - span + 1):
        if tuple(output_tokens[j:j + span]) in grams:
            for k in range(j, j + span):
                covered[k] = True
    return round(sum(covered) / float(len(output_tokens)), 4)


def text_digest(tokens, text):
    """Short sha256 of the greedy output (token ids when known, else the text) - a cheap equality key."""
    if tokens:
        material = ','.join(str(t) for t in tokens)
    else:
        material = text or ''
    return hashlib.sha256(material.encode('utf-8')).hexdigest()[:16]


def _completion(endpoint, prompt, n_predict, request_overrides, timeout):
    payload = {
        'prompt': prompt, 'n_predict': n_predict, 'temperature': 0,
        'ignore_eos': True, 'cache_prompt': False, 'return_tokens': True, 'stream': False,
    }
    payload.update(request_overrides or {})
    return endpoint.post_json('/completion', payload, timeout=timeout)


def _ratio(num, den):
    if num is None or not den:
        return None
    return round(num / float(den), 4)


def run_configuration(endpoint, prompts, repeats=1, copy_span=8, request_overrides=None, timeout=None):
    """Measure the live configuration on every shape; returns {build, shapes: {shape: record}, vram}.

    A record: decode_tps (median over ``repeats``), prompt_tps, predicted_n, prompt_n, draft_tokens,
    accepted, acceptance (from the responses' ``timings``), metric_drafts, metric_draft_tokens,
    metric_accepted (``/metrics`` deltas, None without ``--metrics``), copy_ratio, tokens, text,
    digest, and ``repeats_identical`` (the greedy text did not move between repeats).
    """
    endpoint.post_json('/completion', {'prompt': 'warm up', 'n_predict': 1, 'temperature': 0,
                                       'cache_prompt': False}, timeout=timeout)
    result = {'build': endpoint.build(), 'shapes': {}}
    for shape in prompts:
        spec = prompts[shape]
        tokenized = endpoint.post_json('/tokenize', {'content': spec['prompt']}, timeout=timeout)
        prompt_tokens = tokenized.get('tokens') or []
        runs = []
        before = endpoint.metrics()
        for _ in range(max(1, int(repeats))):
            started = time.time()
            answer = _completion(endpoint, spec['prompt'], spec['n_predict'], request_overrides, timeout)
            answer['_wall_s'] = time.time() - started
            runs.append(answer)
        after = endpoint.metrics()
        result['shapes'][shape] = summarize_runs(runs, prompt_tokens, before, after, copy_span)
    cards, source = read_vram()
    result['vram_mib'] = vram_summary(cards)
    result['vram_source'] = source
    return result


def _median(values):
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2.0


def summarize_runs(runs, prompt_tokens, metrics_before, metrics_after, copy_span=8):
    """One shape's record from the ``/completion`` answers of its repeats (see run_configuration)."""
    first = runs[0]
    timings = [r.get('timings') or {} for r in runs]
    tokens = first.get('tokens') or []
    text = first.get('content', '')
    draft_tokens = sum(t.get('draft_n', 0) or 0 for t in timings)
    accepted = sum(t.get('draft_n_accepted', 0) or 0 for t in timings)
    has_draft_fields = any('draft_n' in t for t in timings)
    metric_drafts = metric_delta(metrics_before, metrics_after, METRIC_DRAFTS)
    metric_draft_tokens = metric_delta(metrics_before, metrics_after, METRIC_DRAFT_TOKENS)
    metric_accepted = metric_delta(metrics_before, metrics_after, METRIC_ACCEPTED)
    digests = [text_digest(r.get('tokens') or [], r.get('content', '')) for r in runs]
    return {
        'decode_tps': _round(_median([t.get('predicted_per_second') for t in timings]), 2),
        'prompt_tps': _round(_median([t.get('prompt_per_second') for t in timings]), 2),
        'predicted_n': timings[0].get('predicted_n'),
        'prompt_n': timings[0].get('prompt_n'),
        'draft_tokens': draft_tokens if has_draft_fields else None,
        'accepted': accepted if has_draft_fields else None,
        'acceptance': _ratio(accepted, draft_tokens) if has_draft_fields else None,
        'metric_drafts': _int(metric_drafts),
        'metric_draft_tokens': _int(metric_draft_tokens),
        'metric_accepted': _int(metric_accepted),
        'copy_ratio': copy_ratio(prompt_tokens, tokens, copy_span) if prompt_tokens and tokens else None,
        'repeats': len(runs),
        'repeats_identical': len(set(digests)) == 1,
        'tokens': tokens,
        'text': text,
        'digest': digests[0],
    }


def _round(value, ndigits):
    return None if value is None else round(value, ndigits)


def _int(value):
    return None if value is None else int(round(value))


# --- greedy text across configurations ---------------------------------------------------

def first_difference(a, b):
    """Index of the first element where sequences ``a`` and ``b`` differ; None when equal.

    A sequence that is a strict prefix of the other differs at its own length.
    """
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    if len(a) != len(b):
        return min(len(a), len(b))
    return None


def _snippet(text, pos, width=24):
    if text is None:
        return ''
    return repr(text[max(0, pos - 8):pos + width])


def compare_greedy(configurations):
    """Mismatches of the greedy output across configurations, per shape.

    ``configurations``: [{name, shapes: {shape: {tokens, text, repeats_identical}}}], the first
    successful one is the reference. Failed configurations (``error`` set, or no ``shapes``) are
    skipped - their failure is reported on its own. Returns a list of dicts
    {shape, reference, configuration, token, char, reference_text, text, message}; empty when every
    configuration produced the same token ids (the text when token ids are not available).
    """
    mismatches = []
    measured = [c for c in configurations if c.get('shapes') and not c.get('error')]
    for conf in measured:
        for shape, rec in sorted(conf['shapes'].items()):
            if rec.get('repeats_identical') is False:
                mismatches.append({
                    'shape': shape, 'reference': conf['name'], 'configuration': conf['name'], 'token': None,
                    'char': None, 'reference_text': '', 'text': '',
                    'message': "configuration '%s' produced different greedy text on its own repeats of shape '%s': "
                               'the endpoint is not deterministic at temperature 0' % (conf['name'], shape)})
    if len(measured) < 2:
        return mismatches
    reference = measured[0]
    for conf in measured[1:]:
        for shape in sorted(reference['shapes']):
            if shape not in conf['shapes']:
                continue
            ref, rec = reference['shapes'][shape], conf['shapes'][shape]
            ref_tokens, tokens = ref.get('tokens') or [], rec.get('tokens') or []
            ref_text, text = ref.get('text') or '', rec.get('text') or ''
            if ref_tokens and tokens:
                token = first_difference(ref_tokens, tokens)
                if token is None:
                    continue
            elif ref_text == text:
                continue
            else:
                token = None
            char = first_difference(ref_text, text)
            char = 0 if char is None else char
            where = ('token %d, character %d' % (token, char)) if token is not None else 'character %d' % char
            mismatches.append({
                'shape': shape, 'reference': reference['name'], 'configuration': conf['name'],
                'token': token, 'char': char,
                'reference_text': ref_text[max(0, char - 8):char + 24], 'text': text[max(0, char - 8):char + 24],
                'message': "greedy text differs between configurations '%s' and '%s' on shape '%s' at %s: "
                           '%s vs %s - speculation may never change an answer'
                           % (reference['name'], conf['name'], shape, where,
                              _snippet(ref_text, char), _snippet(text, char))})
    return mismatches


# --- result rows -------------------------------------------------------------------------

SPEC_COLUMNS = ('configuration', 'shape', 'status', 'decode_tps', 'prompt_tps', 'prompt_n', 'predicted_n',
                'draft_tokens', 'accepted', 'acceptance', 'metric_drafts', 'metric_draft_tokens',
                'metric_accepted', 'copy_ratio', 'vram_mib', 'digest', 'error')


def spec_rows(configurations):
    """Flat rows (one per configuration x shape, one per failed configuration) for TSV and plots."""
    rows = []
    for conf in configurations:
        if conf.get('error') or not conf.get('shapes'):
            rows.append(dict((c, None) for c in SPEC_COLUMNS))
            rows[-1].update({'configuration': conf['name'], 'status': 'failed',
                             'error': conf.get('error') or 'no measurement'})
            continue
        vram = conf.get('vram_mib')
        vram_text = ';'.join('%s=%s' % (k, vram[k]) for k in sorted(vram)) if vram else None
        for shape in sorted(conf['shapes'], key=lambda s: SHAPES.index(s) if s in SHAPES else 99):
            rec = conf['shapes'][shape]
            row = dict((c, rec.get(c)) for c in SPEC_COLUMNS)
            row.update({'configuration': conf['name'], 'shape': shape, 'status': 'ok', 'vram_mib': vram_text,
                        'error': None})
            rows.append(row)
    return rows
