"""The lab's and the rehearsal's payload pins are the generator's bytes.

inventory/lab (make lab, molecule default) and inventory/rehearsal (molecule production) declare the
size and sha256 of every generated file they fetch from the lab's model mirror - never read from the
files. A change to tests/lab/gen_models.py that moves a file's bytes must fail here, naming the entry
and both values, instead of failing a molecule fetch ten minutes in. Both serve with vision on: the
mmproj entries are the generated projector, not a stand-in.
"""
from __future__ import annotations

import functools
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

import gen_models

REPO = Path(__file__).resolve().parents[3]
LAB = REPO / "inventory/lab/group_vars/llm_endpoints/lab.yml"
REHEARSAL = REPO / "inventory/rehearsal/host_vars/dankserver/50-rehearsal.yml"
PRODUCTION = REPO / "inventory/production/host_vars/dankserver.yml"


def _load(path):
    return yaml.safe_load(path.read_text())


def _pins():
    lab = [("lab", e["name"] + "/" + e["file"], e) for e in _load(LAB)["gguf_fetch_manifest"]]
    rehearsal = [("rehearsal", key, e) for key, e in sorted(_load(REHEARSAL)["frank_medium_files"].items())]
    return lab + rehearsal


PINS = _pins()


@functools.lru_cache(maxsize=None)
def generated(name: str, tmp: str) -> tuple:
    path = Path(tmp) / f"{name}.gguf"
    entry = (gen_models.write_projector(name, path) if name in gen_models.PROJECTORS
             else gen_models.write_model(name, path))
    return entry["size"], entry["sha256"]


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("pins"))


@pytest.mark.parametrize("where,key,entry", PINS, ids=["%s:%s" % (w, k) for w, k, _ in PINS])
def test_pin_is_the_generators_bytes(where, key, entry, out_dir):
    url = urlsplit(entry["url"])
    assert url.hostname == "127.0.0.1", f"{where} {key}: {entry['url']} is not the lab's model mirror"
    name = url.path.rsplit("/", 1)[-1].removesuffix(".gguf")
    assert name in gen_models.MODEL_NAMES + gen_models.PROJECTOR_NAMES, f"{where} {key}: {name} is not generated"
    size, sha = generated(name, out_dir)
    assert (entry["size"], entry["sha256"]) == (size, sha), (
        f"{where} {key}: pinned size {entry['size']} / sha256 {entry['sha256']}, but gen_models writes "
        f"{name}.gguf as {size} / {sha}: re-pin the entry (or revert the generator change)")


def test_mmproj_entries_are_the_projector_and_vision_is_on():
    lab = _load(LAB)
    mm = [e for e in lab["gguf_fetch_manifest"] if e["role"] == "mmproj"]
    assert [e["url"].rsplit("/", 1)[-1] for e in mm] == ["mmproj-qwen35.gguf"]
    target = [e for e in lab["gguf_fetch_manifest"] if e["role"] == "target"][0]
    # beside the target, as on dankserver (the fetch puts <name>/<file>)
    assert mm[0]["name"] == target["name"]
    assert gen_models.PROJECTORS["mmproj-qwen35"]["projects_for"] == target["file"].removesuffix(".gguf")
    assert lab["llama_server_vision"] is True

    rehearsal = _load(REHEARSAL)
    assert "llama_server_vision" not in rehearsal, "the rehearsal serves production's vision setting"
    shapes = _load(PRODUCTION)["frank_medium_shapes"]
    files = rehearsal["frank_medium_files"]
    for shape, spec in shapes.items():
        key = spec["payload"].get("mmproj")
        assert bool(key) == bool(spec["vision"]), shape
        if key:
            assert files[key]["url"].endswith("/mmproj-qwen35.gguf"), (shape, key)
