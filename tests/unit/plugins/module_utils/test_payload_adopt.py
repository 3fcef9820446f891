# -*- coding: utf-8 -*-
"""Payload adoption (issue 36, item 2): a manifest entry with a placeholder size or sha256 whose file is already on
the host gets the file's own values PROPOSED in the checklist, hashed once; a file that disagrees with a value the
inventory declares is not proposed; complete and absent entries are not read; hostile module input is a named
refusal. Real files in a temporary directory, the real settle placeholders of the production inventory's shape."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import hashlib
import os

import pytest
from hypothesis import HealthCheck, given, settings

from ansible_collections.dankfleet.llm.plugins.module_utils.host import payload_adopt as pa
from ansible_collections.dankfleet.llm.plugins.module_utils.plan import settle
from ansible_collections.dankfleet.llm.plugins.module_utils.base import typed_reader as tr
from ansible_collections.dankfleet.llm.plugins.module_utils.host.gguf_fetch import write_stamp
from ansible_collections.dankfleet.llm.tests.unit import hostile_testlib as hostile

URL_T = "https://huggingface.co/orcarouter/Q-GGUF/resolve/main/Q-Q8_0.gguf"
URL_M = "https://huggingface.co/orcarouter/Q-GGUF/resolve/main/mmproj-f16.gguf"
URL_S = "https://huggingface.co/other/S-GGUF/resolve/main/mmproj-f16.gguf"  # same file name, another repo
BODY = b"GGUF" + bytes(range(256)) * 64


def entry(role, file, url, size=0, sha256="FILL-the-Hub-LFS-oid"):
    return {"role": role, "name": "Q-GGUF", "file": file, "url": url, "size": size, "sha256": sha256}


@pytest.fixture()
def host(tmp_path):
    """A models directory holding the target (present), not the mmproj (absent)."""
    target = tmp_path / "Q-Q8_0.gguf"
    target.write_bytes(BODY)
    return {"target": str(target), "mmproj": str(tmp_path / "mmproj-f16.gguf")}


class Counting(object):
    def __init__(self):
        self.paths = []

    def __call__(self, path):
        self.paths.append(path)
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()


def test_a_present_placeholder_entry_is_hashed_once_and_proposed(host):
    hasher = Counting()
    found = pa.propose([entry("target", "Q-Q8_0.gguf", URL_T), entry("mmproj", "mmproj-f16.gguf", URL_M)], host, hasher)
    assert hasher.paths == [host["target"]]  # the absent file is the fetch's: not read
    assert found[0] == dict(role="target", file="Q-Q8_0.gguf", path=host["target"], url=URL_T, status="proposed",
                            size=len(BODY), sha256=hashlib.sha256(BODY).hexdigest(), by="sha256")
    assert found[1]["status"] == "absent"


def test_a_complete_entry_is_not_read(host):
    hasher = Counting()
    sha = hashlib.sha256(BODY).hexdigest()
    found = pa.propose([entry("target", "Q-Q8_0.gguf", URL_T, size=len(BODY), sha256=sha)], host, hasher)
    assert found[0]["status"] == "complete" and hasher.paths == []


def test_a_fetch_stamp_of_this_exact_file_is_read_instead_of_hashing(host):
    sha = hashlib.sha256(BODY).hexdigest()
    write_stamp(host["target"], sha, URL_T)
    hasher = Counting()
    found = pa.propose([entry("target", "Q-Q8_0.gguf", URL_T)], host, hasher)
    assert (found[0]["status"], found[0]["by"], found[0]["sha256"], hasher.paths) == ("proposed", "stamp", sha, [])
    # the file rewritten in place (same size): the stamp no longer vouches (ctime moved), the file is hashed
    with open(host["target"], "r+b") as f:
        f.write(b"FUGG")
    found = pa.propose([entry("target", "Q-Q8_0.gguf", URL_T)], host, hasher)
    assert found[0]["by"] == "sha256" and found[0]["sha256"] != sha and hasher.paths == [host["target"]]


def test_a_short_file_against_a_declared_size_is_not_proposed(host):
    """The runbook's fetch-script bug: a locally observed size once became the declared one."""
    hasher = Counting()
    found = pa.propose([entry("target", "Q-Q8_0.gguf", URL_T, size=len(BODY) + 96)], host, hasher)
    assert found[0]["status"] == "mismatch" and "size" not in found[0] and "sha256" not in found[0]
    assert "is %d bytes, the inventory declares %d" % (len(BODY), len(BODY) + 96) in found[0]["problem"]
    assert hasher.paths == []  # refused by its size, before a pass over the bytes


