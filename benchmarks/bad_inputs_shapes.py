"""A lying llama-server, generated (issue 33): every position of every recorded answer replaced by a hostile value.

    cases(tmp, Case)      # for benchmarks/bad_inputs.py (--only shapes)

The recorded answers are b11434's shapes as the verify battery reads them (``/props``, ``/v1/models``, a chat
completion with ``usage`` and ``timings``, the SSE stream's chunks, ``/tokenize``, ``/detokenize``,
``/metrics``). For each position of each answer (``positions``), one hostile value of another kind than the
recorded one is drawn (seeded: the same run every time) and served on a port of its own; the case runs
``dankfleet.llm.endpoint_verify`` against it as the role does (an env file naming the port), then the same
module against the unchanged answers for the baseline. Outcomes (bad_inputs.classify):

    ok        passed with the baseline's checks, statuses and figures (the position is not one the checks read),
              or the run reported a failing check (a finding) -- a lying answer is a named finding
    crash     a traceback or MODULE FAILURE
    hang      the module did not end within the case timeout (a filler loop sized from a lie)
    wrong     passed with other figures than the baseline's: a value of the wrong kind was read as a number

Plus the classes the issue names by hand: JSON nested 200,000 deep, ``/props`` with an absurd ``n_ctx``,
``/metrics`` lines off the grammar, chunks without ``choices``.

The same generator over the host's files: every position of async_wrapper's results record through
``dankfleet.llm.job_progress`` (a result or a refusal naming the results file, never "finished" on a lie), and every
field of a recorded nvidia-smi line through ``dankfleet.llm.gpu_info`` (``nvidia_smi_output_file``): the recorded
board's facts or a refusal naming the file.
"""
from __future__ import annotations

import copy
import json
import os
import random
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ansible_collections.dankfleet.llm.tests.unit.hostile_testlib import positions, substitute

SEED = 33
ALIAS = "m"
CTX, PARALLEL = 4096, 2
CHECKS = ["stream", "tools", "reasoning_effort", "slots", "prefix_cache", "window"]

