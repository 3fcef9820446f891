# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plan_actual: what a gated llama-server really holds per device, against its fit_plan.

Plain Python (no Ansible import); the module ``dankfleet.llm.plan_actual`` is a thin wrapper.
Every path is read below ``root`` (``/`` on a live host; a recorded tree in the tests), so
``root + /sys/...`` and ``root + /proc/<pid>/status`` are what is read.

What "actual" means per device (the figure each backend's planner bound was calibrated against):

* ``ROCm<i>`` (hip): the card's ``mem_info_vram_used`` (what rocm-smi prints as VRAM used; the hip
  profile and its 0.8 GiB bound were fitted to rocm-smi figures). The KFD per-process figures
  (``/sys/class/kfd/kfd/proc/<pid>/vram_<gpu_id>``) of the endpoint's processes are recorded beside
  it where readable: the share of the card that is the endpoint's own.
* ``CUDA<i>`` (cuda): ``nvidia-smi --query-compute-apps`` used_memory of the endpoint's processes on
  that GPU (the cuda profile and the total bound were checked against exactly that, issue 9).
* ``RPC<i>``: the worker process on this host (``workers``): its GPU figures where it holds any
  (a ggml-rpc-server with the CUDA/HIP backend), else its RSS (the CPU backend).
* ``CPU`` (cpu backend, the plan's single device, no RPC): the llama-server process is the device:
  its RSS; the plan's host buffers fold into it as benchmarks/fit_accuracy.py folds them.
* ``host``: the llama-server process's RSS beside GPU/RPC devices; recorded, never bounded (the
  planner's bounds are per device, as in benchmarks/fit_accuracy.py).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import errno
import json
import os
import re
import stat
import time

from ansible_collections.dankfleet.llm.plugins.module_utils.host.gpu_facts import (
    GPU_INDEX_MAX, INTEGRATED_GFX, VRAM_MAX_BYTES, VRAM_MAX_MIB, GpuFactsError, gfx_target, parse_kfd_properties)
from ansible_collections.dankfleet.llm.plugins.module_utils.host.gguf_fetch import STAMP_SHAPE, STAMP_SUFFIX, stamp_matches
from ansible_collections.dankfleet.llm.plugins.module_utils.base.llama_env import LlamaEnvError, read_env_file as _read_env
from ansible_collections.dankfleet.llm.plugins.module_utils.base.regular_file import (
    FileRefused, check_name, decode_text, open_dir, open_read_fd, read_fd, read_text)
from ansible_collections.dankfleet.llm.plugins.module_utils.base.sha256 import sha256_file
from ansible_collections.dankfleet.llm.plugins.module_utils.base.strict_values import digits
from ansible_collections.dankfleet.llm.plugins.module_utils.base.typed_reader import (
    Int, Json, List, Obj, Optional, ShapeError, Str, int_text, load_json, printable, quote)

MIB = 1024 ** 2
GIB = 1024 ** 3

RECORD_FILE = "plan-vs-actual.json"
RECORD_VERSION = 1
TEXTFILE_NAME = "llm_plan_actual.prom"
KINDS = ("weights", "kv", "recurrent", "compute", "draft", "mmproj", "output", "overhead", "total")

# The planner's own bounds on a device total, per backend profile, as its accuracy tests hold them.
BOUNDS = {
    "cpu": {"rel": 0.01, "abs": 64 * MIB,
            "source": "benchmarks/fit_accuracy.py total bound (tests/unit/plugins/module_utils/test_fit_plan_accuracy.py): "
                      "max(1 % of measured, 64 MiB)"},
    "cuda": {"rel": 0.01, "abs": 64 * MIB,
             "source": "benchmarks/fit_accuracy.py --set cuda-h200 --smi (tests/unit/plugins/module_utils/test_fit_plan_accuracy_cuda.py): "
                       "planner + overhead against nvidia-smi per process, max(1 % of measured, 64 MiB)"},
    "hip": {"rel": 0.0, "abs": int(0.8 * GIB),
            "source": "tests/unit/plugins/module_utils/test_fit_plan_runbook.py: the hip profile against the runbook's rocm-smi "
                      "figures, within 0.8 GiB"},
}
NVIDIA_SMI_APPS_ARGS = ["--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"]
NVIDIA_SMI_GPUS_ARGS = ["--query-gpu=index,uuid,pci.bus_id", "--format=csv,noheader,nounits"]
KFD_NODES = "/sys/class/kfd/kfd/topology/nodes"
KFD_PROC = "/sys/class/kfd/kfd/proc"
PCI_DEVICES = "/sys/bus/pci/devices"
SHAPE_KEYS = ("CTX_SIZE", "PARALLEL", "BATCH_SIZE", "UBATCH_SIZE", "CACHE_TYPE_K", "CACHE_TYPE_V", "FLASH_ATTN",
              "DEVICES", "SPLIT_MODE", "TENSOR_SPLIT", "NGL", "SPEC_TYPE", "SPEC_DRAFT_N_MAX", "SPEC_DRAFT_DEVICE",
              "VISION", "ALIAS", "MODEL_PATH", "DRAFT_MODEL_PATH", "MMPROJ_PATH", "N_CPU_MOE", "CPU_MOE", "LOAD_MODE",
              "MMPROJ_DEVICE", "MMPROJ_OFFLOAD", "IMAGE_MIN_TOKENS", "IMAGE_MAX_TOKENS")


# What no real process or card comes near: a figure outside is refused by name, never recorded.
PID_MAX = 2 ** 22                   # the kernel's pid_max ceiling
RSS_MAX_BYTES = 2 ** 50
GPU_ID_MAX = 2 ** 32 - 1            # a KFD gpu_id is a u32
_UUID = Str(max_len=128, name=True)
_PLAN_BYTES = Int(-2 ** 62, 2 ** 62)       # a fit_plan byte count (an error term may be negative)
_PID = Int(1, PID_MAX, text=True)
# gpu_facts' gpus as this module reads them: a name and a PCI address (every other key is dropped here).
# gpu_facts' cards: a card it could not name (an integrated GPU it does not serve on) has a null name and is not
# one the plan places anything on
_GPUS = List(Obj({"name": Optional(Str(max_len=64, name=True)), "pci_address": Optional(Str(max_len=64, name=True))}),
             max_len=1024)


class PlanActualError(Exception):
    """Bad input: the message names the cause and the fix. ``changed``: whether something was written before it."""

    def __init__(self, msg, changed=False):
        super(PlanActualError, self).__init__(msg)
        self.changed = changed


# ------------------------------------------------------------------------------------ reading

def _p(root, path):
    return os.path.join(root, path.lstrip("/"))


KERNEL_FILE_MAX_BYTES = 1024 * 1024     # /proc/<pid>/status, a sysfs attribute, KFD properties: a few KiB
RECORDS_MAX_BYTES = 64 * 1024 * 1024    # the plan-vs-actual history: ~2 KiB a record, a gate a deploy
_GONE = (errno.ENOENT, errno.ESRCH, errno.EACCES, errno.EPERM, errno.ENOTDIR)


def _read(root, path):
    """A kernel file's text, None when it is gone (a process that exited) or unreadable; a FIFO, a device or an
    endless file in a recorded tree is refused by name, never waited for. Process names are any bytes: they are
    decoded with replacement, not refused."""
    try:
        return read_text(_p(root, path), "kernel file", KERNEL_FILE_MAX_BYTES, errors="replace")
    except FileRefused as exc:
        if exc.errno in _GONE:
            return None
        raise PlanActualError("%s: the tree under %s is not what the kernel shows there" % (exc, root))


def _read_int(root, path, hi=VRAM_MAX_BYTES):
    """A kernel integer in [0, hi] (VRAM bytes unless told), None when the file is gone; a word, 5000 digits,
    a negative or an impossible figure is refused naming the file, never recorded."""
    text = _read(root, path)
    if text is None:
        return None
    try:
        return int_text(text, _p(root, path), 0, hi)
    except ShapeError as exc:
        raise PlanActualError("%s: the tree under %s is not what the kernel shows there" % (exc, root))


def process_memory(root, pid):
    """{rss_bytes, rss_anon_bytes, rss_file_bytes, name} of /proc/<pid>/status, or None when gone."""
    text = _read(root, "/proc/%d/status" % int(pid))
    if text is None:
        return None
    out = {"name": None}
    keys = {"VmRSS": "rss_bytes", "RssAnon": "rss_anon_bytes", "RssFile": "rss_file_bytes", "RssShmem": "rss_shmem_bytes"}
    source = _p(root, "/proc/%d/status" % int(pid))
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key == "Name":
            out["name"] = printable(value.strip(), limit=64)
        elif key in keys:
            parts = value.split()
            try:     # "VmRSS:   123456 kB": 0 to 2**50 bytes, in kB
                if len(parts) != 2 or parts[1] != "kB":
                    raise ShapeError(source, key, "%s is not '<n> kB'" % quote(value.strip()))
                out[keys[key]] = int_text(parts[0], "%s %s" % (source, key), 0, RSS_MAX_BYTES // 1024) * 1024
            except ShapeError as exc:
                raise PlanActualError("%s: not what the kernel writes there (a recorded tree under %s?)" % (exc, root))
    if "rss_bytes" not in out:
        return None
    return out


def parse_compute_apps(text, source="nvidia-smi"):
    """Rows of ``nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory`` (or the issue's ``pid,used_memory``),
    ``--format=csv,noheader,nounits``: [{pid, gpu_uuid (None for two fields), used_bytes}]."""
    rows = []
    for lineno, line in enumerate((text or "").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("No running") or line.lower().startswith("pid"):
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) not in (2, 3):
            raise PlanActualError("%s line %d: expected 'pid, used_memory' or 'pid, gpu_uuid, used_memory' "
                                  "(nvidia-smi %s), found %s" % (source, lineno, " ".join(NVIDIA_SMI_APPS_ARGS),
                                                                 quote(line)))
        where = "%s line %d" % (source, lineno)
        used = fields[-1]
        try:
            pid = _PID.read(fields[0], where, "pid")
            uuid = _UUID.read(fields[1], where, "gpu_uuid") if len(fields) == 3 else None
            if used.startswith("[") and used.endswith("]"):
                used_bytes = None     # [N/A] or [Insufficient Permissions]
            else:
                used_bytes = Int(0, VRAM_MAX_MIB, text=True).read(used, where, "used_memory") * MIB
        except ShapeError as exc:
            raise PlanActualError("%s (nvidia-smi %s)" % (exc, " ".join(NVIDIA_SMI_APPS_ARGS)))
        rows.append({"pid": pid, "gpu_uuid": uuid, "used_bytes": used_bytes})
    return rows


def parse_gpu_uuids(text, source="nvidia-smi"):
    """Rows of ``nvidia-smi --query-gpu=index,uuid,pci.bus_id --format=csv,noheader,nounits``."""
    rows = []
    for lineno, line in enumerate((text or "").splitlines(), 1):
        line = line.strip()
        if not line or line.lower().startswith("index"):
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 3:
            raise PlanActualError("%s line %d: expected 'index, uuid, pci.bus_id' (nvidia-smi %s), found %s"
                                  % (source, lineno, " ".join(NVIDIA_SMI_GPUS_ARGS), quote(line)))
        where = "%s line %d" % (source, lineno)
        try:
            index = Int(0, GPU_INDEX_MAX, text=True).read(fields[0], where, "index")
            uuid = _UUID.read(fields[1], where, "uuid")
        except ShapeError as exc:
            raise PlanActualError("%s (nvidia-smi %s)" % (exc, " ".join(NVIDIA_SMI_GPUS_ARGS)))
        rows.append({"index": index, "uuid": uuid, "pci_address": _bdf(fields[2])})
    return rows


def _bdf(text):
    if not isinstance(text, str):
        return None
    m = re.match(r"(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])\Z", text.strip())
    if not m:
        return None
    return "%04x:%s:%s.%s" % (int(m.group(1) or "0", 16) & 0xffff, m.group(2).lower(), m.group(3).lower(), m.group(4))


def _visible(text):
    """CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES -> [int] (runtime indices), [] when unset/empty."""
    out = []
    for part in str(text or "").split(","):
        part = part.strip()
        if _index(part) is not None:
            out.append(_index(part))
    return out


def _index(text):
    """A device index written in digits (CUDA0's 0), or None: never int() of 5000 digits."""
    return int(text) if digits(text) and len(text) <= 4 else None


def kfd_gpu_nodes(root):
    """[{node, gpu_id, pci_address, integrated}] of the KFD topology's GPU nodes in node order (HIP order)."""
    base = _p(root, KFD_NODES)
    if not os.path.isdir(base):
        return []
    nodes = []
    for entry in sorted((e for e in os.listdir(base) if _index(e) is not None), key=int):
        try:    # gpu_facts' reader: every property an integer of its field's width, refused by name otherwise
            props = parse_kfd_properties(_read(root, "%s/%s/properties" % (KFD_NODES, entry)) or "",
                                         _p(root, "%s/%s/properties" % (KFD_NODES, entry)))
        except GpuFactsError as exc:
            raise PlanActualError(str(exc))
        if not (props.get("simd_count", 0) > 0 or props.get("gfx_target_version", 0) > 0):
            continue
        loc = props.get("location_id")
        bdf = None
        if loc is not None:
            bdf = "%04x:%02x:%02x.%d" % (props.get("domain", 0), loc >> 8, (loc >> 3) & 0x1f, loc & 7)
        nodes.append({"node": int(entry), "gpu_id": _read_int(root, "%s/%s/gpu_id" % (KFD_NODES, entry), GPU_ID_MAX),
                      "pci_address": bdf,
                      "integrated": props.get("cpu_cores_count", 0) > 0
                      or gfx_target(props.get("gfx_target_version")) in INTEGRATED_GFX})
    return nodes


# ------------------------------------------------------------------------------------ the plan

def _i(d, key, where="plan"):
    """A byte count of the plan: absent or null is 0; a NaN, an infinity, a bool, a fraction or text is refused."""
    value = (d or {}).get(key)
    if value is None:
        return 0
    try:
        return _PLAN_BYTES.read(value, where, key)
    except ShapeError as exc:
        raise PlanActualError("%s: a fit_plan byte count is a finite integer (NaN, infinities, text and figures no "
                              "host holds are refused); pass the filter's result as is" % exc)


def planned_devices(plan, backend, output_tied=False):
    """{device: {kind: bytes}} the plan expects, in the terms each device is measured in.

    A plan with one non-RPC device on the cpu backend is the llama-server process itself: the host's buffers fold
    into it (token embedding, output rows; a tied output needs no copy of token_embd), as
    benchmarks/fit_accuracy.py folds them for its ``local`` loads. Otherwise the plan's host is its own ``host`` row.
    """
    if not plan:
        return {}
    if not isinstance(plan, dict) or not isinstance(plan.get("devices"), list):
        raise PlanActualError("plan must be the dankfleet.llm.fit_plan result (a dict with a devices list), got %s; "
                              "pass the filter's result as is, or {} for none" % type(plan).__name__)
    out = {}
    for n, d in enumerate(plan["devices"]):
        if not isinstance(d, dict) or not isinstance(d.get("name"), str) or not d.get("name"):
            raise PlanActualError("plan.devices holds an entry without a name (%r): pass the fit_plan result "
                                  "unchanged" % (d,))
        w = "plan.devices[%d]" % n
        row = {"weights": _i(d, "weights_bytes", w), "kv": _i(d, "kv_bytes", w),
               "recurrent": _i(d, "recurrent_bytes", w), "compute": _i(d, "compute_bytes", w),
               "draft": _i(d, "draft_bytes", w), "mmproj": _i(d, "mmproj_bytes", w),
               "output": 0, "overhead": _i(d, "overhead_bytes", w), "total": _i(d, "total_bytes", w)}
        out[d["name"]] = row
    host = plan.get("host") or {}
    if not isinstance(host, dict):
        raise PlanActualError("plan.host is a %s, not the fit_plan result's host dict; pass the filter's result as is"
                              % type(host).__name__)
    names = list(out)
    if backend == "cpu" and len(names) == 1 and not names[0].startswith("RPC"):
        dev = out[names[0]]
        tied = _i(host, "weights_bytes", "plan.host") if output_tied else 0
        dev["weights"] += _i(host, "weights_bytes", "plan.host") + _i(host, "draft_weights_bytes", "plan.host") - tied
        dev["output"] = _i(host, "output_bytes", "plan.host") + _i(host, "draft_output_bytes", "plan.host")
        dev["total"] = sum(dev[k] for k in KINDS if k != "total")
    elif host:
        out["host"] = {"weights": _i(host, "weights_bytes", "plan.host") + _i(host, "draft_weights_bytes", "plan.host"), "kv": 0,
                       "recurrent": 0, "compute": _i(host, "compute_bytes", "plan.host") + _i(host, "draft_compute_bytes", "plan.host"),
                       "draft": 0, "mmproj": 0, "output": _i(host, "output_bytes", "plan.host") + _i(host, "draft_output_bytes", "plan.host"),
                       "overhead": 0, "total": _i(host, "total_bytes", "plan.host")}
    return out


def bound_bytes(backend, actual):
    b = BOUNDS.get(backend, BOUNDS["cpu"])
    return int(max(b["rel"] * actual, b["abs"]))


# ------------------------------------------------------------------------------------ measuring

def measure(root, backend, pid, device_names, workers=None, gpus=None, visible_devices="",
            compute_apps_text=None, gpu_uuids_text=None):
    """{device: {actual_bytes, source, ...}} for ``device_names`` (+ ``host``) and the warnings.

    ``pid``: the llama-server process; ``workers``: [{device, pid}] RPC workers on this host; ``gpus``: gpu_facts'
    gpus (name -> pci_address), optional; ``visible_devices``: HIP/CUDA_VISIBLE_DEVICES when ``gpus`` is absent;
    ``compute_apps_text``/``gpu_uuids_text``: nvidia-smi output (cuda).
    """
    warnings = []
    out = {}
    workers = list(workers or [])
    server = process_memory(root, pid)
    if server is None:
        raise PlanActualError("llama-server pid %s has no %s: the process is gone (did the service restart after "
                              "the gate?); nothing to measure" % (pid, _p(root, "/proc/%s/status" % pid)))
    pids = [int(pid)] + [int(w["pid"]) for w in workers if w.get("pid")]
    by_name = dict((g.get("name"), g) for g in (gpus or []) if isinstance(g, dict) and g.get("name"))

    # NVIDIA: per process, per GPU
    apps, uuids = [], []
    if compute_apps_text is not None:
        apps = parse_compute_apps(compute_apps_text)
    if gpu_uuids_text is not None:
        uuids = parse_gpu_uuids(gpu_uuids_text)
    cuda_names = [n for n in device_names if n.startswith("CUDA")]

    def cuda_uuid(name):
        idx = _index(name[4:])
        g = by_name.get(name)
        if g and g.get("pci_address"):
            for row in uuids:
                if row["pci_address"] == _bdf(g["pci_address"]):
                    return row["uuid"]
        vis = _visible(visible_devices)
        if idx is not None and vis:
            idx = vis[idx] if idx < len(vis) else None
        for row in uuids:
            if row["index"] == idx:
                return row["uuid"]
        return None

    def gpu_bytes_of(proc_pid, uuid=None, single=False):
        rows = [a for a in apps if a["pid"] == proc_pid and (single or a["gpu_uuid"] is None or a["gpu_uuid"] == uuid)]
        if not rows or any(a["used_bytes"] is None for a in rows):
            return None
        return sum(a["used_bytes"] for a in rows)

    for name in cuda_names:
        if compute_apps_text is None:
            out[name] = {"actual_bytes": None, "source": "nvidia-smi unavailable"}
            continue
        single = len(cuda_names) == 1 and all(a["gpu_uuid"] is None for a in apps)
        uuid = cuda_uuid(name)
        if uuid is None and not single:
            out[name] = {"actual_bytes": None,
                         "source": "no GPU uuid for %s (give gpus from gpu_facts, or nvidia-smi %s output)"
                                   % (name, " ".join(NVIDIA_SMI_GPUS_ARGS))}
            continue
        got = gpu_bytes_of(int(pid), uuid, single)
        out[name] = {"actual_bytes": got, "gpu_uuid": uuid,
                     "source": "nvidia-smi --query-compute-apps pid %d" % int(pid) if got is not None
                     else "pid %d not among nvidia-smi's compute apps (or [N/A])" % int(pid)}

    # AMD: the card (mem_info_vram_used) and the endpoint's KFD per-process figures
    rocm_names = [n for n in device_names if n.startswith("ROCm")]
    if rocm_names:
        nodes = kfd_gpu_nodes(root)
        vis = _visible(visible_devices)
        if vis:
            visible_nodes = [nodes[i] for i in vis if i < len(nodes)]
        else:
            visible_nodes = [n for n in nodes if not n["integrated"]]
        for name in rocm_names:
            idx = _index(name[4:])
            idx = -1 if idx is None else idx
            g = by_name.get(name)
            bdf = _bdf(g["pci_address"]) if g and g.get("pci_address") else None
            node = None
            if bdf:
                node = next((n for n in nodes if n["pci_address"] == bdf), None)
            elif 0 <= idx < len(visible_nodes):
                node = visible_nodes[idx]
                bdf = node["pci_address"]
            if bdf is None:
                out[name] = {"actual_bytes": None, "source": "no card for %s (no KFD GPU node %d; give gpus from "
                                                             "gpu_facts)" % (name, idx)}
                continue
            card = _read_int(root, "%s/%s/mem_info_vram_used" % (PCI_DEVICES, bdf))
            row = {"actual_bytes": card, "pci_address": bdf, "card_used_bytes": card,
                   "source": "%s/%s/mem_info_vram_used" % (PCI_DEVICES, bdf) if card is not None
                   else "no mem_info_vram_used for %s (amdgpu not bound?)" % bdf}
            if node and node.get("gpu_id") is not None:
                per = {}
                for proc_pid in pids:
                    v = _read_int(root, "%s/%d/vram_%d" % (KFD_PROC, proc_pid, node["gpu_id"]))
                    if v is not None:
                        per[str(proc_pid)] = v
                if per:
                    row["kfd_process_bytes"] = per
            out[name] = row

    # RPC workers on this host: their GPU figures when they hold any, else their RSS
    wmap = dict((w.get("device"), w) for w in workers)
    for name in [n for n in device_names if n.startswith("RPC")]:
        w = wmap.get(name)
        if not w or not w.get("pid"):
            out[name] = {"actual_bytes": None, "source": "no local worker pid for %s (a remote worker: measure it "
                                                         "there)" % name}
            continue
        wpid = int(w["pid"])
        got = None
        if apps:
            got = gpu_bytes_of(wpid, None, True)
            if got is not None:
                out[name] = {"actual_bytes": got, "pid": wpid, "source": "nvidia-smi --query-compute-apps pid %d" % wpid}
                continue
        kfd = 0
        found = False
        for n in kfd_gpu_nodes(root) if backend == "hip" else []:
            v = _read_int(root, "%s/%d/vram_%d" % (KFD_PROC, wpid, n["gpu_id"] or 0))
            if v is not None:
                kfd += v
                found = True
        if found:
            out[name] = {"actual_bytes": kfd, "pid": wpid, "source": "%s/%d/vram_*" % (KFD_PROC, wpid)}
            continue
        mem = process_memory(root, wpid)
        if mem is None:
            out[name] = {"actual_bytes": None, "pid": wpid, "source": "worker pid %d is gone" % wpid}
            warnings.append("%s: worker pid %d has no /proc entry: it is not measured" % (name, wpid))
        else:
            out[name] = dict(mem, actual_bytes=mem["rss_bytes"], pid=wpid, source="/proc/%d/status VmRSS" % wpid)

    # the llama-server process itself
    local = backend == "cpu" and len(device_names) == 1 and not device_names[0].startswith(("RPC", "CUDA", "ROCm"))
    row = dict(server, actual_bytes=server["rss_bytes"], pid=int(pid), source="/proc/%d/status VmRSS" % int(pid))
    if local:
        out[device_names[0]] = row
    else:
        out["host"] = row
    for name in device_names:
        if name not in out:
            out[name] = {"actual_bytes": None, "source": "no reader for device %s on backend %s" % (name, backend)}
    for name, r in sorted(out.items()):
        if r.get("actual_bytes") is None:
            warnings.append("%s not measured: %s" % (name, r["source"]))
    return out, warnings


# ------------------------------------------------------------------------------------ comparing

def compare(backend, planned, actual):
    """Rows per device: planned kinds, actual, error (actual - planned total), bound, verdict.

    verdict: ok | under (actual exceeds plan beyond the bound: the plan underestimated) | over (plan exceeds actual
    beyond the bound) | unplanned (no plan for it) | unmeasured | reported (the host beside GPU/RPC devices: not
    bounded, as in benchmarks/fit_accuracy.py).
    """
    rows = []
    names = [n for n in planned if n != "host"] + [n for n in sorted(actual) if n not in planned and n != "host"]
    if "host" in planned or "host" in actual:
        names.append("host")
    for name in names:
        p = planned.get(name)
        a = actual.get(name) or {}
        act = a.get("actual_bytes")
        row = {"device": name, "planned": dict(p) if p else None, "actual_bytes": act,
               "source": a.get("source"), "error_bytes": None, "bound_bytes": None}
        for k in ("pid", "pci_address", "gpu_uuid", "card_used_bytes", "kfd_process_bytes", "rss_anon_bytes",
                  "rss_file_bytes"):
            if k in a:
                row[k] = a[k]
        if act is None:
            row["verdict"] = "unmeasured"
        elif p is None:
            row["verdict"] = "unplanned"
        else:
            row["error_bytes"] = act - p["total"]
            if name == "host":
                row["verdict"] = "reported"
            else:
                b = bound_bytes(backend, act)
                row["bound_bytes"] = b
                row["verdict"] = "under" if row["error_bytes"] > b else ("over" if -row["error_bytes"] > b else "ok")
        rows.append(row)
    return rows


def _mib(b):
    return "-" if b is None else "%.1f" % (b / float(MIB))


def table(rows):
    """The table the gate prints: one line per device, MiB."""
    head = "%-8s %10s %10s %10s %10s %10s %10s %9s  %s" % (
        "device", "weights", "kv", "compute", "plan", "actual", "error", "bound", "verdict")
    lines = [head]
    for r in rows:
        p = r["planned"] or {}
        lines.append("%-8s %10s %10s %10s %10s %10s %10s %9s  %s" % (
            r["device"], _mib(p.get("weights")), _mib(None if not p else p["kv"] + p["recurrent"]),
            _mib(p.get("compute")), _mib(p.get("total")), _mib(r["actual_bytes"]),
            "-" if r["error_bytes"] is None else "%+.1f" % (r["error_bytes"] / float(MIB)), _mib(r["bound_bytes"]),
            r["verdict"]))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ recording

def env_shape(env):
    """The serve shape of the live env file (never its API key): the SHAPE_KEYS that are set."""
    return dict((k, env[k]) for k in SHAPE_KEYS if k in env and env[k] != "")


def read_env_file(path):
    """The live env file's variables, read by the one env-file reader (module_utils/base/llama_env.py)."""
    try:
        return _read_env(path)[0]
    except LlamaEnvError as exc:
        raise PlanActualError("%s: pass the live env file of the service" % exc)


def stamp_sha256(model_path, st, trusted=None):
    """(sha256, None) when gguf_fetch's stamp vouches for the model file as a verification root made it, (None,
    why) when the stamp is absent or stale (hash the file), or raises StampUntrusted when it cannot be believed.

    The stamp sits in a directory the service user owns and can write: a claim there is believed only when the
    stamp is a regular file owned by root (or by whoever runs this), written by nobody else, with one link, of
    gguf_fetch's stamp shape, and vouching for this very file by gguf_fetch's own rule (size, mtime, inode and
    ctime, which only the kernel sets).
    """
    trusted = (0, os.geteuid()) if trusted is None else trusted
    path = model_path + STAMP_SUFFIX
    try:
        fd = open_read_fd(path, "stamp", 1 << 16, follow=False)
    except FileRefused as exc:
        if exc.errno == errno.ENOENT:
            return None, "no stamp"
        raise StampUntrusted("%s" % exc)
    try:
        sst = os.fstat(fd)
        if sst.st_uid not in trusted or sst.st_mode & 0o022 or sst.st_nlink != 1:
            raise StampUntrusted("%s is owned by uid %d, mode %04o, %d link(s): not one a verification as root wrote "
                                 "(gguf_fetch writes it root-owned, 0644, one link)"
                                 % (path, sst.st_uid, sst.st_mode & 0o7777, sst.st_nlink))
        try:
            stamp = load_json(decode_text(read_fd(fd, path, "stamp", 1 << 16), path, "stamp"), path, STAMP_SHAPE)
        except (ShapeError, FileRefused) as exc:
            raise StampUntrusted("%s (re-run gguf_fetch for a stamp of this release's shape)" % exc)
    finally:
        os.close(fd)
    if stamp.get("file", os.path.basename(model_path)) != os.path.basename(model_path):
        raise StampUntrusted("%s names %s, not %s" % (path, quote(stamp["file"]), os.path.basename(model_path)))
    if not stamp_matches(stamp, st, st.st_size, stamp["sha256"]):
        return None, "stale stamp"
    return stamp["sha256"], None


class StampUntrusted(Exception):
    """A stamp whose claim cannot be believed: the message says why."""


def model_sha256(model_path, given="", trusted=None):
    """(sha256, source): the given one; else gguf_fetch's stamp when a verification root made vouches for this very
    file ("stamp"); else, with no stamp or a stale one, a full hash of the file ("hashed"). A stamp someone else
    could have written is never repeated: (None, "unverified: <why>")."""
    if given:
        return given.lower(), "given"
    if not model_path or not os.path.isfile(model_path):
        return None, "no model file"
    st = os.stat(model_path)
    try:
        sha, _why = stamp_sha256(model_path, st, trusted)
    except StampUntrusted as exc:
        return None, "unverified: %s" % printable(str(exc), limit=400)
    if sha:
        return sha, "stamp"
    return sha256_file(model_path), "hashed"


def make_record(backend, rows, release="", model_sha="", model_path="", shape=None, plan=None, now=None):
    """One plan-vs-actual record (the JSON file's list element)."""
    plan = plan or {}
    devices = []
    for r in rows:
        p = r["planned"] or {}
        d = {"device": r["device"], "planned": dict((k, p.get(k, 0)) for k in KINDS) if p else None,
             "measured_total": r["actual_bytes"], "error": r["error_bytes"], "bound": r["bound_bytes"],
             "verdict": r["verdict"], "source": r["source"]}
        for k in ("pid", "pci_address", "gpu_uuid", "card_used_bytes", "kfd_process_bytes", "rss_anon_bytes",
                  "rss_file_bytes"):
            if k in r:
                d[k] = r[k]
        devices.append(d)
    t = time.time() if now is None else now
    return {
        "version": RECORD_VERSION,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)), "timestamp": round(t, 3),
        "release": release or None, "backend": backend, "model_path": model_path or None,
        "model_sha256": model_sha or None, "shape": dict(shape or {}),
        "plan": {"tensor_split": plan.get("tensor_split"), "ctx_size": plan.get("ctx_size"),
                 "parallel": plan.get("parallel"), "profile": (plan.get("profile") or {}).get("backend")}
        if plan else None,
        "bound": dict(BOUNDS.get(backend, BOUNDS["cpu"])),
        "devices": devices,
        "misses": [d["device"] for d in devices if d["verdict"] in ("under", "over")],
    }


