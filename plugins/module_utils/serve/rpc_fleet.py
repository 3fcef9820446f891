# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""rpc_fleet: one llama-server over devices on several hosts (llama.cpp RPC), as plain Python.

* ``check_bind_address(addr)``: '' when ``ggml-rpc-server`` may listen there, else why not. It has no
  authentication (anyone who reaches the port can allocate memory and run graphs on the device), so it
  binds only to one private address: never 0.0.0.0/::, never a public one.
* ``rpc_endpoints(workers)``: the head's ``--rpc`` list, ``address:port`` per worker device, in inventory
  order (workers in group order, each worker's devices in its list order).
* ``rpc_devices(workers, local_gpus)``: the planner's device list in llama.cpp's order
  (src/llama.cpp ``llama_model_load_from_file_impl``: "add RPC servers at the front of the list"):
  ``RPC0..`` in ``--rpc`` order (ggml-rpc.cpp names them by a process-wide counter, one per device of
  each endpoint as registered), then the head's own GPUs as given. Each RPC device carries its host,
  endpoint and the worker's backend, so fit_plan charges the worker process's own overhead per backend.
* ``devices_seen(log)``: the devices llama-server says it uses (``using device RPC0 (ep) (id) - N MiB
  free``), for the gate.

A worker is a dict: ``{host, address, backend, devices: [{device, port}], gpus}``; ``gpus`` is
gpu_facts' result (or its ``gpus`` list) for GPU backends, or ``[{name: CPU, vram_total_bytes}]`` for a
CPU worker (its RAM).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import ipaddress
import re

from ansible_collections.dankfleet.llm.plugins.module_utils.base.strict_values import to_bool

# The role's default device list (roles/llama_rpc_worker/defaults/main.yml; a test keeps them equal).
DEFAULT_DEVICES = [{"device": "CPU", "port": 50052}]
BACKENDS = ("cpu", "cuda", "hip")
# common/speculative.cpp (b11434) before the drafter's own model load: "loading draft model '<path>'"
DRAFT_LOAD = "loading draft model"
USING_DEVICE = re.compile(r"using device (?P<name>\S+) \((?P<desc>[^)]*)\)(?: \((?P<id>[^)]*)\))? - (?P<free>\d+) MiB free")


class RpcFleetError(ValueError):
    """Bad fleet input: the message names the host/field and the fix."""


def check_bind_address(addr):
    """'' when addr is one private address ggml-rpc-server may bind to; otherwise the reason it may not."""
    text = str(addr or "").strip()
    if not text:
        return "no address: set dankfleet_private_address to this worker's address on the private network"
    try:
        ip = ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return ("%r is not an IP address: ggml-rpc-server binds to one address, given as an IP on the private "
                "network (a name could resolve to a public one)" % text)
    if ip.is_unspecified:
        return ("%s listens on every interface: ggml-rpc-server has no authentication, so it binds only to the "
                "worker's private address" % text)
    if ip.is_multicast or ip.is_reserved:
        return "%s is not a unicast host address" % text
    shared = ip.version == 4 and ip in ipaddress.ip_network("100.64.0.0/10")     # CGNAT / tailnets
    if not (ip.is_private or ip.is_loopback or shared) or ip.is_global:
        return ("%s is a public address: ggml-rpc-server has no authentication and must never be reachable from "
                "the internet; put the worker on a private network (10/8, 172.16/12, 192.168/16, fc00::/7, "
                "100.64/10) and bind there" % text)
    return ""


def _worker_devices(w):
    devs = w.get("devices")
    if devs is None:
        devs = DEFAULT_DEVICES
    if not isinstance(devs, (list, tuple)) or not devs:
        raise RpcFleetError("worker %s: llama_rpc_worker_devices must be a non-empty list of {device, port}"
                            % w.get("host"))
    out, ports = [], set()
    for i, d in enumerate(devs):
        if not isinstance(d, dict) or not d.get("device") or d.get("port") in (None, ""):
            raise RpcFleetError("worker %s: llama_rpc_worker_devices[%d] needs device (a llama.cpp device name: CPU, "
                                "CUDA0, ROCm1) and port, got %r" % (w.get("host"), i, d))
        try:
            port = int(d["port"])
        except (TypeError, ValueError):
            raise RpcFleetError("worker %s: llama_rpc_worker_devices[%d].port %r is not a port number"
                                % (w.get("host"), i, d["port"]))
        if not 1 <= port <= 65535 or port in ports:
            raise RpcFleetError("worker %s: llama_rpc_worker_devices[%d].port %d is out of range or used twice"
                                % (w.get("host"), i, port))
        ports.add(port)
        out.append({"device": str(d["device"]), "port": port})
    return out


def _address(w):
    addr = str(w.get("address") or "").strip()
    why = check_bind_address(addr)
    if why:
        raise RpcFleetError("worker %s: %s" % (w.get("host"), why))
    ip = ipaddress.ip_address(addr.strip("[]"))
    return "[%s]" % ip if ip.version == 6 else str(ip)


def workers_from_hostvars(hosts):
    """Worker dicts from hostvars (``groups['llm_rpc_workers'] | map('extract', hostvars)``)."""
    out = []
    for hv in hosts or []:
        if not hasattr(hv, "get"):
            raise RpcFleetError("expected the workers' hostvars (groups['llm_rpc_workers'] | map('extract', hostvars)), "
                                "got %r" % (hv,))
        facts = hv.get("ansible_facts") or {}
        gpus = hv.get("gpu_facts")
        backend = hv.get("llama_rpc_worker_backend") or "cpu"
        memtotal = facts.get("memtotal_mb") or hv.get("ansible_memtotal_mb")
        if backend == "cpu" and memtotal:
            gpus = [{"name": "CPU", "vram_total_bytes": int(memtotal) * 1024 * 1024}]
        out.append({"host": hv.get("inventory_hostname"), "address": hv.get("dankfleet_private_address"),
                    "devices": hv.get("llama_rpc_worker_devices"), "backend": backend, "gpus": gpus})
    return out


def worker_facts(host, found):
    """One worker's facts as ``workers_from_hostvars`` reads them, from its hostvars ``found``: its GPUs from its own
    published plan (``llm_plan.gpu_facts``) when it ran the llm_plan role, else its ``gpu_facts``."""
    facts = found.get("ansible_facts")
    plan = found.get("llm_plan")
    return {"inventory_hostname": host, "dankfleet_private_address": found.get("dankfleet_private_address"),
            "llama_rpc_worker_devices": found.get("llama_rpc_worker_devices"),
            "llama_rpc_worker_backend": found.get("llama_rpc_worker_backend", "cpu"),
            "ansible_facts": {"memtotal_mb": facts.get("memtotal_mb") if hasattr(facts, "get") else None},
            "gpu_facts": plan["gpu_facts"] if hasattr(plan, "get") and "gpu_facts" in plan else found.get("gpu_facts")}


def rpc_endpoints(workers):
    """The head's --rpc list: 'address:port' for every worker device, in inventory order."""
    eps = []
    for w in workers or []:
        addr = _address(w)
        for d in _worker_devices(w):
            eps.append("%s:%d" % (addr, d["port"]))
    if len(set(eps)) != len(eps):
        raise RpcFleetError("two worker devices share an endpoint (%s): give each device its own port"
                            % ", ".join(sorted(e for e in eps if eps.count(e) > 1)))
    return eps


def _facts_gpus(w):
    g = w.get("gpus")
    if isinstance(g, dict):
        g = g.get("gpus")
    if not isinstance(g, (list, tuple)) or not g:
        raise RpcFleetError("worker %s: no device facts (gpu_facts' result, or [{name: CPU, vram_total_bytes}] for a "
                            "CPU worker): gather facts on the worker before planning" % w.get("host"))
    return [x for x in g if isinstance(x, dict) and not any(
        to_bool(x[k], "worker %s: gpu %s.%s" % (w.get("host"), x.get("name"), k), RpcFleetError)
        for k in ("integrated", "hidden") if x.get(k) is not None)]


def _match(facts, device, host):
    """The worker's facts for one llama.cpp device name (CPU, CUDA0, ROCm1, Vulkan0)."""
    name = str(device)
    for x in facts:
        if name in (x.get("name"), x.get("device"), x.get("llama_device")):
            return x
    if name.upper() == "CPU" and len(facts) == 1:
        return facts[0]
    m = re.match(r"^[A-Za-z]+(\d+)$", name)
    if m and int(m.group(1)) < len(facts):
        return facts[int(m.group(1))]
    raise RpcFleetError("worker %s: device %s is not among its facts (%s)"
                        % (host, name, ", ".join(str(x.get("name")) for x in facts)))


def rpc_devices(workers, local_gpus=None):
    """fit_plan's gpus: RPC0.. in --rpc order (with host, endpoint, rpc_backend), then the head's own GPUs."""
    out, n = [], 0
    eps = rpc_endpoints(workers)
    for w in workers or []:
        backend = str(w.get("backend") or "cpu")
        if backend not in BACKENDS:
            raise RpcFleetError("worker %s: backend %r is not one of %s" % (w.get("host"), backend, ", ".join(BACKENDS)))
        facts = _facts_gpus(w)
        for d in _worker_devices(w):
            f = _match(facts, d["device"], w.get("host"))
            out.append({"name": "RPC%d" % n, "device": "RPC%d" % n, "host": str(w.get("host")), "endpoint": eps[n],
                        "worker_device": d["device"], "rpc_backend": backend,
                        "vram_total_bytes": int(f["vram_total_bytes"]),
                        "vram_reserved_bytes": int(f.get("vram_reserved_bytes") or 0)})
            n += 1
    if isinstance(local_gpus, dict):
        local_gpus = local_gpus.get("gpus")
    for g in local_gpus or []:
        out.append(dict(g))
    return out


def devices_seen(log):
    """[{name, endpoint, free_mib}] from llama-server's 'using device ...' lines (the last load's, in order).

    A model-backed drafter (``--spec-draft-model``) is loaded after the target and prints its own 'using device'
    lines (its ``--spec-draft-device``) after ``loading draft model``: those are the drafter's, never the target's,
    and never start a new load."""
    seen = []
    draft = None            # None: target lines; 'marker': the drafter is loading; 'lines': its device lines
    for line in str(log or "").splitlines():
        if DRAFT_LOAD in line:
            draft = "marker"
            continue
        m = USING_DEVICE.search(line)
        if draft is not None:
            if m:
                draft = "lines"
                continue
            if draft == "lines":
                draft = None    # the drafter's device lines ended
            continue
        if not m:
            continue
        if m.group("name") in [s["name"] for s in seen]:
            seen = []           # a new load: keep only the latest
        seen.append({"name": m.group("name"), "endpoint": m.group("desc"), "free_mib": int(m.group("free"))})
    return seen


def missing_devices(log, endpoints):
    """What the gate refuses: every --rpc endpoint must appear as a device with memory; '' when all do."""
    seen = devices_seen(log)
    problems = []
    for i, ep in enumerate(endpoints or []):
        hit = [s for s in seen if s["name"] == "RPC%d" % i]
        if not hit:
            problems.append("RPC%d (%s) is not among the devices llama-server uses" % (i, ep))
        elif hit[0]["endpoint"] != ep:
            problems.append("RPC%d is %s, expected %s" % (i, hit[0]["endpoint"], ep))
        elif hit[0]["free_mib"] <= 0:
            problems.append("RPC%d (%s) reports no free memory" % (i, ep))
    return "; ".join(problems)
