"""HTTP peers and secrets, by class (issue 23): cases for benchmarks/bad_inputs.py, generated, not one per finding.

Classes, each drawn over its parameters and run through gguf_fetch and chat_completion as a playbook would:

* a peer that drips (every byte N ms apart, the status line and headers included): a named refusal within the
  request's deadline, never a hang;
* a peer that resets the connection every N bytes: the fetch keeps what arrived and finishes (N >= 16 KiB);
* an endless body and lying lengths: refused at the cap or by the sha256, never promoted, never a MemoryError;
* redirects to link-local addresses, to other schemes, from chains longer than 10: refused, not followed;
* credentials in a URL and secrets with surrounding whitespace: refused by name, the secret in no output
  (Case.secret: bad_inputs.classify reports a case whose secret shows up as a wrong success).

    cases(Case, tmp, base, www, data)   # base: the range_http_server serving www; data: models/payload.gguf
"""
from __future__ import annotations

import hashlib
import json
import os

from ansible_collections.dankfleet.llm.plugins.module_utils.host.gguf_fetch import ATTEMPTS_PER_TRY

DRIP_MS = (300, 2000)
RESET_EVERY = (16 * 1024 + 1, 60_000, 250_000)
LINK_LOCAL = ("169.254.169.254", "169.254.0.1", "[fe80::1]", "[::ffff:169.254.169.254]")
SCHEMES = ("ftp", "file", "gopher")
LENGTH_LIES = (99, 1 << 40)
SECRET = "hf_bad1nputs0secret7value"
CREDENTIALS = ("hf:%s@" % SECRET, "%s@" % SECRET, ":%s@" % SECRET, "u%%3A:%s@" % SECRET)
WHITESPACE = ("\n", " \n", "\r\n", "\t", " ")