def load_records(path):
    """The records of a plan-vs-actual.json ([] when absent); a file that is not a JSON list is an error.

    A regular file, never a link (it is rewritten by rename where the service user may write), UTF-8 JSON."""
    if not os.path.lexists(path):
        return []
    try:
        text = read_text(path, "plan-vs-actual history", RECORDS_MAX_BYTES, follow=False)
    except FileRefused as exc:
        raise PlanActualError("%s: move it aside (it is the plan-vs-actual history; nothing here deletes it) and the "
                              "next gate starts a new one" % exc)
    try:    # bounded JSON (depth, size, finite numbers, int64), a list of objects: the history as this writes it
        return load_json(text, path, _RECORDS)
    except ShapeError as exc:
        raise PlanActualError("%s: not plan-vs-actual records; move it aside (it is the plan-vs-actual history; "
                              "nothing here deletes it) and the next gate starts a new one" % exc)


_RECORDS = List(Obj({}, extra=Json()))


def _open_dir(directory, what):
    try:
        return open_dir(os.path.abspath(directory), what)
    except FileRefused as exc:
        raise PlanActualError("%s: create it, or point %s at a real directory. Nothing was written" % (exc, what))


def check_dir(directory, what):
    """PlanActualError unless directory opens as the layer opens it (a directory, no link another user can change)."""
    _open_dir(directory, what).close()


