# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The batch x ubatch sweep with llama-bench, one invocation per cell, as a transient systemd unit.

Runbook "Benchmarking this endpoint" - the llama-bench properties that have produced wrong
numbers on this fleet, and what this module does about each:

- llama-bench separates devices with ``/`` inside one configuration and sweeps values on ``,``:
  the service's ``--tensor-split 36,29`` is ``-ts 36/29`` and ``--device ROCm0,ROCm1`` is
  ``-dev ROCm0/ROCm1``; the comma form silently benches each card alone. ``llama_bench_list``
  is the one place that converts, and every row records the device list llama-bench reports.
- There is no ``-c``: a test's context is n_prompt + n_gen + n_depth; ``-d`` puts KV in front.
- A test that cannot allocate calls exit(1), so every (batch, ubatch, depth) cell is its own
  process and a failure costs one row. Output is JSON Lines so the rows a crashed cell did
  finish are kept.
- A shell's memlock limit is not the unit's: each cell runs under ``systemd-run`` with the
  service's ``LimitMEMLOCK`` and ``User``, and records the memlock limit it actually got.
- No ``--spec-*``, no ``--parallel``: these decode figures are the drafterless baseline.

Stdlib only; runs on the target.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import os
import random
import re
import subprocess
import sys
import threading
import time

from ansible_collections.dankfleet.llm.plugins.module_utils.base.endpoint_client import BenchError
from ansible_collections.dankfleet.llm.plugins.module_utils.bench.bench_vram import read_vram
from ansible_collections.dankfleet.llm.plugins.module_utils.base import typed_reader as tr

# Runs inside the transient unit around llama-bench: reports the peak RSS of the bench process
# and the memlock limit the unit really got, on stderr, after llama-bench has exited.
CELL_WRAPPER = (
    "import resource,subprocess,sys\n"
    "r=subprocess.call(sys.argv[1:])\n"
    "m=resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]\n"
    "sys.stderr.write('\\n@@dankfleet-cell maxrss_kib=%d memlock=%s\\n'"
    " % (resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, 'infinity' if m == resource.RLIM_INFINITY else m))\n"
    "sys.exit(r)\n"
)
_CELL_MARK = re.compile(r'@@dankfleet-cell maxrss_kib=(\d+) memlock=(\S+)')
_NAME = re.compile(r'^[A-Za-z0-9_.:\-\[\]]+$')
_NUMBER = re.compile(r'^[0-9]+(\.[0-9]+)?$')


def llama_bench_list(value, what, numeric=False):
    """The service's comma form (``ROCm0,ROCm1``, ``36,29``, or a list) as llama-bench's ``/`` form.

    llama-bench reads ``,`` as "sweep these values" and ``/`` as "these together", so passing the
    service's string through unchanged benches each card on its own. Returns '' for an empty value.
    Raises BenchError naming ``what`` for a value already in ``/`` form, an empty item, or (with
    ``numeric``) a split that is not a non-negative number.
    """
    if value is None:
        return ''
    if isinstance(value, (list, tuple)):
        items = [str(v).strip() for v in value]
        for item in items:
            if ',' in item or '/' in item:
                raise BenchError('%s: list item %r holds a separator; give one device or share per item' % (what, item))
    else:
        text = str(value).strip()
        if not text:
            return ''
        if '/' in text:
            raise BenchError("%s: %r is already in llama-bench's '/' form; give the service's comma form "
                             "(the value of the unit's --device / --tensor-split), e.g. %r"
                             % (what, text, text.replace('/', ',')))
        items = [item.strip() for item in text.split(',')]
    if not items:
        return ''
    for item in items:
        if not item:
            raise BenchError('%s: empty item in %r' % (what, value))
        if numeric and not _NUMBER.match(item):
            raise BenchError('%s: %r is not a non-negative number (tensor split shares are like 36,29)' % (what, item))
        if not numeric and not _NAME.match(item):
            raise BenchError('%s: %r is not a device name (llama.cpp names devices like ROCm0, CUDA1, RPC0)'
                             % (what, item))
    return '/'.join(items)