def cases(Case, tmp, base, www, data):
    sha = hashlib.sha256(data).hexdigest()
    chat_dir = os.path.join(www, "v1", "chat")
    os.makedirs(chat_dir, exist_ok=True)
    with open(os.path.join(chat_dir, "completions"), "w") as fh:
        json.dump({"choices": [{"message": {"content": "ok"}}], "usage": {"completion_tokens": 1}}, fh)
    n = [0]

    def dest():
        n[0] += 1
        d = os.path.join(tmp, "http-%d" % n[0])
        os.makedirs(d, exist_ok=True)
        return os.path.join(d, "m.gguf")

    def fetch(fault=None, **kw):
        a = {"url": "%s/%smodels/payload.gguf" % (base, "_fault/%s/" % fault if fault else ""), "dest": dest(),
             "size": len(data), "sha256": sha, "retries": 1, "retry_delay": 0, "timeout": 2, "disk_margin_bytes": 0}
        a.update(kw)
        return a

    def chat(fault=None, **kw):
        a = {"url": "%s%s" % (base, "/_fault/%s" % fault if fault else ""), "model": "m", "timeout": 2}
        a.update(kw)
        return a

    def downloaded(r):
        if r.get("status") != "downloaded":
            return "status %r" % r.get("status")
        with open(r["path"], "rb") as fh:
            got = hashlib.sha256(fh.read()).hexdigest()
        return None if got == sha else "promoted wrong bytes: sha256 %s" % got

    def case(name, module, args, secret=None, **kw):
        c = Case(name, module, args, **kw)
        c.secret = secret
        return c

    out = []
    for ms in DRIP_MS:
        out.append(case("http fetch headers drip a byte per %d ms" % ms, "dankfleet.llm.gguf_fetch",
                        fetch("drip-%d" % ms, timeout=1), refuse=r"giving up after 2 attempts .*no answer from .* within 1.0s"))
        out.append(case("http chat drips a byte per %d ms" % ms, "dankfleet.llm.chat_completion", chat("drip-%d" % ms),
                        refuse=r"answered nothing: .*no complete answer within 2 s"))
    for every in RESET_EVERY:
        # each answer brings `every` new bytes (progress); one run still makes at most (retries + 1) x 20 attempts
        need, cap = -(-len(data) // every), (2 + 1) * ATTEMPTS_PER_TRY
        out.append(case("http fetch reset every %d bytes" % every, "dankfleet.llm.gguf_fetch",
                        fetch("reset-every-%d" % every, retries=2), check=downloaded if need <= cap else None,
                        refuse=None if need <= cap else r"the cap of %d attempts per run.*re-run to resume" % cap))
    out.append(case("http fetch reset every 60000 + wrong byte", "dankfleet.llm.gguf_fetch",
                    fetch("reset-every-60000,wrong-bytes-%d" % (len(data) // 3), retries=2),
                    refuse=r"sha256 mismatch after download"))
    for chunked in ("", "-chunked"):
        out.append(case("http fetch endless body%s" % chunked, "dankfleet.llm.gguf_fetch", fetch("endless" + chunked),
                        refuse=r"sha256 mismatch after download"))
        out.append(case("http chat endless body%s" % chunked, "dankfleet.llm.chat_completion",
                        chat("endless" + chunked, timeout=8), refuse=r"longer than the 16777216 bytes"))
    for lie in LENGTH_LIES:
        out.append(case("http fetch Content-Length %d" % lie, "dankfleet.llm.gguf_fetch", fetch("length-%d" % lie),
                        refuse=r"the server has %d bytes .* but the manifest declares" % lie))
        out.append(case("http chat Content-Length %d" % lie, "dankfleet.llm.chat_completion", chat("length-%d" % lie),
                        refuse=r"answered (nothing|200 with no completion)"))
    for host in LINK_LOCAL:
        out.append(case("http fetch redirect to %s" % host, "dankfleet.llm.gguf_fetch", fetch("redirect-host-" + host),
                        refuse=r"redirects to http://%s.*refused, .*link-local" % host.replace("[", r"\[")
                        .replace("]", r"\]")))
        out.append(case("http chat redirect to %s" % host, "dankfleet.llm.chat_completion", chat("redirect-host-" + host),
                        refuse=r"link-local"))
    for scheme in SCHEMES:
        out.append(case("http chat redirect to %s://" % scheme, "dankfleet.llm.chat_completion",
                        chat("redirect-to-" + scheme), refuse=r"refused, .*only http:// and https://"))
    out.append(case("http fetch 11 redirects", "dankfleet.llm.gguf_fetch", fetch("redirect-chain-11"),
                    refuse=r"more than 10 redirects"))
    out.append(case("http fetch url link-local", "dankfleet.llm.gguf_fetch",
                    fetch(url="http://169.254.169.254/latest/meta-data/m.gguf"), refuse=r"link-local"))
    for cred in CREDENTIALS:
        out.append(case("http fetch url with %s" % cred.replace(SECRET, "<pw>"), "dankfleet.llm.gguf_fetch",
                        fetch(url=base.replace("://", "://" + cred) + "/models/payload.gguf"), secret=SECRET,
                        refuse=r"carries credentials"))
        out.append(case("http chat url with %s" % cred.replace(SECRET, "<pw>"), "dankfleet.llm.chat_completion",
                        chat(url=base.replace("://", "://" + cred)), secret=SECRET, refuse=r"carries credentials"))
    for ws in WHITESPACE:
        shown = repr(ws)[1:-1]
        out.append(case("http fetch token + %s" % shown, "dankfleet.llm.gguf_fetch", fetch(token=SECRET + ws),
                        secret=SECRET, refuse=r"token has whitespace around it"))
        out.append(case("http chat api_key %s+" % shown, "dankfleet.llm.chat_completion", chat(api_key=ws + SECRET),
                        secret=SECRET, refuse=r"api_key has whitespace around it"))
    out.append(case("http fetch token with NUL", "dankfleet.llm.gguf_fetch", fetch(token=SECRET[:5] + "\x00" + SECRET),
                    secret=SECRET, refuse=r"token holds a control character"))
    out.append(case("http chat clean, key sent", "dankfleet.llm.chat_completion", chat(api_key=SECRET), secret=SECRET,
                    check=lambda r: None if r.get("content") == "ok" else "content %r" % r.get("content")))
    return out
