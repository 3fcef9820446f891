# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The plan as the operator reads it and the serve role takes it: ONE result (``llm_plan``), built here.

Plain Python (no Ansible import), unit-tested like fit_plan:

* ``fit_serve``: the ``serve`` dict fit_plan sizes, from the settled ``llama_server_*`` values (``[]`` / ``0`` /
  ``auto`` leave the split, the context, the cache-ram and n_cpu_moe to the planner) and the plan's floor and lean;
* ``inventory_names``: fit_plan's messages name its own ``serve.*`` fields; the operator edits inventory
  variables, so every published error and warning names those (``serve.ctx_size`` -> ``llama_server_ctx_size``,
  ``floor_bytes`` -> ``dankfleet_plan_floor_bytes``);
* ``plan_result``: the planned part of ``llm_plan`` -- the split, context, cache-ram and MoE blocks whose experts
  stay on the host (n_cpu_moe) to serve with, where each came from (``pinned`` by the inventory, ``planned`` by
  the planner), the fit, the capacity table;
* ``serve_shape``: the serve role's reading of that result -- refused when the plan has errors, does not fit,
  or was made for another split/context/cache-ram/n_cpu_moe than the role's own values; else the values the env
  file carries, with their origin.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import copy
import re

from ansible_collections.dankfleet.llm.plugins.module_utils.plan import fit_plan
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.settle import Problem
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.shape import DEFAULT_CACHE_RAM_MIB
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.shape import ctx_parallel_problem, int_like as _int_like
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.shape import origin as _origin, pinned as _pinned
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.shape import served, split_devices_problem

GIB = 1073741824

# fit_plan's serve field -> the variable the operator edits
INVENTORY_NAMES = {
    "backend": "llama_server_backend", "split_mode": "llama_server_split_mode",
    "tensor_split": "llama_server_tensor_split", "ctx_size": "llama_server_ctx_size",
    "parallel": "llama_server_parallel", "batch_size": "llama_server_batch_size",
    "ubatch_size": "llama_server_ubatch_size", "cache_type_k": "llama_server_cache_type_k",
    "cache_type_v": "llama_server_cache_type_v", "flash_attn": "llama_server_flash_attn",
    "spec_type": "llama_server_spec_type", "spec_draft_n_max": "llama_server_spec_draft_n_max",
    "draft_device": "llama_server_spec_draft_device", "cache_ram_mib": "llama_server_cache_ram",
    "floor_bytes": "dankfleet_plan_floor_bytes", "lean_layers": "dankfleet_plan_lean_layers",
    "n_cpu_moe": "llama_server_n_cpu_moe", "cpu_moe": "llama_server_cpu_moe", "load_mode": "llama_server_load_mode",
    "mmproj_device": "llama_server_mmproj_device", "mmproj_offload": "llama_server_mmproj_offload",
    "image_min_tokens": "llama_server_image_min_tokens", "image_max_tokens": "llama_server_image_max_tokens",
}
_SERVE_FIELD = re.compile(r"\bserve\.([a-z_]+)")
# a field named bare in a hint ("lower floor_bytes", "cache_type_k/v q8_0"), never part of a longer name
_BARE_FIELD = re.compile(r"(?<![\w.])(floor_bytes|lean_layers|cache_type_k/v|ctx_size|cache_ram_mib)(?![\w])")


def inventory_names(text):
    """fit_plan's text with every serve field it names replaced by the inventory variable the operator edits."""
    if not isinstance(text, str):
        return text

    def field(match):
        return INVENTORY_NAMES.get(match.group(1), match.group(0))

    def bare(match):
        name = match.group(1)
        if name == "cache_type_k/v":
            return "llama_server_cache_type_k/v"
        return INVENTORY_NAMES[name]

    return _BARE_FIELD.sub(bare, _SERVE_FIELD.sub(field, text))


def _share(value):
    """A tensor-split share as llama.cpp reads it: whole numbers as ints, the rest as floats."""
    number = float(value)
    return int(number) if number.is_integer() else number


