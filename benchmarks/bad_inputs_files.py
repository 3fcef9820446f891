"""File-access classes for benchmarks/bad_inputs.py (issue 23): many cases per class, through the real modules.

    python benchmarks/bad_inputs.py --only files:      # just these

Classes, each crossed with every option it applies to (so a new option or a new kind is one line):

* not-a-file: a FIFO, a unix socket, a directory, /dev/zero, a link to a FIFO where a module reads a file
  (gguf_fetch progress_log and dest, gguf_info path, gpu_facts nvidia_smi_output_file and facts_file, plan_actual
  nvidia_smi_output_file and its records file, the gate's and plan_actual's env file, a recorded sysfs tree);
  every one must be refused by name in well under the hang limit;
* not-UTF-8: the same text inputs holding bytes that are not UTF-8, refused naming the byte offset;
* planted links: a directory owned by nobody (the service user's models directory) holding a link to a victim
  file in place of gguf_fetch's .part, .lock, stamp or progress log, or plan_actual's textfile: the victim
  must be unchanged afterwards, whatever the module answered;
* wrong kind where a directory is expected: trash_dir, a directories item, state_dir, textfile_dir, the
  textfile itself, dest's directory;
* names: dest names around NAME_MAX minus the stamp's suffix (refused before anything changes, or fetched and
  stamped), textfile_name spellings that climb out of textfile_dir;
* kernel files: host_state over /proc and /sys files whose size says 0 (read to EOF, capped, never hung).

Run as root (the deploy's case); the nobody-owned directories need it.
"""
from __future__ import annotations

import hashlib
import os
import socket
import stat

NOBODY = 65534
VICTIM_TEXT = b"root:x:0:0:victim:/root:/bin/bash\n"


def _kinds(d, name):
    """{kind: path} of things that are not regular files, made under d."""
    os.makedirs(d, exist_ok=True)
    out = {}
    fifo = os.path.join(d, name + ".fifo")
    os.mkfifo(fifo)
    out["FIFO"] = fifo
    sock = os.path.join(d, name + ".sock")
    s = socket.socket(socket.AF_UNIX)
    here = os.getcwd()
    os.chdir(d)           # bound by its short relative name: AF_UNIX paths are limited to 108 bytes
    try:
        s.bind(os.path.basename(sock))   # left bound: the socket file stays a socket for the module to meet
    finally:
        os.chdir(here)
    _SOCKETS.append(s)
    out["socket"] = sock
    sub = os.path.join(d, name + ".dir")
    os.mkdir(sub)
    out["directory"] = sub
    out["/dev/zero"] = "/dev/zero"
    link = os.path.join(d, name + ".link-to-fifo")
    os.symlink(fifo, link)
    out["link to a FIFO"] = link
    return out


_SOCKETS = []
_KIND_RE = {"FIFO": r"FIFO|named pipe", "socket": r"a socket",
            "directory": r"directory", "/dev/zero": r"character device", "link to a FIFO": r"FIFO|symbolic link"}


def _mkdir(*parts):
    path = os.path.join(*parts)
    os.makedirs(path, exist_ok=True)
    return path


def _write(path, data):
    with open(path, "wb") as fh:
        fh.write(data)