def cell_argv(config, batch, ubatch, depth):
    """llama-bench's argv for one cell; ``config`` is the sweep's parameters (see run_sweep)."""
    argv = [config['llama_bench'], '-m', config['model']]
    rpc = config.get('rpc') or []
    if rpc:
        # RPC devices (RPC0, RPC1, ...) exist only once registered, and -dev resolves names as it is parsed.
        argv += ['-rpc', ','.join(rpc)]
    devices = llama_bench_list(config.get('devices'), 'devices')
    if devices:
        argv += ['-dev', devices]
    split = llama_bench_list(config.get('tensor_split'), 'tensor_split', numeric=True)
    if split:
        argv += ['-ts', split]
    for flag, key in (('-sm', 'split_mode'), ('-ngl', 'n_gpu_layers'), ('-fa', 'flash_attn'),
                      ('-ctk', 'cache_type_k'), ('-ctv', 'cache_type_v'), ('-t', 'threads')):
        value = config.get(key)
        if value not in (None, '', 0) or (key == 'n_gpu_layers' and value == 0):
            argv += [flag, str(value)]
    argv += ['-b', str(batch), '-ub', str(ubatch), '-d', str(depth),
             '-p', str(config['n_prompt']), '-n', str(config['n_gen']),
             '-r', str(config['repetitions']), '-o', 'jsonl']
    argv += [str(a) for a in (config.get('extra_args') or [])]
    return argv


def unit_name(prefix, batch, ubatch, depth):
    return '%s-b%d-ub%d-d%d-%06x' % (prefix, batch, ubatch, depth, random.getrandbits(24))


def systemd_run_argv(unit, inner, user=None, limit_memlock='infinity', environment=None, timeout=None,
                     python=None):
    """``systemd-run --wait --collect --pipe`` around the cell wrapper and llama-bench's argv."""
    argv = ['systemd-run', '--unit=%s' % unit, '--wait', '--collect', '--pipe', '--quiet',
            '--property=Type=exec']
    if limit_memlock not in (None, ''):
        argv.append('--property=LimitMEMLOCK=%s' % limit_memlock)
    if user and user != 'root':
        argv.append('--property=User=%s' % user)
    if timeout:
        argv.append('--property=RuntimeMaxSec=%d' % int(timeout))
    for key in sorted(environment or {}):
        argv.append('--setenv=%s=%s' % (key, environment[key]))
    argv += ['--', python or sys.executable, '-c', CELL_WRAPPER] + list(inner)
    return argv


def direct_argv(inner, python=None):
    """The same cell without systemd (a host without it, or a test): the wrapper, then llama-bench."""
    return [python or sys.executable, '-c', CELL_WRAPPER] + list(inner)


# One llama-bench result row, as cell_row reads it (tools/llama-bench/llama-bench.cpp's json/jsonl printer).
ROW_SHAPE = tr.Obj({
    'n_prompt': tr.Int(0, 1 << 31), 'n_gen': tr.Int(0, 1 << 31), 'n_depth': tr.Int(0, 1 << 31),
    'avg_ts': tr.Num(0, 1e12), 'stddev_ts': tr.Num(0, 1e12),
    'devices': tr.Str(max_len=4096, name=True), 'tensor_split': tr.Str(max_len=4096, name=True),
    'build_number': tr.Int(0, 10 ** 9), 'build_commit': tr.Str(max_len=64, name=True),
    'backends': tr.Str(max_len=256, name=True),
}, required=('n_prompt', 'n_gen', 'avg_ts'), extra=tr.Json(max_depth=8))


def parse_bench_output(text):
    """llama-bench ``-o jsonl`` (or ``-o json``) stdout -> list of result rows read through ROW_SHAPE; partial
    output is kept, a garbled row or one of another shape (NaN, a rate as a word) is dropped."""
    rows = []
    text = text.strip()
    if not text:
        return rows
    if text.startswith('['):
        try:
            whole = tr.load_json(text, 'llama-bench', tr.List(tr.Json()))
        except tr.ShapeError:
            whole = None  # a cell that died mid-array: fall through and pick the complete objects out
        if whole is not None:
            return [r for r in (_row(obj) for obj in whole) if r is not None]
    decoder = json.JSONDecoder()
    pos = 0
    while True:
        start = text.find('{', pos)
        if start < 0:
            break
        try:
            obj, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            pos = start + 1
            continue
        row = _row(obj)
        if row is not None:
            rows.append(row)
        pos = end
    return rows