def _atomic_write(path, text, mode=0o644, what="directory"):
    """A new file renamed over path inside its opened directory (O_EXCL|O_NOFOLLOW temporary, fsynced)."""
    with _open_dir(os.path.dirname(path), what) as d:
        try:
            d.write_atomic(os.path.basename(path), text.encode("utf-8"), mode=mode)
        except FileRefused as exc:
            raise PlanActualError("%s. Nothing was written" % exc)


def append_record(path, record):
    records = load_records(path)
    records.append(record)
    _atomic_write(path, json.dumps(records, indent=1, sort_keys=True, allow_nan=False) + "\n", what="state_dir")
    return len(records)


def _label(v):
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_textfile(record, unit=None):
    """node-exporter textfile of one record: llm_plan_device_bytes{device,kind}, llm_actual_device_bytes{device},
    llm_plan_device_bound_bytes{device} (the planner's bound on that device; absent where not bounded).
    With `unit` (the service, e.g. frank-medium.service) every series also carries unit="<unit>", as the journal
    watch's do: two endpoints on one node-exporter stay apart, and the rules select their own."""
    u = ',unit="%s"' % _label(unit) if unit else ''
    lines = [
        "# HELP llm_plan_device_bytes Bytes dankfleet.llm.fit_plan planned on the device at the last gated deploy.",
        "# TYPE llm_plan_device_bytes gauge",
    ]
    devs = record.get("devices") or []
    for d in devs:
        if d.get("planned"):
            for k in KINDS:
                lines.append('llm_plan_device_bytes{device="%s",kind="%s"%s} %d' % (_label(d["device"]), k, u,
                                                                                    int(d["planned"].get(k, 0))))
    lines += ["# HELP llm_actual_device_bytes Bytes the endpoint held on the device after the gate's real request.",
              "# TYPE llm_actual_device_bytes gauge"]
    for d in devs:
        if d.get("measured_total") is not None:
            lines.append('llm_actual_device_bytes{device="%s"%s} %d' % (_label(d["device"]), u,
                                                                        int(d["measured_total"])))
    lines += ["# HELP llm_plan_device_bound_bytes The planner's own bound on the device total (actual vs plan).",
              "# TYPE llm_plan_device_bound_bytes gauge"]
    for d in devs:
        if d.get("bound") is not None:
            lines.append('llm_plan_device_bound_bytes{device="%s"%s} %d' % (_label(d["device"]), u, int(d["bound"])))
    lines += ["# HELP llm_plan_actual_timestamp_seconds When the last plan-vs-actual record was taken.",
              "# TYPE llm_plan_actual_timestamp_seconds gauge",
              "llm_plan_actual_timestamp_seconds%s %s" % ("{%s}" % u[1:] if u else "", record.get("timestamp", 0))]
    return "\n".join(lines) + "\n"