def fit_serve(serve, floor_bytes=0, lean_layers=0):
    """fit_plan's serve dict from the settled llama_server_* values (dankfleet_settled.serve, llm_plan_serve)."""
    pinned = _pinned(serve)
    out = {
        "backend": serve.get("backend"),
        "split_mode": serve.get("split_mode") or "layer",
        "tensor_split": [_share(s) for s in serve["tensor_split"]] if pinned["tensor_split"] else "auto",
        "ctx_size": int(serve["ctx_size"]) if pinned["ctx_size"] else "max",
        "parallel": int(serve.get("parallel") or 1),
        "batch_size": int(serve.get("batch_size") or 2048),
        "ubatch_size": int(serve.get("ubatch_size") or 512),
        "cache_type_k": serve.get("cache_type_k") or "f16",
        "cache_type_v": serve.get("cache_type_v") or "f16",
        "flash_attn": serve.get("flash_attn", "on"),
        "spec_type": list(serve.get("spec_type") or []),
        "spec_draft_n_max": int(serve.get("spec_draft_n_max") or 3),
        "floor_bytes": int(floor_bytes or 0),
        "lean_layers": int(lean_layers or 0),
        "cache_ram_mib": serve.get("cache_ram", serve.get("cache_ram_mib", "auto")),
        # auto: with an auto split at ctx_size max the planner chooses it (fit_plan's n_cpu_moe_choice), else 0
        "n_cpu_moe": "auto" if str(serve.get("n_cpu_moe")) == "auto" else int(serve.get("n_cpu_moe") or 0),
        "cpu_moe": bool(serve.get("cpu_moe")),
        "load_mode": serve.get("load_mode") or "auto",
        # the projector: where it runs, and the image-token limits (0: the projector type's own)
        "mmproj_offload": serve.get("mmproj_offload") is not False,
        "image_min_tokens": int(serve.get("image_min_tokens") or 0),
        "image_max_tokens": int(serve.get("image_max_tokens") or 0),
    }
    if serve.get("spec_draft_device") not in (None, ""):
        out["draft_device"] = serve["spec_draft_device"]
    if serve.get("mmproj_device") not in (None, ""):
        out["mmproj_device"] = serve["mmproj_device"]
    if out["cache_ram_mib"] is None:
        out["cache_ram_mib"] = "auto"
    return out


def _gib(n):
    return "%.2f" % (n / float(GIB))


