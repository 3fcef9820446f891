# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark results as files a person can look at: TSV, JSON and a PNG per run.

Runs on the controller (matplotlib is a controller dependency, imported only when a plot is
drawn). ``write_report`` takes one harness's raw results, derives the rows, writes
``<name>.tsv`` / ``<name>.json`` / ``<name>.png`` and returns what it found - for the spec
A/B that includes the greedy-text mismatches and the configurations that failed.

- spec: decode tok/s per configuration per shape, grouped bars, acceptance on each bar,
- batch: the batch x ubatch sweep as heatmaps (prefill, decode, peak memory), one row per depth,
- turns: latency per turn per family, and the cached vs prefilled prompt tokens of each turn.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import os
import re

from ansible_collections.dankfleet.llm.plugins.module_utils.base.endpoint_client import BenchError
from ansible_collections.dankfleet.llm.plugins.module_utils.bench.bench_spec import SHAPES, SPEC_COLUMNS, compare_greedy, spec_rows
from ansible_collections.dankfleet.llm.plugins.module_utils.bench.bench_batch import BATCH_COLUMNS
from ansible_collections.dankfleet.llm.plugins.module_utils.bench.bench_turns import TURN_COLUMNS, summarize_turns
from ansible_collections.dankfleet.llm.plugins.module_utils.base.regular_file import write_file_atomic

KINDS = ('spec', 'batch', 'turns')
# A configuration's or meta's key that names a secret (llama_server_api_key, hf_token, ...).
SECRET_KEY = re.compile(r'(api_?key|password|passwd|secret|(^|_)token)$', re.IGNORECASE)