def check_textfile_name(name):
    """textfile_name as one plain file name inside textfile_dir, or PlanActualError (no '/', no '..')."""
    try:
        return check_name(name, "textfile_name", reserve=0)
    except FileRefused as exc:
        raise PlanActualError("%s; give a name like %s. Nothing was written" % (exc, TEXTFILE_NAME))


def write_textfile(directory, text, name=TEXTFILE_NAME):
    """Atomically (node-exporter must never read half a file); returns (path, changed)."""
    check_textfile_name(name)
    path = os.path.join(directory, name)
    with _open_dir(directory, "textfile_dir") as d:
        old = None
        st = d.lstat(name)
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise PlanActualError("%s is a directory where the textfile belongs: move it aside. Nothing was written"
                                  % path)
        if st is not None:
            try:
                old = d.read_text(name, "node-exporter textfile", RECORDS_MAX_BYTES)
            except FileRefused:
                old = None   # a link, FIFO, device or garbage there is replaced by the new file, never followed
        if old == text:
            return path, False
        try:
            d.write_atomic(name, text.encode("utf-8"))
        except FileRefused as exc:
            raise PlanActualError("%s. Nothing was written" % exc)
    return path, True


# ------------------------------------------------------------------------------------ the module's run

def _saved_output(path, what):
    """A saved tool output: a regular UTF-8 file (never a FIFO or a device), at most 16 MiB."""
    try:
        return read_text(path, 'saved nvidia-smi output')
    except (IOError, OSError) as exc:
        raise PlanActualError('%s %s is not readable: %s' % (what, path, getattr(exc, 'cause', None) or exc))