def test_a_file_that_disagrees_with_a_declared_sha256_is_not_proposed(host):
    found = pa.propose([entry("target", "Q-Q8_0.gguf", URL_T, sha256="ab" * 32)], host, Counting())
    assert found[0]["status"] == "mismatch" and "declares " + "ab" * 32 in found[0]["problem"]


def test_a_link_or_a_directory_is_not_adopted(host, tmp_path):
    os.symlink(host["target"], str(tmp_path / "link.gguf"))
    os.mkdir(str(tmp_path / "dir.gguf"))
    found = pa.propose([entry("target", "x", URL_T), entry("mmproj", "y", URL_M)],
                       {"target": str(tmp_path / "link.gguf"), "mmproj": str(tmp_path / "dir.gguf")}, Counting())
    assert [f["status"] for f in found] == ["unreadable", "unreadable"]
    assert all("not a regular file" in f["problem"] for f in found)


def test_a_role_without_a_path_is_left_out(host):
    assert pa.propose([entry("drafter", "d.gguf", URL_M)], host, Counting()) == []


def _placeholders():
    """The settle step's placeholders of a production-shaped inventory: the files map written out (two entries with
    one file name in two repos), the manifest templated from it."""
    files = {"q8": entry("target", "Q-Q8_0.gguf", URL_T), "mm": entry("mmproj", "mmproj-f16.gguf", URL_M),
             "swift_mm": entry("mmproj", "mmproj-f16.gguf", URL_S)}
    for e in files.values():
        del e["role"]
    return settle.placeholders({"frank_medium_files": files,
                                "gguf_fetch_manifest": [dict(files["q8"], role="target"), dict(files["mm"], role="mmproj")]},
                               derived={"gguf_fetch_manifest"})


def test_the_checklist_proposes_what_the_host_proves_and_keeps_the_rest(host):
    placeholders = _placeholders()
    assert all(p.get("url") for p in placeholders)  # every manifest-shaped item names its entry's url
    findings = pa.propose([entry("target", "Q-Q8_0.gguf", URL_T), entry("mmproj", "mmproj-f16.gguf", URL_M)], host)
    lines = pa.checklist(placeholders, findings)
    sha = hashlib.sha256(BODY).hexdigest()
    proposal = [line for line in lines if "proposed" in line]
    assert proposal == ["frank_medium_files.q8: proposed from the file on the host (%s, by one sha256 pass) - confirm "
                        "against the Hub's size and LFS oid, then write size: %d and sha256: %s" % (host["target"], len(BODY), sha)]
    rest = [line for line in lines if "proposed" not in line]
    # the absent mmproj and the other repo's file of the same name stay to fill; the proposed entry's lines are gone
    assert sorted(rest) == ["frank_medium_files.mm: size 0 (the file's size on the Hub), sha256 FILL-the-Hub-LFS-oid",
                            "frank_medium_files.swift_mm: size 0 (the file's size on the Hub), sha256 FILL-the-Hub-LFS-oid"]
    assert len(pa.unproved(placeholders, findings)) == len(placeholders) - 2


def test_a_refused_file_is_a_checklist_line_and_proves_nothing(host):
    placeholders = _placeholders()
    findings = pa.propose([entry("target", "Q-Q8_0.gguf", URL_T, size=7)], host, Counting())
    lines = pa.checklist(placeholders, findings)
    assert any(line.startswith("gguf_fetch_manifest[target]: not adopted - ") for line in lines)
    assert pa.unproved(placeholders, findings) == tr.read(pa.PLACEHOLDER_ITEMS, placeholders, "x")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hostile.hostile_answers({"manifest": [entry("target", "Q-Q8_0.gguf", URL_T)], "paths": {"target": "/nonexistent/x"}}))
def test_hostile_module_input_is_a_named_refusal(value):
    if not isinstance(value, dict) or "manifest" not in value or "paths" not in value:
        return  # the module's argument spec hands over both, whatever they hold
    try:
        found = pa.propose(value["manifest"], value["paths"], Counting())
    except tr.ShapeError as exc:
        assert str(exc).startswith("payload_adopt_info")
        return
    assert all(f["status"] in pa.STATUSES for f in found)


@settings(max_examples=150, deadline=None)
@given(hostile.hostile_answers({"findings": [{"role": "target", "file": "f", "path": "/p", "url": URL_T,
                                              "status": "proposed", "size": 3, "sha256": "ab" * 32, "by": "sha256"}],
                                "placeholders": [{"variable": "v", "where": "e.sha256", "value": "FILL-x", "url": URL_T}]}))
def test_hostile_findings_on_the_controller_are_a_named_refusal(value):
    if not isinstance(value, dict) or "findings" not in value or "placeholders" not in value:
        return
    try:
        lines = pa.checklist(value["placeholders"], value["findings"])
    except tr.ShapeError:
        return
    assert all(isinstance(line, str) and "\x1b" not in line for line in lines)
