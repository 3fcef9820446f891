"""dankfleet.llm.gguf_info url=: a GGUF header read with Range requests from the repo's real range server
(tests/lab/range_http_server.py) gives the facts path= gives for the file, refuses what path= refuses for the same
cause, reads only the header, and refuses a server that does not answer Range truthfully, by name. header_only=
reads a file cut after its tensor table."""
import os
import shutil

import gen_models
import pytest
import range_http_server

from ansible_collections.dankfleet.llm.plugins.modules import gguf_info as module
from ansible_collections.dankfleet.llm.plugins.module_utils.plan import gguf_remote
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_facts import gguf_facts
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_reader import GGUFError
from ansible_collections.dankfleet.llm.tests.unit import planner_testlib as lib
from ansible_collections.dankfleet.llm.tests.unit.module_testlib import run_module

CORPUS = os.path.join(lib.FIXTURES, "bad_inputs")
BAD = sorted(f for f in os.listdir(CORPUS) if f.endswith((".gguf", ".safetensors")))
ANSIBLE_KEYS = ("changed", "invocation", "uid", "gid", "owner", "group", "mode", "state", "size", "path",
                "url", "bytes_fetched", "requests", "failed", "msg")


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    root = tmp_path_factory.mktemp("mirror")
    models = {}
    for kind in gen_models.MODEL_NAMES:
        models[kind] = gen_models.write_model(kind, root / ("%s.gguf" % kind))
    for name in BAD:
        shutil.copyfile(os.path.join(CORPUS, name), str(root / name))
    server, port = range_http_server.serve(str(root))
    yield root, "http://127.0.0.1:%d" % port, server, models
    server.close()


def run(capsys, **args):
    r = run_module(capsys, module.main, **args)
    return r, dict((k, v) for k, v in r.items() if k not in ANSIBLE_KEYS)


@pytest.mark.parametrize("kind", gen_models.MODEL_NAMES)
def test_url_gives_the_facts_of_the_file(mirror, capsys, kind):
    root, base, server, models = mirror
    by_path, facts_path = run(capsys, path=models[kind]["path"])
    by_url, facts_url = run(capsys, url="%s/%s.gguf" % (base, kind))
    assert not by_url.get("failed") and not by_url["changed"], by_url.get("msg")
    assert facts_url == facts_path
    assert facts_url["file_size"] == models[kind]["size"]
    assert by_url["url"] == by_url["path"] == "%s/%s.gguf" % (base, kind)
    # only the header and the tensor table (and the rest of a range), never the tensor data
    assert by_url["bytes_fetched"] <= max(facts_url["tensor_data_offset"], gguf_remote.FIRST_RANGE) + 1  # + the last byte
    assert by_url["bytes_fetched"] < models[kind]["size"] or models[kind]["size"] <= gguf_remote.FIRST_RANGE


@pytest.mark.parametrize("name", BAD)
def test_url_refuses_what_path_refuses(mirror, capsys, name):
    root, base, server, models = mirror
    by_path, _ = run(capsys, path=os.path.join(CORPUS, name))
    by_url, _ = run(capsys, url="%s/%s" % (base, name))
    if name.startswith("good_"):
        assert not by_path.get("failed") and not by_url.get("failed")
        return
    assert by_path["failed"] and by_url["failed"]
    # the same problem, named by the url instead of the path
    assert by_url["msg"] == by_path["msg"].replace(os.path.join(CORPUS, name), "%s/%s" % (base, name))


def test_ranges_grow_while_the_parser_needs_more(mirror, monkeypatch):
    root, base, server, models = mirror
    monkeypatch.setattr(gguf_remote, "FIRST_RANGE", 4096)
    g, source = gguf_remote.read_gguf_url("%s/qwen35-hybrid.gguf" % base)
    sizes = [4096 << i for i in range(source.requests)]
    assert source.requests >= 3 and source.fetched <= sum(sizes)
    assert source.fetched >= g.data_offset - 4096 and source.size == models["qwen35-hybrid"]["size"]
    assert gguf_remote.facts_from_gguf(g) == gguf_facts(models["qwen35-hybrid"]["path"]) | {"path": source.name}
    asked = [r["range"] for r in server.requests if r["path"].endswith("/qwen35-hybrid.gguf")][-source.requests:]
    assert asked[:2] == ["bytes=0-4095", "bytes=4096-12287"]