def _nvidia_smi(run_command, which, args):
    exe = which('nvidia-smi')
    if exe is None:
        return None, 'nvidia-smi not found on PATH'
    rc, out, err = run_command([exe] + args)
    if rc != 0:
        return None, 'nvidia-smi %s exited %d: %s' % (' '.join(args), rc, printable((err or out).strip(), limit=300))
    return out, None


def service_pid(run_command, service):
    """The MainPID of a running unit; a unit that is not running is refused (nothing to measure)."""
    rc, out, err = run_command(['systemctl', 'show', '--property=MainPID', '--value', service])
    try:
        if rc != 0:
            raise ShapeError('systemctl show', 'MainPID', 'rc %d' % rc)
        return int_text(out, 'systemctl show %s' % service, 1, PID_MAX)
    except ShapeError as exc:
        raise PlanActualError('service %s has no MainPID (%s; %s): the unit is not running; nothing to measure'
                              % (service, exc, printable(err.strip(), limit=300)))


def _output_tied(plan, backend, model_path, warnings):
    """Whether the model's output tensor is tied to its embeddings (the CPU fold counts it once)."""
    if not (plan and backend == 'cpu' and model_path and os.path.isfile(model_path)):
        return False
    from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_facts import gguf_facts
    try:
        return bool(gguf_facts(model_path).get('output_tied'))
    except Exception as exc:  # a header we cannot read: measure anyway, say the fold may be off
        warnings.append('could not read %s header (%s): assumed an untied output' % (model_path, exc))
        return False


