# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which llama_server_extra_args / llama_server_extra_env would shadow what the role plans or guards.

The launcher passes every planned and guarded setting as a flag (serve-llama-server.sh.j2) and
appends EXTRA_ARGS after them; llama.cpp takes the last occurrence of a flag, and reads
LLAMA_ARG_<FLAG> from the environment. So an extra ``--ctx-size`` or ``-ts`` silently replaces
what fit_plan sized and the preflight checked, and an extra ``HIP_VISIBLE_DEVICES`` un-hides an
integrated GPU. ``shadowed(extra_args, extra_env)`` names each such entry and the role variable
to set instead; an empty list means none.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import re

from ansible_collections.dankfleet.llm.plugins.module_utils.base import llama_cpp_rules as rules

# Each flag the launcher writes (long form; llama_cpp_rules.FLAG_SPELLINGS has every spelling) -> the variable to set.
_ROLE_FLAGS = (
    (("--model",), "llama_server_model_path"),
    (("--alias",), "llama_server_alias"),
    (("--host",), "llama_server_bind_address"),
    (("--port",), "llama_server_port"),
    (("--device",), "llama_server_devices"),
    (("--split-mode",), "llama_server_split_mode"),
    (("--tensor-split",), "llama_server_tensor_split (or leave it [] for the plan's split)"),
    (("--gpu-layers",), "llama_server_gpu_layers"),
    (("--fit",), "llama_server_fit"),
    (("--flash-attn",), "llama_server_flash_attn"),
    (("--ctx-size",), "llama_server_ctx_size (or leave it 0 for the plan's context)"),
    (("--parallel",), "llama_server_parallel"),
    (("--batch-size",), "llama_server_batch_size"),
    (("--ubatch-size",), "llama_server_ubatch_size"),
    (("--threads",), "llama_server_threads"),
    (("--threads-batch",), "llama_server_threads_batch"),
    (("--cache-type-k",), "llama_server_cache_type_k"),
    (("--cache-type-v",), "llama_server_cache_type_v"),
    (("--ctx-checkpoints",), "llama_server_ctx_checkpoints"),
    (("--cache-ram",), "llama_server_cache_ram"),
    (("--temp",), "llama_server_temperature"),
    (("--top-p",), "llama_server_top_p"),
    (("--top-k",), "llama_server_top_k"),
    (("--min-p",), "llama_server_min_p"),
    (("--presence-penalty",), "llama_server_presence_penalty"),
    (("--reasoning",), "llama_server_reasoning"),
    (("--reasoning-format",), "llama_server_reasoning_format"),
    (("--reasoning-budget",), "llama_server_reasoning_budget"),
    (("--chat-template-file", "--chat-template"), "llama_server_chat_template_file"),
    (("--chat-template-kwargs",), "llama_server_chat_template_kwargs"),
    (("--metrics",), "llama_server_metrics"),
    (("--spec-type",), "llama_server_spec_type"),
    (("--spec-draft-model",), "llama_server_drafter_path"),
    (("--spec-draft-n-max",), "llama_server_spec_draft_n_max"),
    (("--spec-draft-ngl",), "llama_server_spec_draft_ngl"),
    (("--spec-draft-device",), "llama_server_spec_draft_device"),
    (("--spec-draft-type-k",), "llama_server_spec_draft_cache_type_k"),
    (("--spec-draft-type-v",), "llama_server_spec_draft_cache_type_v"),
    (("--spec-ngram-mod-n-match",), "llama_server_spec_ngram_mod_n_match"),
    (("--spec-ngram-mod-n-min",), "llama_server_spec_ngram_mod_n_min"),
    (("--spec-ngram-mod-n-max",), "llama_server_spec_ngram_mod_n_max"),
    (("--mmproj", "--no-mmproj", "--mmproj-url", "--mmproj-auto"),
     "llama_server_vision and llama_server_mmproj_path"),
    # issue 34: where the projector runs and how large an image may be decide the peak the plan books
    (("--no-mmproj-offload", "--mmproj-offload"),
     "llama_server_mmproj_offload (the plan books the projector on the CPU or its device)"),
    (("--mmproj-device",), "llama_server_mmproj_device (the plan books the projector's peak on that device)"),
    (("--image-min-tokens",), "llama_server_image_min_tokens"),
    (("--image-max-tokens",), "llama_server_image_max_tokens (the plan books the largest image's peak)"),
    (("--api-key", "--api-key-file"), "llama_server_api_key"),
    (("--rpc",), "llama_server_rpc (derived from the llm_rpc_workers group; the plan sizes its devices)"),
    (("--log-verbosity",), "llama_server_log_verbosity"),
    (("--n-cpu-moe",), "llama_server_n_cpu_moe (the plan sizes the experts it keeps in host RAM)"),
    (("--cpu-moe",), "llama_server_cpu_moe (the plan sizes the experts it keeps in host RAM)"),
    (("--load-mode",), "llama_server_load_mode (the plan sizes the host RAM it maps or pins)"),
)
# Flags that move weights, KV or compute to places fit_plan does not size: no variable can set them.
_UNPLANNED_FLAGS = rules.spellings(*rules.UNSIZED_PLACEMENT_FLAGS)
# Environment the unit sets itself, or that re-numbers / un-hides devices behind gpu_facts' back.
_GUARDED_ENV = dict((name, "llama_server_hip_visible_devices (one visibility list, set by gpu_facts)")
                    for name, backend in rules.DEVICE_ENV.items() if backend == "hip")
