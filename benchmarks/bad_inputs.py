#!/usr/bin/env python
"""Hostile files, lying servers and careless paths through the collection, via Ansible (issue 15).

    python benchmarks/bad_inputs.py [--only SUBSTRING] [--timeout 30] [--json FILE]

Every case runs as its own ``ansible localhost -m <module>`` (or a ``debug`` of a filter), exactly
as a playbook would call it, against:

* the crafted GGUF corpus in tests/fixtures/bad_inputs/ (build_corpus.py writes it), plus a FIFO,
  /dev/zero, a directory, a real generated model (~/.cache/dankfleet/models) when present;
* a lying HTTP server (tests/lab/range_http_server.py faults: ranges restarted at byte 0, creeping
  restarts, malformed Content-Length, a lying total, redirects to ftp:// and file://);
* careless retire paths (/, /etc, /usr/lib/.., a home, a mount point, relative trash dirs, unit names
  with path separators, a symlinked parent, one file under two spellings) -- the system trees only
  in --check, in a temp tree otherwise;
* fit_plan and serve_shadowed inputs with NaN, inf, huge and negative numbers.

Per case: the outcome, seconds and the peak RSS of the ansible process tree (wait4's ru_maxrss:
the largest of ansible and the module it ran). Outcomes:

    refusal   failed with the named message the case expects
    ok        succeeded with the right result
    crash     a traceback, MODULE FAILURE, a failure with another message, or > 200 MB RSS
    hang      more than 10 s (killed at --timeout)
    wrong     succeeded where it must refuse, or with a wrong result

and the summary ``tried N, named refusals R, crashes C, hangs H, wrong successes W``; exit 1 unless
crashes, hangs and wrong successes are all 0.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import import_paths  # noqa: F401 - run as a script: the collection on sys.path
import bad_inputs_files

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "fixtures" / "bad_inputs"
MODELS = Path(os.environ.get("DANKFLEET_CACHE", Path.home() / ".cache" / "dankfleet")) / "models"
VENV_PY = REPO / ".venv" / "bin" / "python"
ANSIBLE = REPO / ".venv" / "bin" / "ansible"
HANG_S = 10.0
RSS_LIMIT = 200 * 1024 * 1024
PAYLOAD_SIZE = 2 * 1024 * 1024 + 7


class Case:
    def __init__(self, name, module, args, refuse=None, check=None, check_mode=False, extra_vars=None,
                 may_refuse=None):
        self.name = name
        self.may_refuse = may_refuse  # regex of a named refusal the case accepts beside a checked success
        self.module = module          # "gguf_info", ... or "debug" for a filter expression
        self.args = args
        self.refuse = refuse          # regex the failure message must match
        self.check = check            # fn(result) -> None or a problem, for an expected success
        self.check_mode = check_mode
        self.extra_vars = extra_vars


def _s(text):
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _gguf_cases(tmp):
    """Every corpus file, plus things that are not files."""
    expect = {
        "good_tiny_llama.gguf": None,
        "empty.gguf": r"not a GGUF file: 0 bytes",
        "magic_only.gguf": r"truncated: .* while reading version",
        "not_gguf.safetensors": r"not a GGUF file: the magic is",
        "version_99.gguf": r"unsupported GGUF version 99",
        "tensor_count_2e40.gguf": r"truncated: the file ends at byte \d+ while reading type of tensor ''",
        "tensor_count_negative.gguf": r"tensor count at offset 8 is -1",
        "kv_count_2e40.gguf": r"metadata key #8 at offset \d+ is empty",
        "kv_count_fits_max_not_file.gguf": r"metadata key #8 at offset \d+ is empty",
        "key_length_2e60.gguf": r"metadata key #0 at offset 24 claims \d+ bytes, more than the 1073741824 llama",
        "string_value_2e60.gguf": r"metadata 'general.name' at offset \d+ claims \d+ bytes",
        "array_count_2e60.gguf": r"metadata 'tokenizer.ggml.scores' at offset \d+ claims \d+ FLOAT32 elements",
        "string_array_count_2e40.gguf": r"metadata 'tokenizer.ggml.tokens' at offset \d+ claims \d+ STRING",
        "nested_array.gguf": r"metadata 'x.nested' is an array of invalid GGUF value type 9 \(an array of arrays",
        "unknown_value_type.gguf": r"metadata 'x.y' has invalid GGUF value type 77 at offset",
        "empty_key.gguf": r"metadata key #0 at offset \d+ is empty",
        "duplicate_key.gguf": r"duplicate metadata key 'llama.block_count'",
        "block_count_4e9.gguf": r"metadata llama.block_count is 4294967295, expected at most 512",
        "block_count_string.gguf": r"metadata llama.block_count is STRING '12', expected an unsigned integer",
        "block_count_float.gguf": r"metadata llama.block_count is FLOAT32 2.0, expected an unsigned integer",
        "block_count_bool.gguf": r"metadata llama.block_count is BOOL True, expected an unsigned integer",
        "block_count_uint64_huge.gguf": r"metadata llama.block_count is UINT64 \d+, expected an unsigned integer",
        "context_length_negative.gguf": r"metadata llama.context_length is INT32 -4096, expected an unsigned",
        "embedding_length_array.gguf": r"metadata llama.embedding_length is ARRAY\[UINT32\]",
        "head_count_strings.gguf": r"metadata llama.attention.head_count is ARRAY\[STRING\]",
        "head_count_kv_negative.gguf": r"metadata llama.attention.head_count_kv is INT32 -2",
        "rope_freq_base_nan.gguf": r"metadata llama.rope.freq_base is FLOAT32 nan, expected a finite number",
        "rope_freq_base_inf.gguf": r"metadata llama.rope.freq_base is FLOAT64 inf, expected a finite number",
        "rope_freq_base_negative.gguf": r"metadata llama.rope.freq_base is FLOAT32 -1.0, expected a finite",
        "architecture_array.gguf": r"metadata general.architecture is ARRAY\[STRING\] \['llama'\], expected a string",
        "architecture_int.gguf": r"metadata general.architecture is UINT32 7, expected a string",
        "alignment_not_power_of_2.gguf": r"general.alignment 48 is not a power of 2",
        "alignment_string.gguf": r"general.alignment must be UINT32, is STRING",
        "nextn_above_block_count.gguf": r"llama.nextn_predict_layers 9 > block_count 2",
        "sliding_window_string.gguf": r"metadata llama.attention.sliding_window is STRING '4096'",
        "tensor_dims_overflow.gguf": r"tensor 'blk.0.w' shape .* more than int64",
        "tensor_dims_5.gguf": r"tensor 'blk.0.w' has 5 dimensions, ggml allows at most 4",
        "tensor_negative_dim.gguf": r"tensor 'blk.0.w' dimension 0 is -32, expected 0 or more",
        "tensor_offset_past_end.gguf": r"tensor 'blk.0.w' has data offset 1125899906842624, expected 0",
        "tensor_unknown_type.gguf": r"tensor 'blk.0.w' has ggml type 77",
        "tensor_name_2e60.gguf": r"name of tensor #0 at offset 24 claims \d+ bytes",
        "truncated_tensor_data.gguf": r"truncated: tensor 'blk.1.w' needs bytes .* \(100 missing\)",
        "truncated_in_header.gguf": r"truncated: the file ends at byte 70",
    }
    on_disk = sorted(p.name for p in CORPUS.iterdir() if not p.name.endswith(".py"))
    if sorted(expect) != on_disk:
        raise SystemExit("corpus and cases differ: %s" % sorted(set(expect) ^ set(on_disk)))

    def tiny(r):
        if r.get("block_count") != 2 or r.get("architecture") != "llama" or len(r.get("layers", [])) != 2:
            return "block_count %r architecture %r" % (r.get("block_count"), r.get("architecture"))
        return None

    cases = []
    for name, pattern in sorted(expect.items()):
        path = str(CORPUS / name)
        cases.append(Case("gguf_info " + name, "dankfleet.llm.gguf_info", {"path": path},
                          refuse=(re.escape(path) + ": .*" + pattern) if pattern else None,
                          check=None if pattern else tiny))
    fifo = os.path.join(tmp, "model.fifo")
    os.mkfifo(fifo)
    # sparse files: a few header bytes, then 64 GiB of holes the counts and lengths may claim
    sparse = {}
    for name, head in (("sparse_string_64g.gguf", b"GGUF" + struct.pack("<Iqq", 3, 0, 1) + _s("general.name")
                        + struct.pack("<IQ", 8, 60 << 30)),
                       ("sparse_zero_tensors.gguf", b"GGUF" + struct.pack("<Iqq", 3, 60000, 0)),
                       ("sparse_array_2e21.gguf", b"GGUF" + struct.pack("<Iqq", 3, 0, 1) + _s("x.big")
                        + struct.pack("<IIQ", 9, 10, (1 << 21) + 1))):
        path = os.path.join(tmp, name)
        with open(path, "wb") as fh:
            fh.write(head)
            fh.truncate(64 << 30)
        sparse[name] = path
    # three 2M-element u64 arrays of zeros (holes): each within the per-array bound, together past the total
    path = sparse["sparse_arrays_total.gguf"] = os.path.join(tmp, "sparse_arrays_total.gguf")
    with open(path, "wb") as fh:
        fh.write(b"GGUF" + struct.pack("<Iqq", 3, 0, 3))
        for i in range(3):
            fh.write(_s("x.a%d" % i) + struct.pack("<IIQ", 9, 10, 2000000))
            fh.seek(2000000 * 8, os.SEEK_CUR)
        fh.truncate(64 << 30)
    cases += [
        Case("gguf_info FIFO", "dankfleet.llm.gguf_info", {"path": fifo}, refuse=r"is a FIFO \(named pipe\), not a regular"),
        Case("gguf_info /dev/zero", "dankfleet.llm.gguf_info", {"path": "/dev/zero"}, refuse=r"/dev/zero: is a character device"),
        Case("gguf_info /dev/urandom", "dankfleet.llm.gguf_info", {"path": "/dev/urandom"}, refuse=r"is a character device"),
        Case("gguf_info directory", "dankfleet.llm.gguf_info", {"path": tmp}, refuse=r"is a directory, not a regular"),
        Case("gguf_info missing", "dankfleet.llm.gguf_info", {"path": tmp + "/nope.gguf"}, refuse=r"nope.gguf: cannot open"),
        Case("gguf_info sparse: a 60 GiB string", "dankfleet.llm.gguf_info", {"path": sparse["sparse_string_64g.gguf"]},
             refuse=r"metadata 'general.name' at offset 48 claims \d+ bytes, more than the 1073741824 llama"),
        Case("gguf_info sparse: 60000 zeroed tensor infos", "dankfleet.llm.gguf_info",
             {"path": sparse["sparse_zero_tensors.gguf"]}, refuse=r"duplicate tensor name '' \(tensor #1"),
        Case("gguf_info sparse: a 2M-element array", "dankfleet.llm.gguf_info", {"path": sparse["sparse_array_2e21.gguf"]},
             refuse=r"metadata 'x.big' at offset \d+ claims 2097153 elements, expected at most 2097152"),
        Case("gguf_info sparse: arrays past the total", "dankfleet.llm.gguf_info",
             {"path": sparse["sparse_arrays_total.gguf"]},
             refuse=r"metadata 'x.a2' at offset \d+ brings the header's array elements to 6000000, expected at most"),
        Case("gpu_facts facts_file FIFO", "dankfleet.llm.gpu_info", {"facts_file": fifo},
             refuse=r"facts_file .*model.fifo: is a FIFO"),
        Case("gpu_facts facts_file /dev/zero", "dankfleet.llm.gpu_info", {"facts_file": "/dev/zero"},
             refuse=r"facts_file /dev/zero: is a character device"),
        Case("gpu_facts facts_file recorded", "dankfleet.llm.gpu_info",
             {"facts_file": str(REPO / "tests" / "fixtures" / "gpu" / "b650.facts.json")},
             check=lambda r: None if r.get("gpus") else "no gpus in %r" % sorted(r)),
    ]
    real = MODELS / "qwen35-hybrid.gguf"
    if real.exists():
        cases.append(Case("gguf_info real qwen35-hybrid", "dankfleet.llm.gguf_info", {"path": str(real)},
                          check=lambda r: None if r.get("architecture") == "qwen35" and r.get("block_count") else
                          "architecture %r" % r.get("architecture")))
    return cases


def _fetch_cases(tmp, base, sha):
    def dest(n):
        d = os.path.join(tmp, "fetch-%s" % n)
        os.makedirs(d, exist_ok=True)
        return os.path.join(d, "m.gguf")

    def args(n, fault=None, **kw):
        a = {"url": "%s/%smodels/payload.gguf" % (base, "_fault/%s/" % fault if fault else ""), "dest": dest(n),
             "size": PAYLOAD_SIZE, "sha256": sha, "retries": 2, "retry_delay": 0, "timeout": 5,
             "disk_margin_bytes": 0}
        a.update(kw)
        return a

    fifo_dest = dest("fifo")
    os.mkfifo(fifo_dest)

    def downloaded(r):
        if r.get("status") != "downloaded":
            return "status %r" % r.get("status")
        with open(r["path"], "rb") as fh:
            got = hashlib.sha256(fh.read()).hexdigest()
        return None if got == sha else "sha256 %s" % got

    return [
        Case("gguf_fetch clean", "dankfleet.llm.gguf_fetch", args("clean"), check=downloaded),
        Case("gguf_fetch resumes over drops", "dankfleet.llm.gguf_fetch", args("drops", "drop-after-300000"),
             check=downloaded),
        Case("gguf_fetch relative dest", "dankfleet.llm.gguf_fetch", args("rel", dest="models/m.gguf"),
             refuse=r"dest must be an absolute path, got 'models/m.gguf'"),
        Case("gguf_fetch dest is a FIFO", "dankfleet.llm.gguf_fetch", args("fifo", dest=fifo_dest),
             refuse=r"is a FIFO \(named pipe\), not a regular file"),
        Case("gguf_fetch url file://", "dankfleet.llm.gguf_fetch", args("fileurl", url="file:///etc/passwd"),
             refuse=r"only http:// and https://"),
        Case("gguf_fetch url without host", "dankfleet.llm.gguf_fetch", args("nohost", url="http:///x.gguf"),
             refuse=r"names no host"),
        Case("gguf_fetch redirect to ftp", "dankfleet.llm.gguf_fetch", args("ftp", "redirect-to-ftp"),
             refuse=r"redirects to ftp://.*refused.*only http:// and https://"),
        Case("gguf_fetch redirect to file", "dankfleet.llm.gguf_fetch", args("file", "redirect-to-file"),
             refuse=r"redirects to file:///etc/passwd: refused"),
        Case("gguf_fetch malformed Content-Length", "dankfleet.llm.gguf_fetch", args("badlen", "bad-length"),
             refuse=r"malformed Content-Length '12abc'"),
        Case("gguf_fetch lying total", "dankfleet.llm.gguf_fetch", args("lie", "lie-total-99"),
             refuse=r"the server has 99 bytes .* but the manifest declares"),
        Case("gguf_fetch ranges restart at 0", "dankfleet.llm.gguf_fetch",
             args("from0", "range-from-0,drop-after-200000"), refuse=r"giving up after \d+ attempts \(2 retries without progress\)"),
        Case("gguf_fetch restarts creep forward", "dankfleet.llm.gguf_fetch",
             args("creep", "ignore-range,drop-grow-500"), refuse=r"giving up after 3 attempts \(2 retries without progress\)"),
        Case("gguf_fetch wrong bytes", "dankfleet.llm.gguf_fetch", args("wrong", "wrong-bytes"),
             refuse=r"sha256 mismatch after download"),
        Case("gguf_fetch 404", "dankfleet.llm.gguf_fetch", args("404", "404"), refuse=r"HTTP 404 from"),
        Case("gguf_fetch dribbling server (2 KB/s)", "dankfleet.llm.gguf_fetch",
             args("dribble", "rate-2000", retries=1, timeout=2),
             refuse=r"\(1 retries without progress\): slower than 16384 bytes in 2.0s"),
    ]


def _trash_cases(tmp):
    t = os.path.join(tmp, "retire")
    os.makedirs(os.path.join(t, "a"))
    os.makedirs(os.path.join(t, "real", "sub"))
    os.symlink(os.path.join(t, "real", "sub"), os.path.join(t, "a", "link"))
    for p, text in (("a/x", "lexical decoy"), ("real/x", "kernel file"), ("real/f", "one file")):
        with open(os.path.join(t, p), "w") as fh:
            fh.write(text)
    os.symlink(os.path.join(t, "real"), os.path.join(t, "alias"))
    trash = os.path.join(t, "trash")
    home = os.path.expanduser("~")
    # a kernel pseudo-filesystem mount, refused in --check: never a mount someone else relies on
    mount = next((m for m in ("/dev/shm", "/dev/mqueue", "/dev/pts", "/sys/fs/cgroup") if os.path.ismount(m)), "/proc")

    def moved_kernel_file(r):
        srcs = [m["src"] for m in r.get("moves", [])]
        if srcs != [os.path.join(t, "real", "x")]:
            return "moved %r" % srcs
        with open(os.path.join(t, "a", "x")) as fh:
            return None if fh.read() == "lexical decoy" else "the decoy changed"

    def moved_once(r):
        if len(r.get("moves", [])) != 1 or len(r.get("duplicates", [])) != 1:
            return "moves %r duplicates %r" % (r.get("moves"), r.get("duplicates"))
        return None

    cases = []
    for path in sorted(set(("/", "/etc", "/usr", "/home", "/var/lib", "/usr/lib/..", "/etc/systemd/system", "/root",
                            home, "/etc/../usr/"))):
        cases.append(Case("trash_files %s (check mode)" % path, "dankfleet.llm.trash_files",
                          {"trash_dir": trash, "paths": [path]}, refuse=r"never moves a system tree", check_mode=True))
    cases += [
        Case("trash_files mount point %s (check mode)" % mount, "dankfleet.llm.trash_files",
             {"trash_dir": trash, "paths": [mount]}, refuse=r"mount point|never moves a system tree", check_mode=True),
        Case("trash_files relative trash_dir", "dankfleet.llm.trash_files",
             {"trash_dir": "trash", "paths": [os.path.join(t, "real", "f")]}, refuse=r"trash_dir 'trash' is not absolute"),
        Case("trash_files trash_dir /", "dankfleet.llm.trash_files",
             {"trash_dir": "/", "paths": [os.path.join(t, "real", "f")]}, refuse=r"trash_dir / is a system tree"),
        Case("trash_files restore relative trash_dir", "dankfleet.llm.trash_files",
             {"trash_dir": "x/y", "state": "restored"}, refuse=r"trash_dir 'x/y' is not absolute"),
        Case("trash_files unit ../../etc/passwd", "dankfleet.llm.trash_files",
             {"trash_dir": trash, "units": [{"unit": "../../etc/passwd"}]}, refuse=r"is not a unit name"),
        Case("trash_files unit a/b.service", "dankfleet.llm.trash_files",
             {"trash_dir": trash, "units": [{"unit": "a/b.service"}]}, refuse=r"is not a unit name"),
        Case("trash_files symlinked parent ..", "dankfleet.llm.trash_files",
             {"trash_dir": trash, "paths": [os.path.join(t, "a", "link", "..", "x")]}, check=moved_kernel_file),
        Case("trash_files one file, two spellings", "dankfleet.llm.trash_files",
             {"trash_dir": trash + "2", "paths": [os.path.join(t, "real", "f"), os.path.join(t, "alias", "f")]},
             check=moved_once),
    ]
    return cases


def _plan_cases(tmp):
    from ansible_collections.dankfleet.llm.tests.unit import planner_testlib as lib
    model = lib.fixture("frank_medium")
    gpus = lib.r9700s()
    serve = {"backend": "hip", "ctx_size": 65536, "parallel": 2, "tensor_split": [31, 33]}

    def vars_file(name, **over):
        data = {"g": over.pop("gpus", gpus), "m": over.pop("model", model), "s": dict(serve, **over)}
        path = os.path.join(tmp, "plan-%s.json" % name)
        with open(path, "w") as fh:
            # json.dumps writes NaN/Infinity, which Ansible's JSON/YAML extra-vars loader reads as floats
            json.dump(data, fh)
        return "@" + path

    expr = "msg={{ g | dankfleet.llm.fit_plan(model=m, serve=s) }}"
    bad_model = json.loads(json.dumps(model))
    bad_model["layers"][3]["tensor_bytes"] = -1
    nan_gpus = [dict(gpus[0]), dict(gpus[1], vram_total_bytes=float("nan"))]

    def planned(r):
        msg = r.get("msg")
        return None if isinstance(msg, dict) and isinstance(msg.get("fits"), bool) else "msg %r" % (msg,)

    shadow = "msg={{ a | dankfleet.llm.serve_shadowed(extra_env=e) }}"

    def shadow_vars(name, a, e):
        path = os.path.join(tmp, "shadow-%s.json" % name)
        with open(path, "w") as fh:
            json.dump({"a": a, "e": e}, fh)
        return "@" + path

    def named(*needles):
        def check(r):
            msg = " ".join(r.get("msg") or [])
            return None if all(n in msg for n in needles) else "msg %r" % (r.get("msg"),)
        return check

    return [
        Case("fit_plan valid", "debug", expr, extra_vars=vars_file("ok"), check=planned),
        Case("fit_plan tensor_split NaN", "debug", expr, extra_vars=vars_file("nan", tensor_split=[float("nan"), 1]),
             refuse=r"dankfleet.llm.fit_plan: serve.tensor_split\[0\] is nan: every size"),
        Case("fit_plan tensor_split 'inf'", "debug", expr, extra_vars=vars_file("inf", tensor_split=["inf", "1"]),
             refuse=r"serve.tensor_split entry 'inf' is not a finite share"),
        Case("fit_plan tensor_split 1e308", "debug", expr, extra_vars=vars_file("huge", tensor_split=[1e308, 1e308]),
             refuse=r"serve.tensor_split.* (out of range|finite share)"),
        Case("fit_plan ctx_size -4096", "debug", expr, extra_vars=vars_file("neg", ctx_size=-4096),
             refuse=r"serve.ctx_size must be >= 1, got -4096"),
        Case("fit_plan ctx_size 1e300", "debug", expr, extra_vars=vars_file("ctxhuge", ctx_size=1e300),
             refuse=r"serve.ctx_size is .*out of range"),
        Case("fit_plan floor_bytes inf", "debug", expr, extra_vars=vars_file("floor", floor_bytes=float("inf")),
             refuse=r"serve.floor_bytes is inf"),
        Case("fit_plan vram NaN", "debug", expr, extra_vars=vars_file("vram", gpus=nan_gpus),
             refuse=r"gpus\[1\].vram_total_bytes is nan"),
        Case("fit_plan negative tensor_bytes", "debug", expr, extra_vars=vars_file("tb", model=bad_model),
             refuse=r"model.layers\[3\].tensor_bytes is -1"),
        Case("serve_shadowed --ctx-size/-ts/HIP_VISIBLE_DEVICES", "debug", shadow,
             extra_vars=shadow_vars("1", ["--ctx-size=8192", "-ts", "1,1"], {"HIP_VISIBLE_DEVICES": "0,1"}),
             check=named("set llama_server_ctx_size", "set llama_server_tensor_split",
                         "set llama_server_hip_visible_devices")),
        Case("serve_shadowed LLAMA_ARG_CTX_SIZE / --override-tensor", "debug", shadow,
             extra_vars=shadow_vars("2", ["-ot", "exps=CPU"], {"LLAMA_ARG_CTX_SIZE": "1"}),
             check=named("LLAMA_ARG_CTX_SIZE", "where fit_plan does not size them")),
    ]


def _run(case, timeout):
    env = dict(os.environ)
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
               ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_NOCOLOR="1",
               ANSIBLE_DEPRECATION_WARNINGS="0", ANSIBLE_LOCALHOST_WARNING="0", PYTHONDONTWRITEBYTECODE="1")
    argv = [str(ANSIBLE), "localhost", "-i", "localhost,", "-c", "local",
            "-e", "ansible_python_interpreter=%s" % VENV_PY]
    if case.module == "debug":
        argv += ["-m", "ansible.builtin.debug", "-a", case.args, "-e", case.extra_vars]
    else:
        argv += ["-m", case.module, "-a", json.dumps(case.args)]
    if case.check_mode:
        argv.append("--check")
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=str(REPO),
                            start_new_session=True)
    chunks = {"out": [], "err": []}
    readers = [threading.Thread(target=lambda f=f, k=k: chunks[k].append(f.read()), daemon=True)
               for f, k in ((proc.stdout, "out"), (proc.stderr, "err"))]
    for r in readers:
        r.start()
    hung = False
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - t0 > timeout:
            os.killpg(proc.pid, 9)
            hung = True
            pid, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.02)
    seconds = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)   # reaped here: Popen must not wait again
    for r in readers:
        r.join(5)
    # wait4's ru_maxrss: the larger of this process and its reaped descendants (the module process)
    rss = usage.ru_maxrss * 1024
    return (b"".join(chunks["out"]).decode(errors="replace"), b"".join(chunks["err"]).decode(errors="replace"),
            seconds, rss, hung)


def _result_of(stdout):
    try:
        doc = json.loads(stdout[stdout.index("{"):])
        return doc["plays"][0]["tasks"][0]["hosts"]["localhost"]
    except (ValueError, KeyError, IndexError):
        return None


def classify(case, out, err, seconds, rss, hung):
    if hung or seconds > HANG_S:
        return "hang", "%.1fs%s" % (seconds, " (killed)" if hung else "")
    if getattr(case, "secret", None) and case.secret in out + err:
        return "wrong", "the secret the case passed is in the output"
    res = _result_of(out)
    if res is None:
        return "crash", "no JSON result: %s" % (err.strip().splitlines() or ["?"])[-1][:160]
    if rss > RSS_LIMIT:
        return "crash", "peak RSS %d MiB > 200 MiB" % (rss >> 20)
    msg = res.get("msg")
    msg = msg if isinstance(msg, str) else json.dumps(msg, default=str)
    # fail_json in ansible-core 2.19 carries exception "(traceback unavailable)"; an unhandled one a real traceback
    exc = str(res.get("exception") or "")
    traceback = ("Traceback (most recent call last)" in exc + str(res.get("module_stderr") or "")
                 or "MODULE FAILURE" in msg or msg.startswith("Module failed:") or "unhandled exception" in msg)
    if res.get("failed"):
        if traceback:
            return "crash", "traceback: %s" % msg[:160]
        refuse = case.refuse or case.may_refuse
        if refuse and re.search(refuse, msg):
            problem = case.check(res) if case.check else None   # a refusal that damaged something is wrong
            if problem:
                return "wrong", "refused, but %s" % problem
            at = msg.find("dankfleet.llm.")   # a filter's own message, past Ansible's templating prefix
            return "refusal", (msg[at:] if at > 0 and case.module == "debug" else msg)[:160]
        return "crash", "unexpected failure: %s" % msg[:200]
    if case.refuse:
        return "wrong", "succeeded; expected a refusal matching %r" % case.refuse
    problem = case.check(res) if case.check else None
    if problem:
        return "wrong", problem
    return "ok", "changed=%s" % res.get("changed")


def _start_server(root):
    proc = subprocess.Popen([str(VENV_PY), str(REPO / "tests" / "lab" / "range_http_server.py"), "--root", root,
                             "--quiet"], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    m = re.match(r"LISTENING (\d+)", line)
    if not m:
        proc.kill()
        raise SystemExit("range_http_server did not start: %r" % line)
    return proc, "http://127.0.0.1:%s" % m.group(1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="run the cases whose name contains this")
    ap.add_argument("--timeout", type=float, default=30.0, help="kill a case after this many seconds")
    ap.add_argument("--json", help="also write the per-case results here")
    a = ap.parse_args(argv)
    if subprocess.run([str(VENV_PY), str(CORPUS / "build_corpus.py"), "--check"]).returncode:
        return 1
    tmp = tempfile.mkdtemp(prefix="bad-inputs-")
    www = os.path.join(tmp, "www")
    os.makedirs(os.path.join(www, "models"))
    data = random.Random(15).randbytes(PAYLOAD_SIZE)
    with open(os.path.join(www, "models", "payload.gguf"), "wb") as fh:
        fh.write(data)
    server, base = _start_server(www)
    try:
        cases = (_gguf_cases(tmp) + _fetch_cases(tmp, base, hashlib.sha256(data).hexdigest())
                 + _trash_cases(tmp) + _plan_cases(tmp))
        cases += bad_inputs_files.cases(tmp, base, hashlib.sha256(data).hexdigest(), Case, PAYLOAD_SIZE)
        cases += __import__("bad_inputs_values").cases(tmp, Case)  # issue 23 item 4: strict values
        cases += __import__("bad_inputs_trash").cases(tmp, Case)  # issue 23 item 3: trash_files
        cases += __import__("bad_inputs_http").cases(Case, tmp, base, www, data)    # HTTP peers and secrets (#23)
        cases += __import__("bad_inputs_shapes").cases(tmp, Case)    # a lying llama-server, generated (#33)
        if a.only:
            cases = [c for c in cases if a.only in c.name]
        counts = {"refusal": 0, "ok": 0, "crash": 0, "hang": 0, "wrong": 0}
        rows = []
        peak = 0
        for case in cases:
            out, err, seconds, rss, hung = _run(case, a.timeout)
            outcome, detail = classify(case, out, err, seconds, rss, hung)
            counts[outcome] += 1
            peak = max(peak, rss)
            print("%-8s %5.2fs %4d MiB  %-52s %s" % (outcome, seconds, rss >> 20, case.name[:52], detail), flush=True)
            rows.append({"case": case.name, "outcome": outcome, "seconds": round(seconds, 3), "peak_rss_bytes": rss,
                         "detail": detail})
        print("largest peak RSS of a case (ansible + module): %d MiB (limit 200)" % (peak >> 20))
        print("tried %d, named refusals %d, crashes %d, hangs %d, wrong successes %d"
              % (len(cases), counts["refusal"], counts["crash"], counts["hang"], counts["wrong"]))
        if a.json:
            with open(a.json, "w") as fh:
                json.dump(rows, fh, indent=1)
        return 0 if counts["crash"] == counts["hang"] == counts["wrong"] == 0 else 1
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
