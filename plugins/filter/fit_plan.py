# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r"""
name: fit_plan
short_description: Size a llama.cpp layer-split deployment (split, context, drafter, mmproj, cache-ram) before deploying it
version_added: 0.1.0
description:
  - Predicts what each GPU will hold under C(llama-server --split-mode layer) -- weights, KV cache, recurrent
    state, draft model or MTP head, mmproj, compute buffers -- and how much stays free, for one fixed
    C(--tensor-split) or for every candidate split, using the laws of llama.cpp b11434.
  - Layer to device follows C(src/llama-model.cpp) over the C(n_layer + 1) slots (blocks, then the output
    layer on the last device); the token embedding stays on the host. Integer splits summing to the block
    count, as the runbook writes them, put blocks C(0..a) on the first card for C(-ts a:b).
  - The context is padded to 256 and divided by C(parallel) (C(n_ctx_seq = n_ctx / parallel)). KV is held
    only by attention layers (sliding-window layers up to the window plus a ubatch), recurrent layers hold
    f32 state per sequence (times 1 + C(spec_draft_n_max) rollback rows when a model-backed drafter is on).
  - A drafter's context is sized from the B(target's) context (C(common/speculative.cpp)), so a drafter
    without a sliding window caches the whole window; C(draft-mtp) puts the nextn layer's weights, KV and
    draft buffers on the card holding the last layers.
  - Compute buffers come from per-backend constants kept in C(PROFILES) in C(plugins/module_utils/plan/fit_plan.py), each
    with its source and measured accuracy (C(PROFILE_ACCURACY), printed on the capacity table's first line) -
    C(hip) fitted to 38 rocm-smi loads of 2x R9700 (worst 0.62 GiB per card), C(cuda) measured on an NVIDIA H200
    against nvidia-smi (within max(1 %, 64 MiB) per card, up to 139 GiB), C(cpu) measured against 101 llama.cpp
    b11434 loads (within max(1 %, 64 MiB) per device).
  - Malformed input (missing fields, no GPU, a split whose length differs from the device count, an
    architecture whose layers cannot be sized, a NaN, infinite, negative or out-of-range number anywhere in the
    facts, a negative O(serve.ctx_size)) fails the task with a message naming the field. A plan that
    does not fit, or breaks a speculative-decoding or cache-ram rule, is returned with O(fits=false) and the
    reasons in RV(_value.errors).
positional: model, serve, drafter, mmproj, host_ram_bytes, names
options:
  _input:
    description:
      - The GPUs to split over, in C(--device) order. A list of dicts with C(name), C(vram_total_bytes) and
        optionally C(vram_reserved_bytes) (bytes not available to llama.cpp), or the result of
        M(dankfleet.llm.gpu_info) as is (a dict with C(gpus)). Integrated GPUs (C(integrated=true)) are left out.
      - C(narrowest_link_width) / C(narrowest_link_gbps) (from gpu_facts) are used only by O(serve.lean_layers).
      - C(host), C(endpoint) and C(rpc_backend) (from P(dankfleet.llm.rpc_devices#filter)) mark a device another host
        lends over llama.cpp RPC (C(RPC0), ... first, in C(--rpc) order); it is charged its ggml-rpc-server own
        overhead for that backend instead of the profile's device overhead, and the table names its host and blocks.
    type: raw
    required: true
  model:
    description:
      - The target model's facts, the result of M(dankfleet.llm.gguf_info).
      - A drafter's facts (C(is_drafter) -- a dflash/DSpark, eagle3 or gemma4-assistant file, or an MTP head alone)
        are refused by name; pass those as O(drafter).
    type: dict
    required: true
  serve:
    description: The llama-server configuration to size.
    type: dict
    required: true
    suboptions:
      backend:
        description: Compute-buffer profile.
        type: str
        choices: [hip, cuda, cpu]
        required: true
      ctx_size:
        description: C(--ctx-size), the whole pool (divided by O(serve.parallel)), or C(max) for the largest that fits.
        type: raw
        required: true
      split_mode:
        description: Only C(layer) is planned.
        type: str
        default: layer
      tensor_split:
        description: A list of one share per GPU (C(--tensor-split)), or C(auto) for the balanced split.
        type: raw
        default: auto
      parallel:
        description: C(--parallel), the number of slots.
        type: int
        default: 1
      batch_size:
        description: C(--batch-size).
        type: int
        default: 2048
      ubatch_size:
        description: C(--ubatch-size).
        type: int
        default: 512
      cache_type_k:
        description: C(--cache-type-k).
        type: str
        default: f16
      cache_type_v:
        description: C(--cache-type-v).
        type: str
        default: f16
      flash_attn:
        description: C(--flash-attn) C(on), C(off) or C(auto) (planned as on); otherwise a boolean by Ansible's
          rules (C(true)/C(false), C(yes)/C(no), C(1)/C(0)); anything else is refused by name.
        type: raw
        default: "on"
      kv_unified:
        description: C(--kv-unified). A string is read by Ansible's boolean rules (C("false") is false); anything
          that is not a boolean by them is refused by name.
        type: bool
        default: false
      spec_type:
        description: C(--spec-type) list, for example C([draft-dflash, ngram-mod]) or C([draft-mtp]).
        type: list
        elements: str
        default: []
      spec_draft_n_max:
        description: C(--spec-draft-n-max).
        type: int
        default: 3
      draft_device:
        description: C(--spec-draft-device) as an index, a llama.cpp device name (C(ROCm1)) or a GPU name.
          Unset, the drafter is split like the target.
        type: raw
      mmproj_device:
        description: C(--mmproj-device) -- the projector's device as an index, a llama.cpp device name or a GPU name
          (llama.cpp defaults to the first device); C(none) is O(serve.mmproj_offload=false).
        type: raw
      mmproj_offload:
        description: false is C(--no-mmproj-offload) -- the projector on the CPU, its weights and compute in C(host.mmproj_bytes)
          (b11434 encodes there slowly; the plan warns).
        type: bool
        default: true
      image_min_tokens:
        description: C(--image-min-tokens); 0 is the projector type's own (8 for Qwen-VL).
        type: int
        default: 0
      image_max_tokens:
        description: C(--image-max-tokens); 0 is the projector type's own (4096 for Qwen-VL). The projector is booked at the
          peak the largest image this admits reaches on its device (see RV(mmproj)).
        type: int
        default: 0
      floor_bytes:
        description: Bytes every card must keep free; C(auto) picks the balanced split that keeps it on every card.
        type: int
        default: 0
      max_gap_bytes:
        description: Optional second gate, the largest allowed difference between the cards' free bytes.
        type: int
      lean_layers:
        description:
          - Explicit lean (never a default) -- after balancing, move this many layers off the card whose
            C(narrowest_link_width) (then C(narrowest_link_gbps)) is smallest, onto its neighbour, as long as every
            card keeps O(serve.floor_bytes). The runbook's 34:31 -> 35:30 move off the Gen4 x1 card is C(lean_layers=1).
        type: int
        default: 0
      cache_ram_mib:
        description: C(--cache-ram) in MiB, or C(auto) for the smallest whole GiB that stores one full slot's
          state. Refused below one full slot or above half of O(host_ram_bytes).
        type: raw
      max_ctx_per_slot:
        description: Upper bound per slot for C(ctx_size=max); defaults to the model's trained context.
        type: int
      n_cpu_moe:
        description: C(--n-cpu-moe) -- the routed experts (C(ffn_*_exps)) of the first N blocks stay on the host; the
          GPU keeps the rest of each block and a reserve for the experts a batched prompt copies over. Planned only
          for a Mixture-of-Experts model; 0 keeps every expert on the GPUs. Unset (or C(auto)) with an auto split at
          C(ctx_size=max), the planner chooses it -- 0 when every expert on the GPUs reaches the per-slot cap, else the
          fewest blocks whose plan reaches it (C(n_cpu_moe_choice) says so); unset elsewhere, 0.
        type: raw
      cpu_moe:
        description: C(--cpu-moe) -- every block's routed experts stay on the host.
        type: bool
        default: false
      load_mode:
        description: C(--load-mode) -- how the host holds the experts kept there, C(auto)/C(mmap) (pages of the mapped
          file), C(mmap+mlock) (the same, locked) or C(none)/C(mlock)/C(dio) (read into a pinned host buffer the system
          cannot reclaim).
        type: str
        choices: [auto, none, mmap, mlock, mmap+mlock, dio]
        default: auto
  drafter:
    description: The draft model's facts (M(dankfleet.llm.gguf_info)), for C(draft-dflash), C(draft-dspark),
      C(draft-simple) or C(draft-eagle3). Given with a spec type that loads none, it is planned as present and
      unused (RV(drafter_unused)) and charged nothing.
    type: dict
  mmproj:
    description: The mmproj's facts (M(dankfleet.llm.gguf_info) of the projector GGUF).
    type: dict
  host_ram_bytes:
    description: The host's RAM, for the cache-ram limit (half of it) and, with experts on the host, for the RAM they
      take beside the process's buffers and the prompt cache (at least 4 GiB or a tenth of it stays the system's).
    type: int
  names:
    description:
      - How messages (a refusal, RV(_value.errors), RV(_value.warnings)) name a setting - V(serve) by this filter's
        own fields (C(serve.ctx_size)), V(inventory) by the variables an operator edits (C(llama_server_ctx_size),
        C(dankfleet_plan_floor_bytes)), as the C(dankfleet.llm.llm_plan) role plans.
    type: str
    choices: [serve, inventory]
    default: serve
author:
  - dankfleet engineers (@dankfleet)
"""

EXAMPLES = r"""
- name: Read the payload's headers
  dankfleet.llm.gguf_info:
    path: "{{ item }}"
  loop:
    - /models/target.gguf
    - /models/mmproj-f16.gguf
  register: __facts

- name: Plan 393216 tokens over two slots with the model's MTP head, balanced, 1 GiB floor
  ansible.builtin.set_fact:
    __plan: >-
      {{ __gpus | dankfleet.llm.fit_plan(
           model=__facts.results[0], mmproj=__facts.results[1],
           serve={'backend': 'hip', 'ctx_size': 393216, 'parallel': 2, 'batch_size': 6144, 'ubatch_size': 512,
                  'tensor_split': 'auto', 'spec_type': ['draft-mtp'], 'spec_draft_n_max': 3,
                  'floor_bytes': 1073741824, 'cache_ram_mib': 'auto'},
           host_ram_bytes=ansible_memtotal_mb * 1048576) }}

- name: Refuse a plan that does not fit
  ansible.builtin.assert:
    that: __plan.fits
    fail_msg: "{{ __plan.errors | join('; ') }}"

- name: Show the split table
  ansible.builtin.debug:
    msg: "{{ __plan.table.split('\n') }}"
"""

RETURN = r"""
_value:
  description: The plan.
  type: dict
  contains:
    fits:
      description: Every card keeps O(serve.floor_bytes) free and no rule is broken.
      type: bool
    tensor_split:
      description: The chosen C(--tensor-split) (integers summing to the block count when it was searched).
      type: list
      elements: raw
    ctx_size:
      description: The C(--ctx-size) llama.cpp will use after padding (chosen when O(serve.ctx_size=max)).
      type: int
    ctx_per_slot:
      description: C(n_ctx_seq), the context one slot gets.
      type: int
    devices:
      description: Per device -- C(name), C(layers), C(weights_bytes), C(kv_bytes), C(recurrent_bytes),
        C(draft_bytes), C(mmproj_bytes), C(compute_bytes), C(overhead_bytes), C(total_bytes), C(free_bytes),
        C(layer_range), C(holds_output), C(expert_weights_bytes) (of C(weights_bytes), the routed experts held
        there), C(expert_copy_bytes) (of C(compute_bytes), the reserve for experts copied over from the host),
        C(mmproj_peak_bytes) (of C(mmproj_bytes), what only an image request adds beyond the load), and
        C(draft_detail) (weights/kv/compute of the drafter or MTP head).
      type: list
      elements: dict
    gap_bytes:
      description: Largest minus smallest free bytes across the cards.
      type: int
    cache_ram_mib:
      description: The C(--cache-ram) to use (the given one, or the O(serve.cache_ram_mib=auto) result; null if not asked).
      type: int
    cache_ram:
      description: The state-size law behind it -- C(bytes_per_token) (KV + draft KV), C(slot_state_bytes)
        (one full slot, recurrent state included), C(auto_mib).
      type: dict
    warnings:
      description: Caveats, for example a slot context beyond the trained window (the rope caveat).
      type: list
      elements: str
    drafter_unused:
      description:
        - Why the O(drafter) given is present and unused (C(serve.spec_type) loads no draft model, for example
          C(draft-mtp) with the DFlash2 sidecar kept on disk); nothing is charged for it. C(null) when it is used or none was given.
      type: str
    errors:
      description: Why the plan does not fit or is not allowed; each names the field and the fix.
      type: list
      elements: str
    table:
      description: Text table, one row per candidate split -- C(-ts | ROCm0 free | ROCm1 free | gap | fits), each device by its llama.cpp name; with devices on
        other hosts, then one line per device saying which host holds which blocks at the chosen split.
      type: str
    candidates:
      description: Every split evaluated, with free bytes per card and gap.
      type: list
      elements: dict
    host_experts:
      description: For a Mixture-of-Experts model, the experts kept on the host (O(serve.n_cpu_moe), O(serve.cpu_moe))
        -- C(blocks), C(block_range), C(bytes) (also in C(host.weights_bytes)), C(load_mode), C(memory) (C(mapped),
        C(locked) or C(pinned)), C(pinned_bytes), C(mapped_gap_bytes) (a mapped load maps one file range from the
        token embedding to the last offloaded expert -- the tensors between count, also in C(host.weights_bytes)),
        C(n_cpu_moe), C(cpu_moe); null for a dense model.
      type: dict
    n_cpu_moe_choice:
      description: When O(serve.n_cpu_moe) was left open with an auto split at C(ctx_size=max) and the planner kept
        some blocks' experts on the host -- C(n_cpu_moe) (the blocks it chose) and C(reason) (also in C(warnings));
        null when it chose none or the inventory set it.
    mmproj:
      description:
        - The projector (O(mmproj)) at the peak a request can reach (tools/mtmd b11434) -- C(device) (a GPU's name, or
          C(CPU) with O(serve.mmproj_offload=false)), C(offload), C(projector_type), C(modelled) (false for a type whose
          image tokens are not modelled), C(weights_bytes), C(reserve_bytes) (clip's compute reserved at load for its
          warm-up image), C(load_bytes), C(first_use_bytes) (the backend context the first image adds),
          C(request_bytes) (all an image of C(image_max_tokens) adds beyond the load), C(peak_bytes) (what the plan
          books), C(image_min_tokens), C(image_max_tokens), C(warmup_tokens), C(max_image_px) (the side of the largest
          square image admitted), C(largest_image_tokens) / C(largest_image_px) (the largest image that keeps the floor
          on its device), C(patch_size), C(spatial_merge_size).
        - null without a projector.
      type: dict
"""

from ansible.errors import AnsibleFilterError

try:
    from ansible_collections.dankfleet.llm.plugins.module_utils.plan.fit_plan import FitPlanError, plan
    from ansible_collections.dankfleet.llm.plugins.module_utils.plan.plan_result import inventory_names
except ImportError:  # pragma: no cover - only when the collection is not on the path
    FitPlanError = plan = inventory_names = None


def fit_plan(gpus, model=None, serve=None, drafter=None, mmproj=None, host_ram_bytes=None, names="serve"):
    if plan is None:
        raise AnsibleFilterError("dankfleet.llm.fit_plan: plugins/module_utils/plan/fit_plan.py could not be imported")
    if model is None:
        raise AnsibleFilterError("dankfleet.llm.fit_plan: model= is missing (the result of dankfleet.llm.gguf_info)")
    if serve is None:
        raise AnsibleFilterError("dankfleet.llm.fit_plan: serve= is missing (backend, ctx_size, parallel, ...)")
    if names not in ("serve", "inventory"):
        raise AnsibleFilterError("dankfleet.llm.fit_plan: names is serve or inventory, got %r" % (names,))
    rename = inventory_names if names == "inventory" else (lambda text: text)
    try:
        result = plan(gpus, model, serve, drafter=drafter, mmproj=mmproj, host_ram_bytes=host_ram_bytes)
    except FitPlanError as exc:
        raise AnsibleFilterError("dankfleet.llm.fit_plan: %s" % rename(str(exc)))
    except (TypeError, ValueError, KeyError, AttributeError, ZeroDivisionError, OverflowError, IndexError,
            RecursionError) as exc:
        raise AnsibleFilterError("dankfleet.llm.fit_plan: malformed input (%s: %s); pass gpu_facts/gguf_info results "
                                 "and a serve dict as documented (ansible-doc -t filter dankfleet.llm.fit_plan)"
                                 % (type(exc).__name__, exc))
    for key in ("errors", "warnings"):
        result[key] = [rename(m) for m in result[key]]
    return result


class FilterModule(object):
    def filters(self):
        return {"fit_plan": fit_plan}