def plan_result(fit, serve, host="this host", reads="host"):
    """The planned part of llm_plan from fit_plan's result and the serve settings it sized (either shape).

    Returns {planned, fits, reads, fit (messages in inventory names), devices, floor_bytes, tensor_split,
    ctx_size, cache_ram, n_cpu_moe, origin, shape, capacity {fits, summary, lines}}: shape is the complete serve
    shape (shape.served) the serve role writes into the env file as it is."""
    fit = copy.deepcopy(fit or {})
    for key in ("errors", "warnings"):
        fit[key] = [inventory_names(m) for m in fit.get(key) or []]
    if isinstance(fit.get("drafter_unused"), str):
        fit["drafter_unused"] = inventory_names(fit["drafter_unused"])
    choice = fit.get("n_cpu_moe_choice") if isinstance(fit.get("n_cpu_moe_choice"), dict) else None
    if choice and isinstance(choice.get("reason"), str):
        choice["reason"] = inventory_names(choice["reason"])
    pinned = _pinned(serve)
    # fit_plan chooses n_cpu_moe only where it was left open (auto, or absent from its own serve shape)
    pinned["n_cpu_moe"] = pinned["n_cpu_moe"] and not choice
    devices = fit.get("devices") or []
    floor = int(fit.get("floor_bytes") or 0)
    fits = bool(fit.get("fits"))
    several = len(devices) > 1
    if several:
        split = ":".join(str(s) for s in fit.get("tensor_split") or [])
    else:
        split = "none - one %s" % (devices[0]["name"] if devices else "device")
    context = str(fit.get("ctx_size", "-"))
    parallel = int(fit.get("parallel") or 1)
    if parallel > 1:
        context += " (%d x %s)" % (parallel, fit.get("ctx_per_slot", "-"))
    if not fits:
        binding = "does not fit - " + "; ".join(fit["errors"])
    elif devices:
        tight = min(devices, key=lambda d: d["free_bytes"])
        binding = "%s: %s GiB free, %s GiB above the %s GiB floor" % (
            tight["name"], _gib(tight["free_bytes"]), _gib(tight["free_bytes"] - floor), _gib(floor))
    else:
        binding = "no device"
    cache_mib = fit.get("cache_ram_mib")
    backend = serve.get("backend", "?")
    lines = [
        "capacity of %s (%s profile, headers %s; profile %s)" % (
            host, backend, "recorded on the controller" if reads == "recorded" else "read on the host",
            fit_plan.PROFILE_ACCURACY.get(backend, "of unknown accuracy")),
        "split: %s%s" % (split, " (%s)" % (serve.get("split_mode") or "layer") if several else ""),
        "context: %s, cache-ram %s MiB" % (context, "-" if cache_mib is None else cache_mib),
    ]
    lines += ["card %s: %s layers, %s GiB free of %s GiB"
              % (d["name"], d.get("layers", "?"), _gib(d["free_bytes"]), _gib(d["vram_total_bytes"])) for d in devices]
    if several and all("layer_range" in d for d in devices):
        # issue 37: "36 layers, 28 layers" at -ts 35:30 reads wrong unless the output layer's slot is said
        blocks = sum(int(d.get("layers") or 0) for d in devices)
        lines.append("layers: -ts %s shares %d slots, the %d blocks then the output layer (one slot, on the last card): %s" % (
            split, blocks + 1, blocks, ", ".join("%s %s%s" % (
                d["name"], "blocks %d-%d" % tuple(d["layer_range"]) if d["layer_range"] else "no blocks",
                " + output" if d.get("holds_output") else "") for d in devices)))
    experts = fit.get("host_experts") or {}
    if experts.get("bytes"):
        setting = "llama_server_cpu_moe" if experts.get("cpu_moe") else "llama_server_n_cpu_moe %d%s" % (
            experts["n_cpu_moe"], ", chosen by the planner" if choice else "")
        lines.append("experts on the host: blocks %d-%d (%s), %s GiB %s (load mode %s)" % (
            experts["block_range"][0], experts["block_range"][1], setting, _gib(experts["bytes"]), experts["memory"],
            experts["load_mode"]))
    elif experts and not pinned["n_cpu_moe"]:
        # auto, and every expert stays on the GPUs: the planner's choice too
        lines.append("experts on the host: none (llama_server_n_cpu_moe 0, chosen by the planner)")
    vision = fit.get("mmproj")
    if isinstance(vision, dict) and vision.get("peak_bytes") is not None:
        # issue 34: where the projector is and what its largest image adds beyond the load
        image = ("images up to %s tokens (%sx%s px), the largest that keeps the floor %s tokens" % (
            vision.get("image_max_tokens"), vision.get("max_image_px"), vision.get("max_image_px"),
            vision.get("largest_image_tokens")) if vision.get("modelled") else "image tokens not modelled")
        lines.append("projector %s on %s: %s GiB at load, %s GiB at its peak (%s)" % (
            vision.get("projector_type") or "?", vision.get("device"), _gib(vision.get("load_bytes") or 0),
            _gib(vision["peak_bytes"]), image))
    lines.append("binding: " + binding)
    if pinned["tensor_split"]:
        tensor_split = [_share(s) for s in serve["tensor_split"]]
    else:
        tensor_split = [_share(s) for s in fit.get("tensor_split") or []] if several else []
    if pinned["ctx_size"]:
        ctx_size = int(serve["ctx_size"])
    else:
        ctx_size = int(fit.get("ctx_size") or 0)
    if pinned["cache_ram"]:
        cache_ram = int(serve.get("cache_ram", serve.get("cache_ram_mib")))
    else:
        cache_ram = "auto" if cache_mib is None else int(cache_mib)
    if choice:
        n_cpu_moe = int(choice["n_cpu_moe"])
    else:
        # pinned, or auto where the planner had nothing to choose (a pinned split or context, a dense model): 0
        n_cpu_moe = int(serve.get("n_cpu_moe")) if pinned["n_cpu_moe"] and _int_like(serve.get("n_cpu_moe")) else 0
    origin = dict((k, "pinned" if v else "planned") for k, v in pinned.items())
    return {
        "planned": True,
        "fits": fits,
        "reads": reads,
        "fit": fit,
        "devices": [d["name"] for d in devices],
        "floor_bytes": floor,
        "tensor_split": tensor_split,
        "ctx_size": ctx_size,
        "cache_ram": cache_ram,
        "n_cpu_moe": n_cpu_moe,
        "origin": origin,
        "shape": served(serve, {"tensor_split": tensor_split, "ctx_size": ctx_size, "cache_ram": cache_ram,
                                "n_cpu_moe": n_cpu_moe}, origin),
        "capacity": {
            "fits": fits,
            "summary": "%s: %s - split %s, context %s, binding %s" % (
                host, "fits" if fits else "DOES NOT FIT", split, context, binding),
            "lines": lines,
        },
    }


def _same(key, here, there):
    if key == "tensor_split":
        try:
            return [float(x) for x in here] == [float(x) for x in there or []]
        except (TypeError, ValueError):
            return False
    if key in ("ctx_size", "n_cpu_moe"):
        return _int_like(here) and _int_like(there) and int(here) == int(there)
    return str(here) == str(there)


