#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r"""
module: gguf_info
short_description: Read a GGUF file's header and derive the facts a deployment is sized from
version_added: 0.1.0
description:
  - Parses the GGUF header, key/value metadata and tensor table on the target host (stdlib only) without
    reading tensor data, and derives what C(dankfleet.llm.fit_plan) needs -- architecture, block count,
    trained context, per-layer kind and KV geometry, recurrent state dimensions, per-layer tensor bytes,
    output and token-embedding bytes, drafter keys, mmproj detection.
  - Layer kinds follow llama.cpp b11434 -- C(attention), C(swa) (sliding window), C(recurrent) (DeltaNet,
    SSM, RWKV), C(nextn) (the last C(nextn_predict_layers) blocks, the MTP head), C(ffn).
  - A truncated file, a file that is not GGUF, or an unsupported GGUF version fails with a message naming
    the file and the problem.
  - The file is read as a hostile one would be written. Only a regular file is opened (a FIFO, a device or a
    directory is refused from its C(fstat), opened C(O_NONBLOCK), so nothing blocks); every count and length
    in the header is bounded by the bytes the rest of the file can hold and by sane maxima before anything is
    allocated; a C(block_count) above C(LLAMA_MAX_LAYERS) (512), a wrong-typed sizing key (a string where an
    integer belongs, an array where a string belongs), and a negative, NaN or infinite value fail naming the key,
    its GGUF type and what was expected.
  - A file llama.cpp b11434 refuses is refused, for the same cause -- every check of its GGUF reader
    (C(ggml/src/gguf.cpp)), in its order, and the two its model loader adds (a tensor name given twice, tensor
    data past the end of the file) -- tensor data offsets that are not the running padded sum (out of order,
    overlapping, a gap), a quantized row that is not a whole number of blocks, a big-endian file (llama.cpp on a
    little-endian host refuses it), an unknown or removed ggml type, a data section whose padding runs past the
    end. The test suite checks this file by file against b11434's own reader (C(tests/lab/gguf_check.c)).
  - A per-layer array (C(head_count), C(head_count_kv), C(feed_forward_length), C(recurrent_layers)) of another
    length than C(block_count), and a C(full_attention_interval) of 0, are refused as llama.cpp refuses them --
    never padded, cut or replaced by a default.
  - Never changes anything; safe in check mode.
extends_documentation_fragment:
  - dankfleet.llm.attributes
  - dankfleet.llm.attributes.platform
  - dankfleet.llm.attributes.info_module