def _nvidia_texts(p, names, run_command, which, warnings):
    """nvidia-smi's per-process and per-GPU tables: saved files where given, else the live tool (CUDA only)."""
    apps_text = gpus_text = None
    if p['backend'] == 'cuda' or any(n.startswith('CUDA') for n in names):
        if p['nvidia_smi_output_file']:
            apps_text = _saved_output(p['nvidia_smi_output_file'], 'nvidia_smi_output_file')
        else:
            apps_text, why = _nvidia_smi(run_command, which, NVIDIA_SMI_APPS_ARGS)
            if why:
                warnings.append(why)
        if p['nvidia_smi_gpus_file']:
            gpus_text = _saved_output(p['nvidia_smi_gpus_file'], 'nvidia_smi_gpus_file')
        elif not p['nvidia_smi_output_file']:
            gpus_text, why = _nvidia_smi(run_command, which, NVIDIA_SMI_GPUS_ARGS)
            if why:
                warnings.append(why)
    return apps_text, gpus_text


def _check_dirs(state_dir, textfile_dir):
    """Both directories exist and are safe to write, checked before either is written."""
    if not os.path.isdir(state_dir):
        raise PlanActualError('state_dir %s does not exist: run the llama_server role (it creates it) or pass the '
                              'service state directory' % state_dir)
    if textfile_dir and not os.path.isdir(textfile_dir):
        raise PlanActualError('textfile_dir %s does not exist: create it (node-exporter --collector.textfile.'
                              'directory), leave it empty for no textfile, or set textfile_dir_optional' % textfile_dir)
    check_dir(state_dir, 'state_dir')
    if textfile_dir:
        check_dir(textfile_dir, 'textfile_dir')


