# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The agent-loop shape: N concurrent families re-sending a growing long document over M turns.

The runbook's bench-turn-latency.py (section "The agent-loop shape"): each family is one agent
loop - its first turn sends a long document, every later turn re-sends the whole conversation
(document, the model's answers, and a new chunk of "tool output") - and all families run at
once. Per turn it records the wall latency and how much of the prompt the server served from
its cache (``timings.cache_n``) against what it had to prefill (``timings.prompt_n``): with
enough slots and a working prefix cache, turn 2+ prefills only the new chunk; with one slot
the second family's first turn waits for the first family's prefill.

Stdlib only; runs on the target.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import threading
import time

from ansible_collections.dankfleet.llm.plugins.module_utils.base.endpoint_client import BenchError
from ansible_collections.dankfleet.llm.plugins.module_utils.bench.bench_spec import prose_text

TURN_COLUMNS = ('family', 'turn', 'status', 'latency_ms', 'prompt_n', 'cache_n', 'cache_ratio', 'predicted_n',
                'prompt_ms', 'predicted_ms', 'prompt_tokens', 'started_s', 'error')


def family_document(family, words, seed, shared=False):
    return prose_text(words, '%s-doc-%s' % (seed, 'shared' if shared else family))


def turn_messages(document, answers, chunks):
    """The conversation a family sends at turn len(answers)+1: document, then (answer, chunk) pairs."""
    messages = [{'role': 'system', 'content': 'You are an agent reading a long working document.'},
                {'role': 'user', 'content': 'Document:\n\n%s\n\nSummarize what matters for the next step.'
                 % document}]
    for answer, chunk in zip(answers, chunks):
        messages.append({'role': 'assistant', 'content': answer})
        messages.append({'role': 'user', 'content': 'Tool output:\n\n%s\n\nContinue.' % chunk})
    return messages


def turn_row(family, turn, answer, latency_s, started_s, error=None):
    if error is not None:
        row = dict((c, None) for c in TURN_COLUMNS)
        row.update({'family': family, 'turn': turn, 'status': 'failed', 'latency_ms': round(latency_s * 1000.0, 1),
                    'started_s': round(started_s, 3), 'error': error})
        return row
    timings = answer.get('timings') or {}
    usage = answer.get('usage') or {}
    prompt_n = timings.get('prompt_n')
    cache_n = timings.get('cache_n')
    if cache_n is None:
        cache_n = (usage.get('prompt_tokens_details') or {}).get('cached_tokens')
    total = (prompt_n or 0) + (cache_n or 0)
    return {
        'family': family, 'turn': turn, 'status': 'ok',
        'latency_ms': round(latency_s * 1000.0, 1),
        'prompt_n': prompt_n, 'cache_n': cache_n,
        'cache_ratio': round(cache_n / float(total), 4) if total and cache_n is not None else None,
        'predicted_n': timings.get('predicted_n', usage.get('completion_tokens')),
        'prompt_ms': _round(timings.get('prompt_ms')), 'predicted_ms': _round(timings.get('predicted_ms')),
        'prompt_tokens': usage.get('prompt_tokens'),
        'started_s': round(started_s, 3),
        'error': None,
    }


def _round(value):
    return None if value is None else round(value, 1)


def run_family(endpoint, family, config, t0, rows, lock, barrier):
    document = family_document(family, config['document_words'], config['seed'], config.get('shared_document'))
    answers, chunks = [], []
    barrier.wait()
    for turn in range(1, int(config['turns']) + 1):
        messages = turn_messages(document, answers, chunks)
        payload = {'messages': messages, 'max_tokens': int(config['n_predict']), 'temperature': 0,
                   'ignore_eos': bool(config.get('ignore_eos', True)), 'cache_prompt': True, 'stream': False}
        if config.get('model'):
            payload['model'] = config['model']
        started = time.time()
        try:
            answer = endpoint.post_json('/v1/chat/completions', payload, timeout=config.get('timeout'))
            row = turn_row(family, turn, answer, time.time() - started, started - t0)
            content = ((answer.get('choices') or [{}])[0].get('message') or {}).get('content') or ''
        except BenchError as exc:
            row = turn_row(family, turn, None, time.time() - started, started - t0, error=str(exc))
            content = None
        with lock:
            rows.append(row)
        if content is None:
            return  # a failed turn ends the loop, as it would end an agent's
        answers.append(content)
        chunks.append(prose_text(config['growth_words'], '%s-chunk-%s-%s' % (config['seed'], family, turn)))


def run_turns(endpoint, config):
    """All families concurrently; rows sorted by (family, turn). ``config``: families, turns,
    document_words, growth_words, n_predict, seed, shared_document, ignore_eos, model, timeout."""
    families = int(config['families'])
    if families < 1 or int(config['turns']) < 1:
        raise BenchError('families and turns must be at least 1 (got %s x %s)' % (families, config['turns']))
    rows = []
    lock = threading.Lock()
    barrier = threading.Barrier(families)
    t0 = time.time()
    threads = [threading.Thread(target=run_family, args=(endpoint, f, config, t0, rows, lock, barrier))
               for f in range(families)]
    for thread in threads:
        thread.daemon = True
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(rows, key=lambda r: (r['family'], r['turn']))


def summarize_turns(rows):
    """Per turn index: median latency and total cached/prefilled tokens across families."""
    by_turn = {}
    for row in rows:
        if row['status'] != 'ok':
            continue
        by_turn.setdefault(row['turn'], []).append(row)
    summary = []
    for turn in sorted(by_turn):
        group = by_turn[turn]
        lat = sorted(r['latency_ms'] for r in group)
        mid = len(lat) // 2
        median = lat[mid] if len(lat) % 2 else (lat[mid - 1] + lat[mid]) / 2.0
        summary.append({'turn': turn, 'families': len(group), 'median_latency_ms': round(median, 1),
                        'max_latency_ms': lat[-1],
                        'cache_n': sum(r['cache_n'] or 0 for r in group),
                        'prompt_n': sum(r['prompt_n'] or 0 for r in group)})
    return summary