options:
  path:
    description:
      - The GGUF file (model, draft model or mmproj) on the target host.
      - One of O(path), O(paths), O(url) and O(urls) is required.
    type: path
  url:
    description:
      - An C(http://) or C(https://) URL of a GGUF file (a manifest's C(url)) whose header is read with HTTP Range
        requests -- plan a model before it is downloaded. Returns the same keys as O(path) would for the file
        (C(path) is then the URL without credentials or query), plus RV(url), RV(bytes_fetched) and RV(requests).
      - Only the header and the tensor table are read, never the tensor data -- ranges from 1 MiB, doubling while the
        parser needs more, never past 256 MiB (the reader's header limit) or 64 requests.
      - Through the collection's one HTTP client, with M(dankfleet.llm.gguf_fetch)'s rules -- a deadline of O(timeout) seconds
        per request, proxies from the environment, redirects only to http(s) and never https to http, to a
        link-local address or from a public host to a private one, no credentials in the URL.
      - A server that ignores Range (200 with the whole body), answers a Content-Range other than the bytes asked
        (or with another length, or a size that changes between answers) or an encoded body is refused by name;
        what O(path) refuses of the file, O(url) refuses for the same cause.
    type: str
  urls:
    description:
      - Several GGUF URLs in one call, a name (for example the payload role) mapped to each URL, each read as O(url)
        reads one; the result is RV(files), keyed the same way, each entry what O(url) returns or C(url) and
        C(error) (the message O(url) would fail with) -- nothing here fails the task, as with O(paths).
    type: dict
  token:
    description:
      - "With O(url) or O(urls), a bearer token for gated repositories, sent as C(Authorization: Bearer <token>) only to the
        origin of O(url) (as M(dankfleet.llm.gguf_fetch) sends it). Never logged; one with surrounding whitespace
        or a control character is refused unshown."
    type: str
  timeout:
    description: With O(url) or O(urls), the seconds each Range request may take, connect to the last byte.
    type: float
    default: 30.0
  validate_certs:
    description: With O(url) or O(urls), verify the server's TLS certificate.
    type: bool
    default: true
  header_only:
    description:
      - The file given by O(path) or O(paths) may end after its tensor table (a header cut from a model, for example
        C(head -c) of a download, or the first bytes of a partial one) -- tensor data past the end of the file is then
        not refused; everything up to the end of the tensor table is still checked. RV(file_size) is then the bytes
        on disk.
    type: bool
    default: false
  paths:
    description:
      - Several GGUF files in one call, a name (for example the payload role - V(target), V(drafter), V(mmproj))
        mapped to each path; the result is RV(files), keyed the same way.
      - Unlike O(path), nothing here fails the task -- a missing file is reported C(exists=false), one that cannot
        be read C(error) (the message O(path) would fail with) -- so one read-only call tells a plan which files are
        there and holds the headers of those that are; the caller decides what a missing or bad file means.
      - The paths are taken as they are (no C(~) expansion); give absolute ones.
    type: dict
  tensors:
    description: Also return the whole tensor table (name, shape, type, offset, nbytes) -- large for big models.
    type: bool
    default: false
attributes:
  platform:
    platforms: posix
author:
  - dankfleet engineers (@dankfleet)
"""

EXAMPLES = r"""
- name: Read the drafter's header before sizing a spec-decode deployment
  dankfleet.llm.gguf_info:
    path: /srv/models/Qwen3.8-27B-DSpark-GGUF/Qwen3.8-27B-DSpark-Q8_0.gguf
  register: __drafter

- name: Plan a model before downloading it -- its header from the manifest's url
  dankfleet.llm.gguf_info:
    url: https://huggingface.co/unsloth/Qwen3-30B-A3B-GGUF/resolve/main/Qwen3-30B-A3B-Q4_K_M.gguf
    token: "{{ hf_token | default(omit) }}"
  register: __target

- name: A drafter without a sliding window caches the whole target window
  ansible.builtin.debug:
    msg: "sliding_window={{ __drafter.sliding_window }} block_size={{ __drafter.block_size }}"
"""

RETURN = r"""
files:
  description:
    - With O(urls), each name mapped to what O(url) returns, or C(url) and C(error).
    - With O(paths), each name mapped to C(path), C(exists) (something is at the path - a symbolic link loop is
      there and unreadable, never absent) and either every key below (the file was read) or C(error) (why it could
      not be; absent files have neither).
  returned: when O(paths) or O(urls) is given (then alone - every other key below is in each of its entries instead)
  type: dict
  sample: {"target": {"path": "/var/lib/dankfleet/models/m/m.gguf", "exists": true, "architecture": "qwen35"},
           "drafter": {"path": "/var/lib/dankfleet/models/d/d.gguf", "exists": false}}
path:
  description: The file read.
  returned: when O(path) or O(url) is given
  type: str
file_size:
  description: Bytes on disk.
  returned: when O(path) or O(url) is given
  type: int
gguf_version:
  description: GGUF format version (2 or 3).
  returned: when O(path) or O(url) is given
  type: int
endian:
  description: Byte order of the file, C(little) (a big-endian file is refused on a little-endian host).
  returned: when O(path) or O(url) is given
  type: str
alignment:
  description: C(general.alignment), the padding of the tensor data (32 unless set).
  returned: when O(path) or O(url) is given
  type: int
metadata_count:
  description: Number of metadata keys.
  returned: when O(path) or O(url) is given
  type: int
name:
  description: C(general.name); null when unset.
  returned: when O(path) or O(url) is given
  type: str
file_type:
  description: C(general.file_type), llama.cpp's number for the weights' quantization; null when unset.
  returned: when O(path) or O(url) is given
  type: int
tensor_data_offset:
  description: Where tensor data starts (header and metadata size, padded to the alignment).
  returned: when O(path) or O(url) is given
  type: int
tensor_count:
  description: Number of tensors.
  returned: when O(path) or O(url) is given
  type: int
tensor_bytes_total:
  description: Sum of all tensors' bytes, computed from ggml type block sizes.
  returned: when O(path) or O(url) is given
  type: int
tensor_types:
  description: Count of tensors per ggml type.
  returned: when O(path) or O(url) is given
  type: dict
architecture:
  description: C(general.architecture).
  returned: when O(path) or O(url) is given
  type: str
architecture_supported:
  description: Whether the layer kinds of this architecture are derived (fit_plan refuses the others).
  returned: when O(path) or O(url) is given
  type: bool
is_drafter:
  description: Whether the file is a drafter, not a model llama-server serves -- a C(dflash) (DFlash, DFlash2,
    DSpark), C(eagle3) or C(gemma4-assistant) architecture, or an MTP head alone (C(nextn_predict_layers) and no
    trunk block). C(dankfleet.llm.fit_plan) refuses one given as the model.
  returned: when not an mmproj
  type: bool
drafter_reason:
  description: Why the file is a drafter (null for a model).
  returned: when not an mmproj
  type: str
is_mmproj:
  description: The file is a multimodal projector (C(clip) architecture).
  returned: when O(path) or O(url) is given
  type: bool
mmproj:
  description: For an mmproj -- C(projector_type), C(has_vision_encoder), C(has_audio_encoder), C(bytes), C(image_size),
    C(embedding_length), C(projection_dim), C(patch_size), C(spatial_merge_size), C(block_count), C(feed_forward_length),
    C(head_count) (the vision encoder's C(clip.vision.*) keys; null where the file has none).
  returned: when O(path) or O(url) is given
  type: dict
mmproj_bytes:
  description: Tensor bytes of an mmproj (0 otherwise).
  returned: when O(path) or O(url) is given
  type: int
block_count:
  description: C(<arch>.block_count), nextn blocks included.
  returned: when not an mmproj
  type: int
nextn_predict_layers:
  description: Number of trailing MTP/NextN blocks.
  returned: when not an mmproj
  type: int
n_layer:
  description: Trunk layers (block_count - nextn_predict_layers).
  returned: when not an mmproj
  type: int
context_length:
  description: The trained context (C(<arch>.context_length)).
  returned: when not an mmproj
  type: int
embedding_length:
  description: C(n_embd).
  returned: when not an mmproj
  type: int
feed_forward_length:
  description: The largest C(<arch>.feed_forward_length) (the widest layer's); null when unset.
  returned: when not an mmproj
  type: int
head_count:
  description: C(<arch>.attention.head_count) (of the first layer when per layer).
  returned: when not an mmproj
  type: int
head_count_kv:
  description: C(<arch>.attention.head_count_kv) as written (a per-layer list stays a list); the head count when unset.
  returned: when not an mmproj
  type: raw
key_length:
  description: Dimension of K per head (C(attention.key_length), else the embedding length over the heads).
  returned: when not an mmproj
  type: int
value_length:
  description: Dimension of V per head (C(attention.value_length), else as for K).
  returned: when not an mmproj
  type: int
key_length_swa:
  description: Dimension of K per head of the sliding-window layers (C(attention.key_length_swa), else RV(key_length)).
  returned: when not an mmproj
  type: int
value_length_swa:
  description: Dimension of V per head of the sliding-window layers (C(attention.value_length_swa), else RV(value_length)).
  returned: when not an mmproj
  type: int
swa_type:
  description: The sliding-window kind llama.cpp applies, C(none), C(standard) or C(chunked).
  returned: when not an mmproj
  type: str
full_attention_interval:
  description: C(<arch>.full_attention_interval) (every n-th layer is full attention); null when unset.
  returned: when not an mmproj
  type: int
rs_rollback:
  description: Whether llama.cpp keeps rollback copies of the recurrent state for this architecture (speculation).
  returned: when not an mmproj
  type: bool
rope:
  description: C(freq_base), C(dimension_count), C(dimension_sections), C(scaling_type), C(scaling_factor) and
    C(scaling_original_context_length) of C(<arch>.rope.*); null where unset.
  returned: when not an mmproj
  type: dict
output_tied:
  description: True when there is no C(output.weight) and the token embedding serves as the output.
  returned: when not an mmproj
  type: bool
is_moe:
  description: Whether the model is a Mixture-of-Experts (C(<arch>.expert_count) > 0 or routed expert tensors).
  returned: when not an mmproj
  type: bool
expert_count:
  description: C(<arch>.expert_count), 0 for a dense model.
  returned: when not an mmproj
  type: int
expert_used_count:
  description: C(<arch>.expert_used_count), the experts each token is routed to; 0 for a dense model.
  returned: when not an mmproj
  type: int
expert_shared_count:
  description: C(<arch>.expert_shared_count) where the file has it; null otherwise.
  returned: when not an mmproj
  type: int
expert_feed_forward_length:
  description: The routed experts' FFN width the graph uses (read off C(ffn_up_exps)/C(ffn_down_exps); the
    C(<arch>.expert_feed_forward_length) key where a block has none), not C(feed_forward_length); null if dense.
  returned: when not an mmproj
  type: int
expert_shared_feed_forward_length:
  description: The shared expert's FFN width (C(ffn_*_shexp)) where the model has one; null otherwise.
  returned: when not an mmproj
  type: int
expert_layers:
  description: Blocks holding routed expert tensors.
  returned: when not an mmproj
  type: int
expert_bytes_total:
  description: Bytes of every routed expert tensor (C(ffn_*_exps)) of the file.
  returned: when not an mmproj
  type: int
moe_planned:
  description: Whether C(dankfleet.llm.fit_plan) models this architecture's experts; a Mixture-of-Experts model with
    false is refused for planning by name, never planned as dense. Null for a dense model.
  returned: when not an mmproj
  type: bool
vocab_size:
  description: Tokenizer size.
  returned: when not an mmproj
  type: int
layers:
  description: Per layer -- C(index), C(kind), C(n_head), C(n_head_kv), C(key_length), C(value_length), C(n_ff),
    C(kv_bytes_per_token_f16), C(tensor_bytes); and for Mixture-of-Experts C(expert_bytes) (the routed expert
    tensors C(ffn_*_exps), what C(--n-cpu-moe) moves to the host), C(non_expert_bytes) (the rest of the block),
    C(expert_tensor_bytes_max) (its largest expert tensor), C(n_ff_exp) and C(n_ff_shexp) (expert and shared-expert
    FFN widths, read off the tensors); 0 on a dense layer; C(expert_span), the file range [first byte, end) of
    its routed expert tensors (what a mapped CPU buffer spans), null on a dense layer.
  returned: when O(path) or O(url) is given
  type: list
  elements: dict
layer_kinds:
  description: The C(kind) of every layer, in order.
  returned: when O(path) or O(url) is given
  type: list
  elements: str
layer_counts:
  description: Number of layers of each kind.
  returned: when not an mmproj
  type: dict
ssm:
  description: C(conv_kernel), C(inner_size), C(state_size), C(group_count), C(time_step_rank).
  returned: when not an mmproj
  type: dict
recurrent_state:
  description: C(r_floats), C(s_floats) and C(bytes_per_layer_per_seq) (f32) of one recurrent layer.
  returned: when not an mmproj
  type: dict
sliding_window:
  description: The attention window (null if none).
  returned: when not an mmproj
  type: int
token_embd_bytes:
  description: Bytes of the token embedding (kept on the host by llama.cpp).
  returned: when not an mmproj
  type: int
input_span:
  description: The file range [first byte, end) of the input tensors (the token embedding). With experts on the host,
    llama.cpp maps one range from the first to the last byte of the tensors kept on the CPU, whatever lies between.
  returned: when not an mmproj
  type: list
  elements: int
output_bytes:
  description: Bytes placed on the output device (output.weight, or the duplicated token_embd when tied, norms,
    drafter heads).
  returned: when not an mmproj
  type: int
drafter:
  description: For a dflash/dspark drafter -- C(kind), C(block_size), C(selector_rank), C(selector_top_k),
    C(mask_token_id), C(target_layers), C(markov_head); null for other models.
  returned: when not an mmproj
  type: dict
block_size:
  description: A block drafter's C(dflash.block_size).
  returned: when not an mmproj
  type: int
selector_top_k:
  description: DFlash2's candidate selector top-k (0 without a selector).
  returned: when not an mmproj
  type: int
mask_token_id:
  description: C(tokenizer.ggml.mask_token_id).
  returned: when not an mmproj
  type: int
metadata:
  description: Every key/value pair; arrays longer than 64 elements are summarised as type and length.
  returned: when O(path) or O(url) is given
  type: dict
url:
  description: The URL read, without credentials or query.
  returned: when O(url) is given
  type: str
bytes_fetched:
  description: Bytes received to read the header (the header and the tensor table, rounded up to the last range).
  returned: when O(url) is given
  type: int
requests:
  description: Range requests made.
  returned: when O(url) is given
  type: int
tensors:
  description: The tensor table, when O(tensors=true).
  returned: when requested
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_reader import GGUFError
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_facts import gguf_facts, gguf_files
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_remote import gguf_url_facts, gguf_url_files
from ansible_collections.dankfleet.llm.plugins.module_utils.base.http_client import redact, url_credentials


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path"),
            paths=dict(type="dict"),
            url=dict(type="str"),
            urls=dict(type="dict"),
            token=dict(type="str", no_log=True),
            timeout=dict(type="float", default=30.0),
            validate_certs=dict(type="bool", default=True),
            header_only=dict(type="bool", default=False),
            tensors=dict(type="bool", default=False),
        ),
        mutually_exclusive=[("path", "paths", "url", "urls")],
        required_one_of=[("path", "paths", "url", "urls")],
        supports_check_mode=True,
    )
    p = module.params
    for url in [p["url"] or ""] + [str(u) for u in (p["urls"] or {}).values()]:
        for secret in url_credentials(url):
            module.no_log_values.add(secret)    # refused by the client; never in the invocation or a message
    if (p["token"] or "").strip():
        module.no_log_values.add(p["token"].strip())
    if p["urls"] is not None:
        module.exit_json(changed=False, files=gguf_url_files(p["urls"], token=p["token"], tensors=p["tensors"],
                                                             timeout=p["timeout"], validate_certs=p["validate_certs"]))
    if p["url"] is not None:
        try:
            facts = gguf_url_facts(p["url"], token=p["token"], tensors=p["tensors"], timeout=p["timeout"],
                                   validate_certs=p["validate_certs"])
        except GGUFError as exc:
            module.fail_json(msg=str(exc), url=redact(p["url"]))
        module.exit_json(changed=False, **facts)
    if p["paths"] is not None:
        module.exit_json(changed=False, files=gguf_files(p["paths"], p["tensors"], p["header_only"]))
    path = p["path"]
    try:
        facts = gguf_facts(path, p["tensors"], p["header_only"])
    except GGUFError as exc:
        module.fail_json(msg=str(exc), path=path)
    module.exit_json(changed=False, **facts)


if __name__ == "__main__":
    main()