def _miss_warning(rows, record, text):
    for r in rows:
        if r['verdict'] in ('under', 'over'):
            return 'plan vs actual: %s %s by %.1f MiB, beyond the planner\'s bound of %.1f MiB (%s)\n%s' % (
                r['device'], 'underestimated' if r['verdict'] == 'under' else 'overestimated',
                abs(r['error_bytes']) / float(MIB), r['bound_bytes'] / float(MIB), record['bound']['source'], text)
    return None


def run(p, run_command, which, check_mode=False):
    """The module dankfleet.llm.plan_actual on its parameters ``p`` (its argument spec's names, defaults filled in).

    ``run_command(argv) -> (rc, out, err)`` and ``which(name) -> path or None`` reach the host (systemctl,
    nvidia-smi). Measures the process (``pid``, or the MainPID of ``service``) per device, compares it with the
    plan, and (unless ``check_mode`` or ``record`` is false) appends the record and writes the textfile.
    Returns ``(result, warnings)``: the module's result keys, and the warnings to show. Raises PlanActualError
    naming the cause (its ``changed`` says whether the record was appended before the failure).
    """
    check_textfile_name(p['textfile_name'])  # a name that climbs out of textfile_dir: refused before anything runs
    backend = p['backend']
    warnings = []
    try:    # inventory values this module indexes into: a pid the kernel could give, gpu_facts' names and addresses
        pid = service_pid(run_command, p['service']) if p['service'] else _PID.read(p['pid'], 'plan_actual', 'pid')
        gpus = _GPUS.read(p['gpus'] or [], 'plan_actual', 'gpus')
        workers = [dict(w, pid=_PID.read(w.get('pid'), 'plan_actual', 'workers[%d].pid' % i))
                   for i, w in enumerate(p['workers'] or [])]
    except ShapeError as exc:
        raise PlanActualError(str(exc))
    textfile_dir = p['textfile_dir']
    if textfile_dir and not os.path.isdir(textfile_dir) and p['textfile_dir_optional']:
        warnings.append('textfile_dir %s is not a directory: no node-exporter textfile written (install '
                        'prometheus-node-exporter, or set the directory its --collector.textfile.directory reads)'
                        % textfile_dir)
        textfile_dir = ''
    env = read_env_file(p['env_file'])
    model_path = env.get('MODEL_PATH', '')
    planned = planned_devices(p['plan'], backend, output_tied=_output_tied(p['plan'], backend, model_path, warnings))
    names = [n for n in planned if n != 'host']
    if not names and env.get('DEVICES'):
        names = [n.strip() for n in env['DEVICES'].split(',') if n.strip()]
    apps_text, gpus_text = _nvidia_texts(p, names, run_command, which, warnings)
    actual, mwarn = measure(p['sysfs_root'], backend, pid, names, workers=workers, gpus=gpus,
                            visible_devices=p['visible_devices'], compute_apps_text=apps_text,
                            gpu_uuids_text=gpus_text)
    warnings += mwarn
    rows = compare(backend, planned, actual)
    records_path = os.path.join(p['state_dir'], RECORD_FILE)
    load_records(records_path)          # a broken history is named before anything is written
    _check_dirs(p['state_dir'], textfile_dir)
    sha, sha_source = model_sha256(model_path, p['model_sha256'])
    record = make_record(backend, rows, release=env.get('LLAMA_RELEASE', ''), model_sha=sha,
                         model_path=model_path, shape=env_shape(env), plan=p['plan'])
    record['model_sha256_source'] = sha_source
    if p['verify']:
        record['verify'] = p['verify']
    changed = bool(p['record'])         # in check mode: what a real run would do
    count = textfile = None
    if p['record'] and not check_mode:
        count = append_record(records_path, record)
        if textfile_dir:
            try:
                textfile, _ = write_textfile(textfile_dir, render_textfile(record, p['service']), p['textfile_name'])
            except PlanActualError as exc:
                raise PlanActualError(str(exc), changed=True)
    elif textfile_dir:
        textfile = os.path.join(textfile_dir, p['textfile_name'])
    text = table(rows)
    miss = _miss_warning(rows, record, text)
    if miss:
        warnings.append(miss)
    result = dict(changed=changed, pid=pid, devices=rows, misses=record['misses'],
                  underestimated=[r['device'] for r in rows if r['verdict'] == 'under'], table=text,
                  bound=record['bound'], record=record, records_path=records_path, records=count, textfile=textfile)
    return result, warnings