def redact(value):
    """Values under a key that names a secret are replaced, recursively (configurations and meta only)."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if SECRET_KEY.search(str(key)) and not isinstance(item, (dict, list)):
                out[key] = '<redacted>' if item else item
            else:
                out[key] = redact(item)
        return out
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def redact_configuration(conf):
    """A spec configuration with its ``vars`` and ``request`` redacted; measurements untouched."""
    conf = dict(conf)
    for key in ('vars', 'request'):
        if key in conf:
            conf[key] = redact(conf[key])
    return conf


def tsv_cell(value):
    if value is None:
        return ''
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, dict):
        return ';'.join('%s=%s' % (k, value[k]) for k in sorted(value))
    if isinstance(value, (list, tuple)):
        return ';'.join(tsv_cell(v) for v in value)
    text = str(value)
    return text.replace('\t', ' ').replace('\r', ' ').replace('\n', ' | ')


def tsv_text(columns, rows):
    lines = ['\t'.join(columns)]
    for row in rows:
        lines.append('\t'.join(tsv_cell(row.get(c)) for c in columns))
    return '\n'.join(lines) + '\n'


def _write(path, text):
    write_file_atomic(os.path.abspath(path), text.encode('utf-8'), 'report file')


def _pyplot():
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        raise BenchError('matplotlib is not installed for %s on the controller; install it there '
                         '(pip install matplotlib) or run with plots off' % _python())
    return plt


def _python():
    import sys
    return sys.executable


# --- plots -------------------------------------------------------------------------------

def plot_spec(rows, path, title):
    plt = _pyplot()
    ok = [r for r in rows if r['status'] == 'ok']
    configs = []
    for row in rows:
        if row['configuration'] not in configs:
            configs.append(row['configuration'])
    shapes = [s for s in SHAPES if any(r['shape'] == s for r in ok)] + \
        sorted(set(r['shape'] for r in ok if r['shape'] not in SHAPES))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 + 0.9 * len(configs) * max(1, len(shapes))), 4.8))
    width = 0.8 / max(1, len(configs))
    top = max([r['decode_tps'] or 0 for r in ok] + [1.0])
    for i, conf in enumerate(configs):
        values, notes = [], []
        for shape in shapes:
            match = [r for r in ok if r['configuration'] == conf and r['shape'] == shape]
            rec = match[0] if match else None
            values.append(rec['decode_tps'] or 0 if rec else 0)
            if rec is None:
                notes.append('failed')
            elif rec.get('acceptance') is not None and rec.get('draft_tokens'):
                notes.append('%.0f%%' % (100 * rec['acceptance']))
            else:
                notes.append('')
        xs = [j + (i - (len(configs) - 1) / 2.0) * width for j in range(len(shapes))]
        failed = not any(r['configuration'] == conf for r in ok)
        bars = ax.bar(xs, values, width * 0.95, label=conf + (' (failed)' if failed else ''))
        for bar, value, note in zip(bars, values, notes):
            label = ('%.1f' % value if value else '') + ('\n' + note if note else '')
            ax.text(bar.get_x() + bar.get_width() / 2.0, bar.get_height() + top * 0.01, label,
                    ha='center', va='bottom', fontsize=7)
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels(shapes)
    ax.set_ylabel('decode tok/s (temperature 0)')
    ax.set_ylim(0, top * 1.25)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc='upper left')
    ax.grid(axis='y', alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _heat(ax, fig, batches, ubatches, grid, status, title, fmt, cmap):
    import matplotlib
    import numpy as np  # matplotlib's own dependency
    data = np.array([[float('nan') if v is None else v for v in row] for row in grid], dtype=float)
    masked = np.ma.masked_invalid(data)
    image = ax.imshow(masked, cmap=matplotlib.colormaps[cmap].with_extremes(bad='#e4e4e4'), aspect='auto',
                      origin='lower')
    ax.set_xticks(range(len(batches)))
    ax.set_xticklabels([str(b) for b in batches], fontsize=8)
    ax.set_yticks(range(len(ubatches)))
    ax.set_yticklabels([str(u) for u in ubatches], fontsize=8)
    ax.set_xlabel('batch (-b)')
    ax.set_ylabel('ubatch (-ub)')
    ax.set_title(title, fontsize=9)
    for y, row in enumerate(grid):
        for x, value in enumerate(row):
            state = status[y][x]
            if state is None:
                ax.text(x, y, 'not run', ha='center', va='center', fontsize=7, color='#888888')
            elif value is None:
                ax.text(x, y, 'FAILED' if state == 'failed' else '-', ha='center', va='center', fontsize=8,
                        color='#aa0000', fontweight='bold')
            else:
                r, g, b, _ = image.cmap(image.norm(value))
                ax.text(x, y, (fmt % value) + ('*' if state == 'partial' else ''), ha='center', va='center',
                        fontsize=7, color='black' if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else 'white')
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)


def plot_batch(rows, path, title):
    plt = _pyplot()
    batches = sorted(set(r['batch'] for r in rows))
    ubatches = sorted(set(r['ubatch'] for r in rows))
    depths = sorted(set(r['depth'] for r in rows))
    has_vram = any(r.get('peak_vram_mib') for r in rows)
    panels = [('pp_tps', 'prefill tok/s', '%.0f', 'viridis'), ('tg_tps', 'decode tok/s', '%.1f', 'viridis'),
              ('memory', 'peak VRAM MiB (busiest card)' if has_vram else 'peak RSS MiB (host)', '%.0f', 'magma_r')]
    fig, axes = plt.subplots(len(depths), len(panels), squeeze=False,
                             figsize=(4.6 * len(panels), 0.6 + 3.6 * len(depths)))
    for d_index, depth in enumerate(depths):
        cell = dict(((r['batch'], r['ubatch']), r) for r in rows if r['depth'] == depth)
        status = [[cell[(b, u)]['status'] if (b, u) in cell else None for b in batches] for u in ubatches]
        for p_index, (key, label, fmt, cmap) in enumerate(panels):
            grid = []
            for ubatch in ubatches:
                line = []
                for batch in batches:
                    rec = cell.get((batch, ubatch))
                    if rec is None or rec['status'] == 'failed':
                        value = None
                    elif key == 'memory':
                        vram = rec.get('peak_vram_mib')
                        value = max(vram.values()) if vram else rec.get('peak_rss_mib')
                    else:
                        value = rec.get(key)
                    line.append(value)
                grid.append(line)
            _heat(axes[d_index][p_index], fig, batches, ubatches, grid, status, '%s, depth %d' % (label, depth),
                  fmt, cmap)
    fig.suptitle(title + ('\n(* partial: the cell died after some tests)' if any(
        r['status'] == 'partial' for r in rows) else ''), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_turns(rows, path, title):
    plt = _pyplot()
    families = sorted(set(r['family'] for r in rows))
    turns = sorted(set(r['turn'] for r in rows))
    fig, (ax_lat, ax_cache) = plt.subplots(1, 2, figsize=(11, 4.4))
    for family in families:
        pts = [r for r in rows if r['family'] == family and r['status'] == 'ok']
        ax_lat.plot([r['turn'] for r in pts], [r['latency_ms'] for r in pts], marker='o', label='family %d' % family)
        for r in pts:
            ax_lat.annotate('%.0f' % r['latency_ms'], (r['turn'], r['latency_ms']), textcoords='offset points',
                            xytext=(0, 5), ha='center', fontsize=7)
    ax_lat.set_ylim(bottom=0)
    ax_lat.set_xticks(turns)
    ax_lat.set_xlabel('turn')
    ax_lat.set_ylabel('latency ms')
    ax_lat.set_title('turn latency per family', fontsize=9)
    ax_lat.legend(fontsize=8)
    ax_lat.grid(alpha=0.3)
    width = 0.8 / max(1, len(families))
    for i, family in enumerate(families):
        pts = dict((r['turn'], r) for r in rows if r['family'] == family and r['status'] == 'ok')
        xs = [t + (i - (len(families) - 1) / 2.0) * width for t in turns]
        cached = [(pts[t]['cache_n'] or 0) if t in pts else 0 for t in turns]
        fresh = [(pts[t]['prompt_n'] or 0) if t in pts else 0 for t in turns]
        ax_cache.bar(xs, cached, width * 0.95, color='C%d' % i, alpha=0.45,
                     label='family %d cached (cache_n)' % family)
        ax_cache.bar(xs, fresh, width * 0.95, bottom=cached, color='C%d' % i,
                     label='family %d prefilled (prompt_n)' % family)
    ax_cache.set_xticks(turns)
    ax_cache.set_xlabel('turn')
    ax_cache.set_ylabel('prompt tokens')
    ax_cache.set_title('prompt tokens: cached (light) vs prefilled (dark)', fontsize=9)
    ax_cache.legend(fontsize=7)
    ax_cache.grid(axis='y', alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- the report --------------------------------------------------------------------------

def build_document(kind, results, meta):
    """(rows, columns, document, findings) for one harness's raw results; no file is written."""
    if kind not in KINDS:
        raise BenchError('kind must be one of %s, got %r' % (', '.join(KINDS), kind))
    meta = redact(dict(meta or {}))
    findings = {'mismatches': [], 'failed': []}
    if kind == 'spec':
        configurations = [redact_configuration(c) for c in results]
        names = [c.get('name') for c in configurations]
        if any(not n for n in names) or len(set(names)) != len(names):
            raise BenchError('every configuration needs a unique name, got %r' % names)
        rows = spec_rows(configurations)
        columns = SPEC_COLUMNS
        findings['mismatches'] = compare_greedy(configurations)
        findings['failed'] = [{'name': c['name'], 'error': c.get('error')}
                              for c in configurations if c.get('error') or not c.get('shapes')]
        builds = sorted(set(c.get('build') for c in configurations if c.get('build')))
        document = {'harness': 'spec', 'meta': meta, 'builds': builds, 'configurations': configurations,
                    'rows': rows, 'greedy_identical': not findings['mismatches'],
                    'mismatches': findings['mismatches']}
    elif kind == 'batch':
        rows = list(results)
        columns = BATCH_COLUMNS
        findings['failed'] = [{'batch': r['batch'], 'ubatch': r['ubatch'], 'depth': r['depth'], 'error': r['error']}
                              for r in rows if r['status'] != 'ok']
        builds = sorted(set(r.get('build') for r in rows if r.get('build')))
        document = {'harness': 'batch', 'meta': meta, 'builds': builds, 'rows': rows}
    else:
        rows = list(results)
        columns = TURN_COLUMNS
        findings['failed'] = [{'family': r['family'], 'turn': r['turn'], 'error': r['error']}
                              for r in rows if r['status'] != 'ok']
        document = {'harness': 'turns', 'meta': meta, 'builds': [meta['build']] if meta.get('build') else [],
                    'rows': rows, 'per_turn': summarize_turns(rows)}
    return rows, columns, document, findings