def cases(tmp, base, sha, Case, payload_size):
    root = os.path.join(tmp, "files")
    os.makedirs(root)
    url = "%s/models/payload.gguf" % base
    dead_url = "http://127.0.0.1:9/m.gguf"   # nothing listens: a case that reaches the network fails differently
    out = []

    def fetch_args(dest, **kw):
        a = {"url": dead_url, "dest": dest, "size": payload_size, "sha256": sha, "retries": 0, "retry_delay": 0,
             "timeout": 5, "disk_margin_bytes": 0}
        a.update(kw)
        return a

    env_ok = os.path.join(root, "ok.env")
    _write(env_ok, b"LLAMA_BIN=/bin/true\nMODEL_PATH=\n")
    state = os.path.join(root, "state")
    os.makedirs(state)

    def plan_args(**kw):
        a = {"backend": "cpu", "pid": os.getpid(), "env_file": env_ok, "state_dir": state, "record": False}
        a.update(kw)
        return a

    def gate_args(env):
        return {"env_file": env, "service": "llama-server.service"}

    # --- not-a-file, per option --------------------------------------------------------------------------
    readers = [
        ("gguf_fetch progress_log", "dankfleet.llm.gguf_fetch",
         lambda p, n: fetch_args(os.path.join(_mkdir(root, "pl-" + n), "m.gguf"), progress_log=p),
         r"progress_log .*(%s)"),
        ("gguf_fetch dest", "dankfleet.llm.gguf_fetch", lambda p, n: fetch_args(p), r"(%s)"),
        ("gguf_info path", "dankfleet.llm.gguf_info", lambda p, n: {"path": p}, r"(%s)"),
        ("gpu_facts nvidia_smi_output_file", "dankfleet.llm.gpu_info",
         lambda p, n: {"sysfs_root": os.path.join(root, "emptysys"), "nvidia_smi_output_file": p},
         r"nvidia_smi_output_file .*(%s)"),
        ("gpu_facts facts_file", "dankfleet.llm.gpu_info", lambda p, n: {"facts_file": p}, r"facts_file .*(%s)"),
        ("plan_actual nvidia_smi_output_file", "dankfleet.llm.plan_actual",
         lambda p, n: plan_args(backend="cuda", nvidia_smi_output_file=p, env_file=env_cuda),
         r"nvidia_smi_output_file .*(%s)"),
        ("plan_actual env_file", "dankfleet.llm.plan_actual", lambda p, n: plan_args(env_file=p), r"env file .*(%s)"),
        ("llama_server_gate env_file", "dankfleet.llm.llama_server_gate", lambda p, n: gate_args(p),
         r"env file .*(%s)"),
    ]
    os.makedirs(os.path.join(root, "emptysys"))
    env_cuda = os.path.join(root, "cuda.env")
    _write(env_cuda, b"LLAMA_BIN=/bin/true\nMODEL_PATH=\nDEVICES=CUDA0\n")
    for label, module, make, refuse in readers:
        n = label.replace(" ", "-")
        for kind, path in _kinds(os.path.join(root, "kinds-" + n), n).items():
            if label == "gguf_fetch dest" and kind in ("directory", "/dev/zero"):
                continue   # a directory dest and a device are refused as dest names elsewhere (bad_inputs.py)
            out.append(Case("files: not-a-file %s is %s" % (label, kind), module, make(path, n + kind[:3]),
                            refuse=refuse % _KIND_RE[kind]))

    # the records file of plan_actual: its state_dir holds the wrong kind at plan-vs-actual.json
    for kind in ("FIFO", "directory", "socket", "link to a FIFO"):
        sd = os.path.join(root, "records-" + kind.replace(" ", "-").replace("/", ""))
        os.makedirs(sd)
        made = _kinds(os.path.join(sd, "x"), "r")[kind]
        os.rename(made, os.path.join(sd, "plan-vs-actual.json"))
        out.append(Case("files: not-a-file plan_actual records file is %s" % kind, "dankfleet.llm.plan_actual",
                        plan_args(state_dir=sd), refuse=r"plan-vs-actual.json: .*(%s|symbolic link)" % _KIND_RE[kind]))

    # a recorded sysfs tree with the wrong kind where gpu_facts reads an attribute
    for kind in ("FIFO", "directory", "socket"):
        tree = os.path.join(root, "sys-" + kind)
        dev = os.path.join(tree, "sys", "class", "drm", "card0", "device")
        os.makedirs(dev)
        made = _kinds(os.path.join(tree, "x"), "v")[kind]
        os.rename(made, os.path.join(dev, "vendor"))
        out.append(Case("files: not-a-file gpu_facts sysfs_root attribute is %s" % kind, "dankfleet.llm.gpu_info",
                        {"sysfs_root": tree}, refuse=r"vendor: .*(%s)" % _KIND_RE[kind]))

    # --- not UTF-8 --------------------------------------------------------------------------------------
    for i, bad in enumerate((b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"ok\n\x80")):
        d = os.path.join(root, "utf8-%d" % i)
        os.makedirs(d)
        env = os.path.join(d, "bad.env")
        _write(env, b"LLAMA_BIN=/bin/true\nX=" + bad + b"\n")
        smi = os.path.join(d, "smi.csv")
        _write(smi, b"0, NVIDIA " + bad + b", 00000000:01:00.0, 81559, 1, 9.0, 4, 16\n")
        facts = os.path.join(d, "facts.json")
        _write(facts, b'{"gpus": [], "x": "' + bad + b'"}')
        sd = os.path.join(d, "state")
        os.makedirs(sd)
        _write(os.path.join(sd, "plan-vs-actual.json"), b'[{"x": "' + bad + b'"}]')
        tree = os.path.join(d, "sys")
        dev = os.path.join(tree, "sys", "class", "drm", "card0", "device")
        os.makedirs(dev)
        _write(os.path.join(dev, "vendor"), b"0x1002" + bad + b"\n")
        for label, module, args in (
                ("llama_server_gate env_file", "dankfleet.llm.llama_server_gate", gate_args(env)),
                ("plan_actual env_file", "dankfleet.llm.plan_actual", plan_args(env_file=env)),
                ("gpu_facts nvidia_smi_output_file", "dankfleet.llm.gpu_info",
                 {"sysfs_root": os.path.join(root, "emptysys"), "nvidia_smi_output_file": smi}),
                ("gpu_facts facts_file", "dankfleet.llm.gpu_info", {"facts_file": facts}),
                ("plan_actual nvidia_smi_output_file", "dankfleet.llm.plan_actual",
                 plan_args(backend="cuda", env_file=env_cuda, nvidia_smi_output_file=smi)),
                ("plan_actual records file", "dankfleet.llm.plan_actual", plan_args(state_dir=sd)),
                ("gpu_facts sysfs attribute", "dankfleet.llm.gpu_info", {"sysfs_root": tree})):
            out.append(Case("files: not-UTF-8 %s (%r)" % (label, bad), module, args,
                            refuse=r"not UTF-8 text: byte 0x[0-9a-f]{2} at offset \d+"))

    # --- planted links in a directory the service user owns ----------------------------------------------
    victims = []

    def victim(name):
        p = os.path.join(root, "victims", name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        _write(p, VICTIM_TEXT)
        os.chmod(p, 0o600)
        victims.append(p)
        return p

    def untouched(path):
        def check(r):
            with open(path, "rb") as fh:
                return None if fh.read() == VICTIM_TEXT else "the victim %s changed" % path
        return check

    def models_dir(name):
        d = os.path.join(root, "home-" + name, "dank", "models")
        os.makedirs(d)
        for p in (d, os.path.dirname(d)):
            os.chown(p, NOBODY, NOBODY)
        return d

    for suffix in (".part", ".lock", ".verified.json"):
        for target_kind in ("file", "dangling"):
            d = models_dir("link%s-%s" % (suffix, target_kind))
            v = victim("v%s-%s" % (suffix, target_kind))
            if target_kind == "dangling":
                v_new = v + ".new"   # a link to a name that does not exist yet: O_CREAT through it makes the file
                os.symlink(v_new, os.path.join(d, "m.gguf" + suffix))
                check = (lambda p: lambda r: ("root created %s through the link" % p) if os.path.exists(p) else None)(v_new)
            else:
                os.symlink(v, os.path.join(d, "m.gguf" + suffix))
                check = untouched(v)
            out.append(Case("files: planted link gguf_fetch m.gguf%s -> %s" % (suffix, target_kind),
                            "dankfleet.llm.gguf_fetch", fetch_args(os.path.join(d, "m.gguf"), url=url),
                            refuse=r"symbolic link", check=check))
    d = models_dir("progress")
    v = victim("progress")
    os.symlink(v, os.path.join(d, "fetch.log"))
    out.append(Case("files: planted link gguf_fetch progress_log", "dankfleet.llm.gguf_fetch",
                    fetch_args(os.path.join(d, "m.gguf"), url=url, progress_log=os.path.join(d, "fetch.log")),
                    refuse=r"progress_log .*(symbolic link|a file)", check=untouched(v)))
    # a link as an intermediate component below the service user's directory
    d = models_dir("intermediate")
    os.makedirs(os.path.join(root, "victims", "etc"), exist_ok=True)
    os.symlink(os.path.join(root, "victims", "etc"), os.path.join(d, "m"))
    out.append(Case("files: planted link gguf_fetch dest directory is a link in nobody's dir",
                    "dankfleet.llm.gguf_fetch", fetch_args(os.path.join(d, "m", "m.gguf"), url=url),
                    refuse=r"is a symbolic link in .*which nobody can write",
                    check=lambda r: None if not os.listdir(os.path.join(root, "victims", "etc")) else "wrote there"))
    # plan_actual's textfile: a link there is replaced by the new file, never written through
    tf = models_dir("textfile")
    v = victim("textfile")
    os.symlink(v, os.path.join(tf, "llm_plan_actual.prom"))
    sd = os.path.join(root, "state-textfile")
    os.makedirs(sd)

    def textfile_replaced(r):
        problem = untouched(v)(r)
        if problem:
            return problem
        p = os.path.join(tf, "llm_plan_actual.prom")
        return None if stat.S_ISREG(os.lstat(p).st_mode) else "the textfile is still a link"
    out.append(Case("files: planted link plan_actual textfile", "dankfleet.llm.plan_actual",
                    plan_args(state_dir=sd, textfile_dir=tf, record=True), check=textfile_replaced))

    # --- wrong kind where a directory is expected ---------------------------------------------------------
    a_file = os.path.join(root, "a-file")
    _write(a_file, b"x")
    fifo_dir = _kinds(os.path.join(root, "wrongdir"), "w")["FIFO"]
    for kind, path in (("a file", a_file), ("a FIFO", fifo_dir)):
        d = os.path.join(root, "wk-" + kind.replace(" ", "-"))
        os.makedirs(d)
        out += [
            Case("files: wrong kind gguf_fetch trash_dir is %s" % kind, "dankfleet.llm.gguf_fetch",
                 fetch_args(os.path.join(d, "m.gguf"), trash_dir=path), refuse=r"trash_dir .* not a directory"),
            Case("files: wrong kind gguf_fetch directories item is %s" % kind, "dankfleet.llm.gguf_fetch",
                 fetch_args(os.path.join(path, "m.gguf"), directories=[{"path": path}]),
                 refuse=r"directories: .* not a directory"),
            Case("files: wrong kind gguf_fetch dest's directory is %s" % kind, "dankfleet.llm.gguf_fetch",
                 fetch_args(os.path.join(path, "m.gguf")), refuse=r"(not a directory|does not exist)"),
            Case("files: wrong kind plan_actual state_dir is %s" % kind, "dankfleet.llm.plan_actual",
                 plan_args(state_dir=path, record=True), refuse=r"state_dir .*(does not exist|not a directory)"),
            Case("files: wrong kind plan_actual textfile_dir is %s" % kind, "dankfleet.llm.plan_actual",
                 plan_args(textfile_dir=path, record=True, state_dir=d),
                 refuse=r"textfile_dir .*(does not exist|not a directory)"),
        ]
    tfd = os.path.join(root, "textfile-is-dir")
    os.makedirs(os.path.join(tfd, "llm_plan_actual.prom"))
    sd2 = os.path.join(root, "state-tfd")
    os.makedirs(sd2)
    out.append(Case("files: wrong kind plan_actual textfile is a directory", "dankfleet.llm.plan_actual",
                    plan_args(state_dir=sd2, textfile_dir=tfd, record=True), refuse=r"is a directory where"))

    # --- names ---------------------------------------------------------------------------------------------
    for length in (242, 245, 249, 250, 255, 256):
        d = os.path.join(root, "name-%d" % length)
        os.makedirs(d)
        name = "m" * (length - 5) + ".gguf"

        def nothing_made(r, d=d):
            return None if not os.listdir(d) else "left %s" % os.listdir(d)
        out.append(Case("files: names gguf_fetch dest of %d bytes" % length, "dankfleet.llm.gguf_fetch",
                        fetch_args(os.path.join(d, name), url=url),
                        refuse=r"dest file name is %d bytes.*at most 241.*Nothing was downloaded" % length))
    d = os.path.join(root, "name-241")
    os.makedirs(d)
    longest = os.path.join(d, "m" * 236 + ".gguf")

    def fetched_and_stamped(r):
        if r.get("status") != "downloaded" or not os.path.exists(longest + ".verified.json"):
            return "status %r, stamp present %s" % (r.get("status"), os.path.exists(longest + ".verified.json"))
        with open(longest, "rb") as fh:
            return None if hashlib.sha256(fh.read()).hexdigest() == sha else "wrong bytes"
    out.append(Case("files: names gguf_fetch dest of 241 bytes (the longest with room for its stamp)",
                    "dankfleet.llm.gguf_fetch", fetch_args(longest, url=url), check=fetched_and_stamped))
    tfn = os.path.join(root, "tf-names")
    os.makedirs(tfn)
    for name in ("../escape.prom", "../../etc/cron.d/x", "/etc/cron.d/x", "..", ".", "sub/x.prom", "x\u0000y",
                 "a" * 256):
        out.append(Case("files: names plan_actual textfile_name %r" % name[:40], "dankfleet.llm.plan_actual",
                        plan_args(textfile_dir=tfn, record=True, state_dir=state), refuse=r"textfile_name"))
        out[-1].args["textfile_name"] = name

    # --- kernel files through host_state ------------------------------------------------------------------
    kernel = [p for p in ("/proc/self/status", "/proc/self/pagemap", "/proc/self/environ", "/proc/kmsg",
                          "/proc/self/mem", "/sys/kernel/tracing/trace_pipe",
                          "/sys/kernel/debug/tracing/trace_pipe", "/proc/self/task", "/dev/zero", "/dev/null")
              if os.path.lexists(p)]

    def answered(path):
        def check(r):
            entry = (r.get("paths") or {}).get(path)
            return None if isinstance(entry, dict) and entry.get("exists") else "no entry for %s: %r" % (path, entry)
        return check
    for p in kernel:
        out.append(Case("files: kernel file host_state %s" % p, "dankfleet.llm.host_state_info", {"paths": [p]},
                        check=answered(p)))
    return out