PROPS = {"default_generation_settings": {"n_ctx": CTX // PARALLEL, "params": {"temperature": 0.6, "top_k": 20}},
         "total_slots": PARALLEL, "model_alias": ALIAS, "model_path": "/m.gguf",
         "modalities": {"vision": False, "audio": False}, "build_info": "b11434-unknown"}
MODELS = {"object": "list", "data": [{"id": ALIAS, "object": "model", "created": 1764892800, "owned_by": "llamacpp"}]}
CHAT = {"choices": [{"finish_reason": "stop", "index": 0,
                     "message": {"role": "assistant", "content": "ok", "reasoning_content": ""}}],
        "created": 1764892800, "model": ALIAS, "object": "chat.completion", "id": "chatcmpl-1",
        "usage": {"completion_tokens": 4, "prompt_tokens": 12, "total_tokens": 16},
        "timings": {"cache_n": 0, "prompt_n": 12, "prompt_ms": 3.5, "predicted_n": 4, "predicted_ms": 9.0,
                    "draft_n": 6, "draft_n_accepted": 3}}
CHUNK = {"choices": [{"finish_reason": None, "index": 0, "delta": {"content": "one"}}], "created": 1764892800,
         "id": "chatcmpl-1", "model": ALIAS, "object": "chat.completion.chunk"}
TOKENIZE = {"tokens": [1, 2, 3]}
DETOKENIZE = {"content": "river stone"}
METRICS = ("# HELP llamacpp:n_drafted_total drafted tokens\n# TYPE llamacpp:n_drafted_total counter\n"
           "llamacpp:n_drafted_total 12\nllamacpp:prompt_tokens_total 120\n")
ANSWERS = {"props": PROPS, "models": MODELS, "chat": CHAT, "chunk": CHUNK, "tokenize": TOKENIZE,
           "detokenize": DETOKENIZE}
HOSTILE = [None, True, "no", "1_0", "\x1b[2J", 1e308, -1, 2 ** 70, [], {}, [1], {"x": 1}, "9" * 5000, 0.5]
ENV = ("ALIAS={alias}\nMODEL_PATH=/m.gguf\nBIND_ADDR=127.0.0.1\nLISTEN_PORT={port}\nPARALLEL={parallel}\n"
       "CTX_SIZE={ctx}\nSPEC_TYPE=ngram-mod\nVISION=off\n")


def _kind(value):
    return "number" if isinstance(value, (int, float)) and not isinstance(value, bool) else type(value).__name__


class Lie:
    """What one port answers: the recorded answers with at most one replaced (raw text, for what JSON can't say)."""

    def __init__(self, answers=None, raw=None, metrics=METRICS):
        self.answers = answers or ANSWERS
        self.raw = raw or {}
        self.metrics = metrics


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _send(self, code, body, ctype="application/json"):
        data = body.encode("utf-8") if isinstance(body, str) else body
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _answer(self, name):
        lie = self.server.lie
        if name in lie.raw:
            return lie.raw[name]
        return json.dumps(lie.answers[name], allow_nan=True)

    def do_GET(self):
        lie = self.server.lie
        if self.path == "/health":
            return self._send(200, '{"status":"ok"}')
        if self.path == "/props":
            return self._send(200, self._answer("props"))
        if self.path == "/v1/models":
            return self._send(200, self._answer("models"))
        if self.path == "/metrics":
            return self._send(200, lie.metrics, "text/plain; version=0.0.4")
        return self._send(404, '{"error":{"message":"not found"}}')

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            body = {}
        if self.path == "/tokenize":
            if "tokenize" in self.server.lie.raw:
                return self._send(200, self.server.lie.raw["tokenize"])
            answer = self.server.lie.answers["tokenize"]
            if answer == TOKENIZE:   # the real answer: one token per word
                answer = {"tokens": list(range(len(str(body.get("content", "")).split())))}
            return self._send(200, json.dumps(answer, allow_nan=True))
        if self.path == "/detokenize":
            if self.server.lie.answers["detokenize"] == DETOKENIZE and "detokenize" not in self.server.lie.raw:
                return self._send(200, json.dumps({"content": " ".join(["river"] * len(body.get("tokens") or []))}))
            return self._send(200, self._answer("detokenize"))
        if self.path == "/v1/chat/completions":
            if body.get("stream"):
                chunk = self._answer("chunk")
                events = "data: %s\n\ndata: %s\n\ndata: [DONE]\n\n" % (chunk, chunk)
                return self._send(200, events, "text/event-stream")
            if self.server.lie.answers["chat"] == CHAT and "chat" not in self.server.lie.raw:
                words = sum(len(str(m.get("content", "")).split()) for m in body.get("messages") or [])
                answer = copy.deepcopy(CHAT)     # the real answer counts what it was sent
                answer["usage"]["prompt_tokens"] = words + 12
                answer["timings"]["prompt_n"] = words + 12
                return self._send(200, json.dumps(answer))
            return self._send(200, self._answer("chat"))
        return self._send(404, '{"error":{"message":"not found"}}')


def serve(lie):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.lie = lie
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def lies(rng):
    """(name, Lie) for every position of every answer, plus the classes named by hand."""
    out = []
    for name, answer in ANSWERS.items():
        for path in positions(answer):
            original = answer
            for key in path:
                original = original[key]
            choices = [v for v in HOSTILE if _kind(v) != _kind(original)]
            value = rng.choice(choices)
            out.append(("%s %s = %s" % (name, ".".join(str(p) for p in path) or "(whole)", _short(value)),
                        Lie(answers=dict(ANSWERS, **{name: substitute(answer, path, value)}))))
    deep = "[" * 200000 + "]" * 200000
    out += [("props nested 200000 deep", Lie(raw={"props": deep})),
            ("chat nested 200000 deep", Lie(raw={"chat": deep})),
            ("props n_ctx 2**62", Lie(answers=dict(ANSWERS, props=substitute(
                PROPS, ("default_generation_settings", "n_ctx"), 2 ** 62)))),
            ("chat draft_n 1e400", Lie(raw={"chat": json.dumps(CHAT).replace('"draft_n": 6', '"draft_n": 1e400')})),
            ("metrics 1_0", Lie(metrics="llamacpp:n_drafted_total 1_0\n")),
            ("chunk without choices", Lie(answers=dict(ANSWERS, chunk={"id": "x"}))),
            ("chat is not JSON", Lie(raw={"chat": "<html>502</html>"}))]
    return out


def _short(value):
    text = repr(value)
    return text if len(text) <= 24 else text[:21] + "..."


def _figures(result):
    """What must equal the baseline's for a pass to be right: each check's status and figures, timings aside."""
    rows = []
    for check in result.get("checks") or []:
        figures = {k: v for k, v in (check.get("figures") or {}).items()
                   if k not in ("seconds", "prefill_tok_s")}
        rows.append((check.get("name"), check.get("status"), json.dumps(figures, sort_keys=True, default=str)))
    return rows


RESULTS = {"started": 1, "finished": 0, "ansible_job_id": "j1.1", "results_file": "/root/.ansible_async/j1.1",
           "_ansible_suppress_tmpdir_delete": True}
SMI = "0, NVIDIA H200, 00000000:00:06.0, 143771, 0, 9.0, 5, 16"
SMI_HOSTILE = ["", "1_0", "9" * 5000, "-5", "nan", "1e400", "\x1b[2J", "0x10", "1.2.3", "\u00b2", "x\ty"]


def _host_file_cases(tmp, Case, rng):
    out = []
    for path in positions(RESULTS):
        original = RESULTS
        for key in path:
            original = original[key]
        value = rng.choice([v for v in HOSTILE if _kind(v) != _kind(original)])
        record = substitute(RESULTS, path, value)
        name = os.path.join(tmp, "results-%d.json" % len(out))
        with open(name, "w") as fh:
            fh.write(json.dumps(record, allow_nan=True))

        def finished_only_by_the_record(result, record=record):
            finished = isinstance(record, dict) and record.get("finished") in (1, True) and \
                type(record.get("finished")) in (int, bool)
            if result.get("finished") and not finished:
                return "reported finished from %r" % (record.get("finished") if isinstance(record, dict) else record)
            return None

        out.append(Case("shapes job_progress results %s = %s" % (".".join(map(str, path)) or "(whole)", _short(value)),
                        "dankfleet.llm.job_progress", {"format": "fetch", "label": "m.gguf", "results_file": name, "wait": 0},
                        may_refuse=r"results file", check=finished_only_by_the_record))
    fields = SMI.split(", ")
    for index in range(len(fields)):
        for value in rng.sample(SMI_HOSTILE, 3):
            line = ", ".join(fields[:index] + [value] + fields[index + 1:])
            name = os.path.join(tmp, "smi-%d.csv" % len(out))
            with open(name, "w") as fh:
                fh.write(line + "\n")
            root = os.path.join(tmp, "smi-root-%d" % len(out), "sys")
            os.makedirs(root)

            def vram_as_recorded(result):
                gpus = result.get("gpus") or []
                if any(g.get("vram_total_bytes") not in (143771 << 20, None) for g in gpus):
                    return "VRAM %r recorded" % [g.get("vram_total_bytes") for g in gpus]
                return None

            out.append(Case("shapes gpu_info smi field %d = %s" % (index, _short(value)), "dankfleet.llm.gpu_info",
                            {"sysfs_root": os.path.dirname(root), "nvidia_smi_output_file": name},
                            may_refuse=re.escape(name), check=vram_as_recorded))
    return out


def cases(tmp, Case):
    rng = random.Random(SEED)
    baseline_server = serve(Lie())
    out = []

    def env_for(port):
        path = os.path.join(tmp, "shapes-%d.env" % port)
        with open(path, "w") as fh:
            fh.write(ENV.format(alias=ALIAS, port=port, parallel=PARALLEL, ctx=CTX))
        return path

    args = {"checks": CHECKS, "reasoning_efforts": ["low"], "window_fraction": 1.0, "request_timeout": 5}
    baseline = {}

    def remember(result):
        baseline["rows"] = _figures(result)
        if not result.get("passed"):
            return "the unchanged answers did not pass: %s" % result.get("findings")
        return None

    out.append(Case("shapes baseline (the recorded answers)", "dankfleet.llm.endpoint_verify",
                    dict(args, env_file=env_for(baseline_server.server_address[1])), check=remember))
    for name, lie in lies(rng):
        server = serve(lie)

        def check(result, name=name):
            if not result.get("passed"):
                if not result.get("findings"):
                    return "not passed, yet no finding says why"
                return None                                  # a named finding: the lie was caught
            if "rows" in baseline and _figures(result) != baseline["rows"]:
                return "passed with other figures than the real answer's: %s" % [
                    r for r in _figures(result) if r not in baseline["rows"]][:2]
            return None

        out.append(Case("shapes " + name, "dankfleet.llm.endpoint_verify",
                        dict(args, env_file=env_for(server.server_address[1])), check=check))
    return out + _host_file_cases(tmp, Case, rng)