def _fmt(value, pattern='%.1f'):
    return '-' if value is None else pattern % value


def summary_lines(kind, rows):
    """One line per row, the figures a person reads first."""
    lines = []
    for r in rows:
        if kind == 'spec':
            if r['status'] != 'ok':
                lines.append('%s: FAILED %s' % (r['configuration'], r['error']))
                continue
            lines.append('%s %s: %s tok/s decode, drafts %s/%s accepted (%s), copy %s, vram %s' % (
                r['configuration'], r['shape'], _fmt(r['decode_tps'], '%.2f'), _fmt(r['accepted'], '%d'),
                _fmt(r['draft_tokens'], '%d'), _fmt(r['acceptance'] and 100 * r['acceptance'], '%.0f%%'),
                _fmt(r['copy_ratio'], '%.2f'), r['vram_mib'] or '-'))
        elif kind == 'batch':
            lines.append('b %d ub %d d %d: %s pp %s tok/s, tg %s tok/s, rss %s MiB, vram %s, devices %s%s' % (
                r['batch'], r['ubatch'], r['depth'], r['status'], _fmt(r['pp_tps']), _fmt(r['tg_tps'], '%.2f'),
                _fmt(r['peak_rss_mib']), tsv_cell(r['peak_vram_mib']) or '-', tsv_cell(r['devices']) or '-',
                (' - ' + r['error'].splitlines()[-1]) if r.get('error') else ''))
        else:
            lines.append('family %d turn %d: %s %s ms, cached %s, prefilled %s%s' % (
                r['family'], r['turn'], r['status'], _fmt(r['latency_ms'], '%.0f'), _fmt(r['cache_n'], '%d'),
                _fmt(r['prompt_n'], '%d'), (' - ' + r['error']) if r.get('error') else ''))
    return lines