def _row(obj):
    try:
        tr.bound(obj, 'llama-bench')
        return ROW_SHAPE.read(obj, 'llama-bench')
    except tr.ShapeError:
        return None


def parse_cell_stderr(text):
    """(peak RSS in MiB, memlock limit as 'infinity' or bytes) from the wrapper's last line."""
    found = _CELL_MARK.findall(text or '')
    if not found:
        return None, None
    maxrss_kib, memlock = found[-1]
    if memlock != 'infinity':
        memlock = int(memlock)
    return round(int(maxrss_kib) / 1024.0, 1), memlock


def _error_tail(stderr, lines=6):
    kept = [line for line in (stderr or '').splitlines()
            if line.strip() and '@@dankfleet-cell' not in line]
    return '\n'.join(kept[-lines:])


class VramSampler(threading.Thread):
    """Polls VRAM per card while a cell runs and keeps each card's peak; idle on a CPU host."""

    def __init__(self, interval=0.5):
        threading.Thread.__init__(self)
        self.daemon = True
        self.interval = interval
        self.peak = {}
        self.source = None
        self._stop_event = threading.Event()

    def run(self):
        while not self._stop_event.is_set():
            cards, source = read_vram()
            if not cards:
                return
            self.source = source
            for card in cards:
                self.peak[card['card']] = max(self.peak.get(card['card'], 0.0), round(card['used_mib'], 1))
            self._stop_event.wait(self.interval)

    def stop(self):
        self._stop_event.set()
        self.join(timeout=10)
        return dict(self.peak) or None


def cell_row(batch, ubatch, depth, results, rc, stderr, vram_peak, wall_s, command):
    """One TSV row for a cell: prefill and decode rates, memory, what llama-bench says it ran."""
    pp = [r for r in results if int(r.get('n_prompt', 0)) > 0 and int(r.get('n_gen', 0)) == 0]
    tg = [r for r in results if int(r.get('n_gen', 0)) > 0 and int(r.get('n_prompt', 0)) == 0]
    rss_mib, memlock = parse_cell_stderr(stderr)
    first = results[0] if results else {}
    if rc == 0 and results:
        status = 'ok'
    elif results:
        status = 'partial'
    else:
        status = 'failed'
    return {
        'batch': batch, 'ubatch': ubatch, 'depth': depth, 'status': status,
        'pp_tps': round(pp[0]['avg_ts'], 2) if pp else None,
        'tg_tps': round(tg[0]['avg_ts'], 2) if tg else None,
        'pp_stddev': round(pp[0].get('stddev_ts', 0.0), 2) if pp else None,
        'tg_stddev': round(tg[0].get('stddev_ts', 0.0), 2) if tg else None,
        'peak_rss_mib': rss_mib,
        'peak_vram_mib': vram_peak,
        'memlock': memlock,
        # what llama-bench says it ran - the proof that the separators did what was meant
        'devices': sorted(set(r.get('devices') for r in results if r.get('devices'))) or None,
        'tensor_split': sorted(set(r.get('tensor_split') for r in results if r.get('tensor_split'))) or None,
        'n_tests': len(results),
        'build': ('b%s-%s' % (first.get('build_number'), first.get('build_commit'))) if first else None,
        'backends': first.get('backends'),
        'rc': rc,
        'wall_s': round(wall_s, 2),
        'error': None if status == 'ok' else (_error_tail(stderr) or 'exit %s with no output' % rc),
        'command': command,
    }