def serve_shape(split, ctx_size, cache_ram, llm_plan, parallel=1, devices=None, n_cpu_moe=0):
    """The serve role's reading of llm_plan for its own llama_server_tensor_split / _ctx_size / _cache_ram /
    _n_cpu_moe.

    Returns (shape, problems): shape {tensor_split, ctx_size, cache_ram, n_cpu_moe, origin} is what the env file
    carries -- the plan's value where the inventory left it open, the pinned one where it set it, the configured
    one when no plan ran (origin open; an n_cpu_moe of auto is then 0, llama.cpp's own: every expert on the
    GPUs); problems lists why this plan cannot be served (errors, does not fit, made for another shape) and a
    shape llama.cpp would not run as given (a context that does not divide over the slots, a split with a share
    per device other than llama_server_devices)."""
    plan = llm_plan or {}
    fit = plan.get("fit") or {}
    problems = []
    here = {"tensor_split": split, "ctx_size": ctx_size, "cache_ram": cache_ram, "n_cpu_moe": n_cpu_moe}
    mine = _pinned(here)
    if fit:
        if fit.get("errors"):
            problems.append(Problem("llama_server_llm_plan", "the planner rejected this configuration: "
                                    + " | ".join(str(e) for e in fit["errors"])))
        elif not fit.get("fits"):
            problems.append(Problem("llama_server_llm_plan", "the planner says this does not fit (fits: false):\n"
                                    + str(fit.get("table") or "(no table)")))
    if plan:
        origin = plan.get("origin") or {}
        # a plan published before n_cpu_moe had an origin says nothing of it: it was made for the role's value
        keys = ("tensor_split", "ctx_size", "cache_ram") + (("n_cpu_moe",) if "n_cpu_moe" in origin else ())
        differ = [k for k in keys
                  if mine[k] != (origin.get(k) == "pinned") or (mine[k] and not _same(k, here[k], plan.get(k)))]
        if differ:
            problems.append(Problem(", ".join("llama_server_" + k for k in differ), (
                "The plan was not made for this shape: %s %s here, but the plan has %s (%s). Pass the serve role the "
                "same llama_server_* values the llm_plan role planned with (pinned to the same number, or [] / 0 / "
                "auto where the plan chose), or plan again with these. Nothing was changed.") % (
                ", ".join("llama_server_" + k for k in differ), " / ".join(str(here[k]) for k in differ),
                " / ".join(str(plan.get(k)) for k in differ), " / ".join(str(origin.get(k)) for k in differ))))
        shape = {
            "tensor_split": list(plan.get("tensor_split") or []),
            "ctx_size": int(plan["ctx_size"]) if _int_like(plan.get("ctx_size")) else 0,
            "n_cpu_moe": int(plan["n_cpu_moe"]) if "n_cpu_moe" in origin and _int_like(plan.get("n_cpu_moe")) else (
                int(n_cpu_moe) if mine["n_cpu_moe"] and _int_like(n_cpu_moe) else 0),
            "origin": dict(_origin(here), **origin) if origin else _origin(here),
        }
        planned_cache = plan.get("cache_ram")
        if planned_cache is not None and str(planned_cache) != "auto":
            shape["cache_ram"] = int(planned_cache)
        elif mine["cache_ram"] and _int_like(cache_ram):
            shape["cache_ram"] = int(cache_ram)
        else:
            shape["cache_ram"] = int(fit["cache_ram_mib"]) if fit.get("cache_ram_mib") is not None else DEFAULT_CACHE_RAM_MIB
    else:
        shape = {
            "tensor_split": list(split) if isinstance(split, (list, tuple)) else [],
            "ctx_size": int(ctx_size) if _int_like(ctx_size) else 0,
            "cache_ram": int(cache_ram) if mine["cache_ram"] and _int_like(cache_ram) else DEFAULT_CACHE_RAM_MIB,
            "n_cpu_moe": int(n_cpu_moe) if mine["n_cpu_moe"] and _int_like(n_cpu_moe) else 0,
            "origin": _origin(here),
        }
    # a value the inventory pinned is checked by the settle step itself (settle.serve_problems), by the same rule
    for key, problem in (("ctx_size", ctx_parallel_problem(shape["ctx_size"], parallel, planned=True)),
                         ("tensor_split", split_devices_problem(shape["tensor_split"], devices, planned=True))):
        if problem and not mine[key]:
            problems.append(Problem(*problem))
    return shape, problems


def plan_headers(plan, reads, recorded=None, on_host=None, read=None, skipped=False):
    """role -> the GGUF header facts fit_plan plans with. reads ``recorded``: the controller's records (role -> the
    parsed record, in ``plan['recorded_headers']``'s order) and what the manifest's urls gave (``plan['url_headers']``);
    else what the facts' one call read on the host (``on_host``) when the plan's own read was ``skipped``, else that
    read's loop results (``read``: the registered gguf_info loop over ``plan['payload_paths']``)."""
    if reads == "recorded":
        out = dict(recorded or {})
        out.update(plan.get("url_headers") or {})
        return out
    if skipped:
        return dict(on_host or {})
    return dict((r["item"]["key"], r) for r in (read or {}).get("results", []) if "item" in r)