@pytest.mark.parametrize("fault, words", [
    ("ignore-range", "ignored the Range request"),
    ("range-from-0", "not the bytes asked"),
    ("lie-total-100", "not the bytes asked"),
    ("redirect-to-ftp", "the scheme of"),
    ("redirect-to-file", "the scheme of"),
    ("redirect-host-169.254.169.254", "link-local"),
    ("404", "HTTP 404"),
    ("bad-length", "nothing was used"),
    ("drop-after-4096", "broke off"),
])
def test_a_server_that_does_not_answer_range_truthfully_is_refused_by_name(mirror, capsys, monkeypatch, fault, words):
    root, base, server, models = mirror
    monkeypatch.setattr(gguf_remote, "FIRST_RANGE", 4096)
    # a file of more than one range, so a whole-file answer differs from the range asked
    r, _ = run(capsys, url="%s/_fault/%s/qwen35-hybrid.gguf" % (base, fault), timeout=3)
    assert r["failed"] and words in r["msg"], r["msg"]
    assert r["msg"].startswith(base)


@pytest.mark.parametrize("lie", ["twice", "less"])
def test_a_declared_size_the_server_does_not_hold_is_refused(mirror, monkeypatch, lie):
    root, base, server, models = mirror
    size = models["qwen35-hybrid"]["size"]
    claimed = size * 2 if lie == "twice" else size - 1
    with pytest.raises(GGUFError) as exc:
        gguf_remote.read_gguf_url("%s/_fault/lie-total-%d/qwen35-hybrid.gguf" % (base, claimed))
    assert exc.value.cause == "remote" and "nothing was used" in str(exc.value)


def test_the_token_goes_to_the_server_and_never_into_a_message(tmp_path, capsys):
    model = gen_models.write_model("dense-llama", tmp_path / "m.gguf")
    server, port = range_http_server.serve(str(tmp_path), token="s3cret-token")
    try:
        url = "http://127.0.0.1:%d/m.gguf" % port
        denied, _ = run(capsys, url=url)
        assert denied["failed"] and "HTTP 401" in denied["msg"] and "give token" in denied["msg"]
        # the option the plan's operator sets: the plan reads a url with its own token, never the fetch's
        assert "llm_plan_url_token" in denied["msg"]
        ok, facts = run(capsys, url=url, token="s3cret-token")
        assert not ok.get("failed") and facts["block_count"] == model["block_count"]
        bad, _ = run(capsys, url=url, token="s3cret-token\n")
        assert bad["failed"] and "whitespace" in bad["msg"] and "s3cret" not in str(bad)
    finally:
        server.close()


def test_url_path_and_paths_one_of_them(capsys, tmp_path):
    r = run_module(capsys, module.main)
    assert "one of the following is required: path, paths, url" in r["msg"]
    r = run_module(capsys, module.main, path=str(tmp_path / "a"), url="http://127.0.0.1:1/a.gguf")
    assert r["failed"] and "mutually exclusive" in r["msg"]


def test_header_only_reads_a_file_cut_after_its_tensor_table(tmp_path, capsys):
    model = gen_models.write_model("qwen35-hybrid", tmp_path / "m.gguf")
    full = gguf_facts(model["path"])
    cut = tmp_path / "cut.gguf"
    with open(model["path"], "rb") as fh:
        cut.write_bytes(fh.read(full["tensor_data_offset"]))
    refused, _ = run(capsys, path=str(cut))
    assert refused["failed"] and "truncated" in refused["msg"]
    ok, facts = run(capsys, path=str(cut), header_only=True)
    assert not ok.get("failed")
    assert facts.pop("file_size") == full["tensor_data_offset"]
    assert facts == dict((k, v) for k, v in full.items() if k not in ANSIBLE_KEYS + ("file_size",))
    paths, _ = run(capsys, paths={"target": str(cut)}, header_only=True)
    assert paths["files"]["target"]["block_count"] == full["block_count"]
    # cut inside the tensor table: still refused, header_only or not
    short = tmp_path / "short.gguf"
    short.write_bytes(cut.read_bytes()[:full["tensor_data_offset"] - 40])
    still, _ = run(capsys, path=str(short), header_only=True)
    assert still["failed"] and "truncated" in still["msg"]


def test_urls_reads_several_and_reports_the_unreadable(mirror, capsys):
    root, base, server, models = mirror
    r, _ = run(capsys, urls={"target": "%s/qwen35-mtp.gguf" % base, "bad": "%s/magic_only.gguf" % base,
                             "gone": "%s/missing.gguf" % base})
    assert not r.get("failed") and not r["changed"]
    files = r["files"]
    alone, _ = run(capsys, url="%s/qwen35-mtp.gguf" % base)
    assert files["target"] == dict((k, v) for k, v in alone.items() if k not in ("changed", "invocation"))
    bad, _ = run(capsys, url="%s/magic_only.gguf" % base)
    assert files["bad"] == {"url": "%s/magic_only.gguf" % base, "error": bad["msg"]}
    assert "HTTP 404" in files["gone"]["error"]