_GUARDED_ENV.update({
    rules.HIP_VISIBLE_ENV: "llama_server_hip_visible_devices (gpu_facts' hip_visible_devices hides integrated GPUs)",
    rules.CUDA_VISIBLE_ENV: "llama_server_cuda_visible_devices (gpu_facts' cuda_visible_devices)",
    rules.DEVICE_ORDER_ENV: "nothing: gpu_facts and the plan number the devices in the order llama.cpp lists them",
    "XDG_CACHE_HOME": "nothing: the unit keeps the kernel cache under llama_server_state_dir",
    # common/arg.cpp: --mmproj-device's environment name has no LLAMA_ARG_ prefix
    "MTMD_BACKEND_DEVICE": "llama_server_mmproj_device (the plan books the projector's peak on that device)",
})

# -ot is how experts are usually kept on the CPU by hand: say which settings do that with a plan behind them
_OVERRIDE_FLAGS = rules.spellings("--override-tensor")
_EXPERT_HINT = ("; to keep a Mixture-of-Experts model's experts in host RAM set llama_server_n_cpu_moe (the first N "
                "blocks) or llama_server_cpu_moe (all), which the plan sizes")
FLAG_VARIABLE = dict((flag, var) for flags, var in _ROLE_FLAGS for flag in rules.spellings(*flags))
_ENV_PREFIX = rules.ENV_ARG_PREFIX
_FLAG_RE = re.compile(r"^(-{1,2}[A-Za-z][A-Za-z0-9-]*)(=.*)?$")


def _flag_of(arg):
    m = _FLAG_RE.match(arg.strip()) if isinstance(arg, str) else None
    return m.group(1) if m else None


def shadowed(extra_args=None, extra_env=None):
    """One message per extra arg or env name that would override a planned or guarded setting."""
    problems = []
    args = extra_args or []
    if isinstance(args, str):
        args = [args]
    for arg in args:
        flag = _flag_of(arg)
        if flag is None:
            continue
        if flag in FLAG_VARIABLE:
            problems.append("llama_server_extra_args has %s, which overrides the role's own %s (set by the plan or "
                            "checked by the preflight): set %s instead" % (arg, flag, FLAG_VARIABLE[flag]))
        elif flag in _UNPLANNED_FLAGS:
            problems.append("llama_server_extra_args has %s, which moves weights, KV or compute where fit_plan does "
                            "not size them: remove it (the plan and the preflight would no longer hold)%s"
                            % (arg, _EXPERT_HINT if flag in _OVERRIDE_FLAGS else ""))
    for name in sorted((extra_env or {}).keys(), key=str):
        if name in _GUARDED_ENV:
            problems.append("llama_server_extra_env sets %s, which the unit sets or gpu_facts decides: set %s instead"
                            % (name, _GUARDED_ENV[name]))
        elif isinstance(name, str) and name.startswith(_ENV_PREFIX):
            flag = "--" + name[len(_ENV_PREFIX):].lower().replace("_", "-")
            hint = FLAG_VARIABLE.get(flag)
            problems.append("llama_server_extra_env sets %s, which llama-server reads as %s: %s" % (
                name, flag, "set %s instead" % hint if hint else
                "pass flags through llama_server_extra_args, where the preflight can check them"))
    return problems