def plot_title(kind, meta, builds):
    parts = [{'spec': 'speculative A/B', 'batch': 'batch x ubatch sweep', 'turns': 'agent-loop turn latency'}[kind]]
    for key in ('host', 'label'):
        if meta.get(key):
            parts.append(str(meta[key]))
    if builds:
        parts.append('llama.cpp ' + ', '.join(builds))
    return ' - '.join(parts)


def write_report(kind, results, meta, dest, name, plot=True):
    """Write <dest>/<name>.tsv, .json and (with ``plot``) .png; returns {files, rows, findings, document}."""
    rows, columns, document, findings = build_document(kind, results, meta)
    if not os.path.isdir(dest):
        os.makedirs(dest)
    base = os.path.join(dest, name)
    files = {'tsv': base + '.tsv', 'json': base + '.json'}
    _write(files['tsv'], tsv_text(columns, rows))
    _write(files['json'], json.dumps(document, indent=1, sort_keys=True, default=str) + '\n')
    if plot:
        title = plot_title(kind, document.get('meta') or {}, document.get('builds'))
        if kind == 'spec' and findings['mismatches']:
            title = 'GREEDY TEXT MISMATCH - ' + title
        files['png'] = base + '.png'
        {'spec': plot_spec, 'batch': plot_batch, 'turns': plot_turns}[kind](rows, files['png'], title)
    return {'files': files, 'rows': rows, 'findings': findings, 'document': document,
            'summary': summary_lines(kind, rows)}