def run_cell(config, batch, ubatch, depth):
    inner = cell_argv(config, batch, ubatch, depth)
    if config.get('transient_unit', True):
        unit = unit_name(config.get('unit_prefix') or 'llm-bench', batch, ubatch, depth)
        argv = systemd_run_argv(unit, inner, user=config.get('user'), limit_memlock=config.get('limit_memlock'),
                                environment=config.get('environment'), timeout=config.get('cell_timeout'),
                                python=config.get('python'))
    else:
        argv = direct_argv(inner, python=config.get('python'))
        env = dict(os.environ)
        env.update(config.get('environment') or {})
    sampler = VramSampler()
    sampler.start()
    started = time.time()
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=None if config.get('transient_unit', True) else env)
    except OSError as exc:
        sampler.stop()
        raise BenchError('cannot run %s: %s' % (argv[0], exc))
    timer = threading.Timer(float(config.get('cell_timeout') or 3600) + 30, proc.kill)
    timer.start()
    try:
        out, err = proc.communicate()
    finally:
        timer.cancel()
    wall = time.time() - started
    vram_peak = sampler.stop()
    stdout = out.decode('utf-8', 'replace')
    stderr = err.decode('utf-8', 'replace')
    return cell_row(batch, ubatch, depth, parse_bench_output(stdout), proc.returncode, stderr, vram_peak, wall,
                    ' '.join(inner))


def cells(batch_sizes, ubatch_sizes, depths):
    """The sweep's cells in run order; a ubatch larger than its batch is skipped (llama.cpp clamps it)."""
    out = []
    for depth in depths:
        for batch in batch_sizes:
            for ubatch in ubatch_sizes:
                if int(ubatch) <= int(batch):
                    out.append((int(batch), int(ubatch), int(depth)))
    return out


def validate(config):
    """Refuse a sweep that cannot run, before any cell starts; returns warnings."""
    warnings = []
    for key in ('llama_bench', 'model'):
        if not config.get(key):
            raise BenchError('%s is not set' % key)
    if not os.access(config['llama_bench'], os.X_OK):
        raise BenchError('llama-bench not found or not executable at %s (the build role installs it beside '
                         'llama-server: <prefix>/current/bin/llama-bench)' % config['llama_bench'])
    if not os.path.isfile(config['model']):
        raise BenchError('model %s does not exist' % config['model'])
    llama_bench_list(config.get('devices'), 'devices')
    llama_bench_list(config.get('tensor_split'), 'tensor_split', numeric=True)
    if not cells(config['batch_sizes'], config['ubatch_sizes'], config['depths']):
        raise BenchError('no cell to run: every ubatch size is larger than every batch size')
    if config.get('transient_unit', True) and not os.path.isdir('/run/systemd/system'):
        raise BenchError('this host is not running systemd, so a transient unit cannot carry the service\'s '
                         'LimitMEMLOCK; set transient_unit=false to run the cells from this process instead')
    return warnings


def run_sweep(config):
    """Every cell, in order; returns the rows. ``config`` keys: llama_bench, model, batch_sizes,
    ubatch_sizes, depths, n_prompt, n_gen, repetitions, devices, tensor_split, rpc, split_mode,
    n_gpu_layers, flash_attn, cache_type_k, cache_type_v, threads, extra_args, transient_unit,
    user, limit_memlock, environment, unit_prefix, cell_timeout, python."""
    validate(config)
    plan = cells(config['batch_sizes'], config['ubatch_sizes'], config['depths'])
    return [run_cell(config, b, ub, d) for b, ub, d in plan]


def memlock_warnings(rows, wanted):
    """A cell that ran with less memlock than the unit asked for (a container's hard limit, say)."""
    if wanted in (None, ''):
        return []
    low = sorted(set(r['memlock'] for r in rows if r.get('memlock') not in (None, 'infinity')))
    if str(wanted) == 'infinity' and low:
        return ['the cells ran with a memlock limit of %s bytes although LimitMEMLOCK=infinity was asked for: '
                "the host's hard limit caps the unit (a container, or a systemd DefaultLimitMEMLOCK); ROCm staging "
                'buffers may fail to pin for that reason alone' % ', '.join(str(v) for v in low)]
    return []


BATCH_COLUMNS = ('batch', 'ubatch', 'depth', 'status', 'pp_tps', 'tg_tps', 'pp_stddev', 'tg_stddev', 'peak_rss_mib',
                 'peak_vram_mib', 'memlock', 'devices', 'tensor_split', 'n_tests', 'build', 'backends', 'rc',
                 'wall_s', 'error', 'command')
