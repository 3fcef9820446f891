# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llama.cpp b11434's rules, written once: speculative types, flag spellings, device env names.

Plain Python, no Ansible import: fit_plan, serve_guard and the modules import it; unit tests
import it directly. Where a rule has to live on the host without this file (the env checker
``roles/llama_server/files/llama_env_check.py``, the launcher ``serve-llama-server.sh.j2``, the
role's ``vars/main.yml`` and ``meta/argument_specs.yml``), it is a stdlib copy and
``tests/unit/plugins/module_utils/test_llama_cpp_rules.py`` asserts every copy agrees with this one.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

RELEASE = "b11434"

# --spec-type names llama-server knows (common/speculative.cpp).
SPEC_TYPES = ("draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark",
              "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
# Drafters that load a model of their own (--spec-draft-model).
MODEL_DRAFT_TYPES = ("draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark")
# Drafters that draft with the target's own MTP (nextn) head (shares_model): never a --spec-draft-model.
SELF_DRAFT_TYPES = ("draft-mtp",)
# Drafters that build a draft context; a chain holds ONE, so a self drafter never chains with a model-backed one
# (MTP builds against whatever model that context holds and the load dies).
CONTEXT_DRAFT_TYPES = MODEL_DRAFT_TYPES + SELF_DRAFT_TYPES
# Block-diffusion drafters: at most block_size - 1 draft tokens per step.
BLOCK_DRAFT_TYPES = ("draft-dflash", "draft-dspark")
# n-gram lookups: no draft context, they ride beside either kind of drafter.
NGRAM_TYPES = tuple(t for t in SPEC_TYPES if t not in CONTEXT_DRAFT_TYPES)
# The one n-gram type with tuning flags (--spec-ngram-mod-n-match/-min/-max).
NGRAM_MOD_TYPE = "ngram-mod"

# The line each speculative implementation's constructor logs once at load (common/speculative.cpp).
SPEC_INIT_LINE = "adding speculative implementation '%s'"
# b11434 logs it at info (LOG_INF, seen at the default -lv 3) for the block-diffusion drafters only; every
# other type logs it at trace (SPC_TRC -> LOG_TRC), seen from --log-verbosity 4 up.
SPEC_INIT_INFO_TYPES = BLOCK_DRAFT_TYPES
LOG_VERBOSITY_DEFAULT = 3
LOG_VERBOSITY_TRACE = 4
# --spec-ngram-mod-n-match when none is given (common/common.h).
NGRAM_MOD_N_MATCH_DEFAULT = 24


def spec_init_logged(spec_type, verbosity):
    """Whether b11434 writes ``spec_type``'s SPEC_INIT_LINE at --log-verbosity ``verbosity``."""
    level = LOG_VERBOSITY_DEFAULT if spec_type in SPEC_INIT_INFO_TYPES else LOG_VERBOSITY_TRACE
    return int(verbosity) >= level


# --split-mode values (common/arg.cpp); fit_plan sizes "layer" only.
SPLIT_MODES = ("none", "layer", "row", "tensor")
# --flash-attn and --reasoning take on|off|auto.
ON_OFF_AUTO = ("on", "off", "auto")
# --load-mode values (common/arg.cpp), and how each holds the weights kept in host RAM (src/llama-model-loader.cpp
# use_mmap, src/llama-model.cpp load_tensors): auto is mmap unless a device cannot map (every CUDA/HIP device here
# can); mmap maps the file (page cache, reclaimable, read back on the next token); mmap+mlock maps and locks it;
# none, mlock and dio read the file into a host buffer -- the GPU backend's pinned host buffer type, which the system
# cannot reclaim (mlock locks it too).
LOAD_MODES = ("auto", "none", "mmap", "mlock", "mmap+mlock", "dio")
LOAD_MODE_MEMORY = {"auto": "mapped", "mmap": "mapped", "mmap+mlock": "locked",
                    "none": "pinned", "mlock": "pinned", "dio": "pinned"}

# Names HIP reads bare from the environment (2026-08-13 incident): never set them for the service;
# llama.cpp takes --host/--port/--temp as flags only.
HIP_BARE_ENV = ("TEMP", "HOST", "GPU_MAX_HEAP_SIZE")
# Environment that selects or re-numbers the devices a process sees, per backend. gpu_facts decides one
# visibility list per backend and the unit sets it; anything else would un-hide or re-number devices.
HIP_VISIBLE_ENV = "HIP_VISIBLE_DEVICES"
CUDA_VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"
DEVICE_ENV = {
    HIP_VISIBLE_ENV: "hip",
    "ROCR_VISIBLE_DEVICES": "hip",
    "GPU_DEVICE_ORDINAL": "hip",
    "HSA_VISIBLE_DEVICES": "hip",
    CUDA_VISIBLE_ENV: "cuda",
}
# CUDA numbers devices fastest-first unless this says PCI_BUS_ID: it re-numbers without hiding.
DEVICE_ORDER_ENV = "CUDA_DEVICE_ORDER"
# llama.cpp reads LLAMA_ARG_<FLAG> from the environment as if --flag were given.
ENV_ARG_PREFIX = "LLAMA_ARG_"


def _spelling_table(text):
    """{long form: (spelling, ...)} from a table whose lines read ``long-form  spelling spelling ...``."""
    rows = [line.split() for line in text.strip().splitlines()]
    return dict((row[0], tuple(row[1:])) for row in rows)


# Every spelling of the flags the role passes or guards (common/arg.cpp): the long form the launcher
# writes, then each spelling in arg.cpp's order. A flag missing here is a KeyError in spellings(): a typo
# cannot silently guard nothing.
FLAG_SPELLINGS = _spelling_table("""
--model                   -m --model
--alias                   -a --alias
--host                    --host
--port                    --port
--device                  -dev --device
--split-mode              -sm --split-mode
--tensor-split            -ts --tensor-split
--gpu-layers              -ngl --gpu-layers --n-gpu-layers
--fit                     -fit --fit
--flash-attn              -fa --flash-attn
--ctx-size                -c --ctx-size
--parallel                -np --parallel
--batch-size              -b --batch-size
--ubatch-size             -ub --ubatch-size
--threads                 -t --threads
--threads-batch           -tb --threads-batch
--cache-type-k            -ctk --cache-type-k
--cache-type-v            -ctv --cache-type-v
--ctx-checkpoints         --ctx-checkpoints --swa-checkpoints
--cache-ram               -cram --cache-ram
--temp                    --temp --temperature
--top-p                   --top-p
--top-k                   --top-k
--min-p                   --min-p
--presence-penalty        --presence-penalty
--reasoning               -rea --reasoning
--reasoning-format        --reasoning-format
--reasoning-budget        --reasoning-budget
--chat-template-file      --chat-template-file
--chat-template           --chat-template
--chat-template-kwargs    --chat-template-kwargs
--metrics                 --metrics
--spec-type               --spec-type
--spec-draft-model        --spec-draft-model -md --model-draft
--spec-draft-n-max        --spec-draft-n-max --draft-max --draft --draft-n
--spec-draft-ngl          --spec-draft-ngl -ngld --gpu-layers-draft --n-gpu-layers-draft
--spec-draft-device       --spec-draft-device -devd --device-draft
--spec-draft-type-k       --spec-draft-type-k -ctkd --cache-type-k-draft
--spec-draft-type-v       --spec-draft-type-v -ctvd --cache-type-v-draft
--spec-ngram-mod-n-match  --spec-ngram-mod-n-match
--spec-ngram-mod-n-min    --spec-ngram-mod-n-min
--spec-ngram-mod-n-max    --spec-ngram-mod-n-max
--mmproj                  -mm --mmproj
--no-mmproj               --no-mmproj
--mmproj-url              -mmu --mmproj-url
--mmproj-auto             --mmproj-auto
--no-mmproj-offload       --no-mmproj-offload
--mmproj-offload          --mmproj-offload
--mmproj-device           -mmdev --mmproj-device
--image-min-tokens        --image-min-tokens
--image-max-tokens        --image-max-tokens
--api-key                 --api-key
--api-key-file            --api-key-file
--rpc                     --rpc
--log-verbosity           -lv --verbosity --log-verbosity
--cpu-moe                 -cmoe --cpu-moe
--n-cpu-moe               -ncmoe --n-cpu-moe
--load-mode               -lm --load-mode
""")
# Flags that move weights, KV or compute to places fit_plan does not size: serve_guard refuses them.
_UNSIZED_PLACEMENT_SPELLINGS = _spelling_table("""
--override-tensor         -ot --override-tensor
--override-tensor-draft   -otd --override-tensor-draft
--main-gpu                -mg --main-gpu
--kv-unified              -kvu --kv-unified
--no-kv-unified           -no-kvu --no-kv-unified
--no-kv-offload           -nkvo --no-kv-offload
--cpu-moe-draft           -cmoed --cpu-moe-draft
--n-cpu-moe-draft         -ncmoed --n-cpu-moe-draft
--swa-full                --swa-full
--fit-target              -fitt --fit-target
--fit-ctx                 -fitc --fit-ctx
--ctx-size-draft          -cd --ctx-size-draft
""")
FLAG_SPELLINGS.update(_UNSIZED_PLACEMENT_SPELLINGS)
UNSIZED_PLACEMENT_FLAGS = tuple(_UNSIZED_PLACEMENT_SPELLINGS)


def spellings(*flags):
    """Every spelling of the given long flags, in table order."""
    return tuple(s for flag in flags for s in FLAG_SPELLINGS[flag])


def model_drafters(types):
    """The model-backed drafters of a --spec-type list, in its order."""
    return [t for t in types if t in MODEL_DRAFT_TYPES]


def unknown_spec_types(types):
    """The names of a --spec-type list that llama-server b11434 does not know, in its order."""
    return [t for t in types if t not in SPEC_TYPES]


def spec_chain_conflict(types):
    """(self drafter, model-backed drafter) when a chain holds both (it dies at load), else None."""
    own = [t for t in types if t in SELF_DRAFT_TYPES]
    backed = model_drafters(types)
    return (own[0], backed[0]) if own and backed else None
