# -*- coding: utf-8 -*-
"""The serve shape (plugins/module_utils/plan/shape.py): the env file's one writer round-trips through its one reader
(llama_env.parse, systemd's reading) for any one-line value; each cross rule is written once and refuses what
llama.cpp would not run; the origin has two words."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import pytest
from hypothesis import given, strategies as st

from ansible_collections.dankfleet.llm.plugins.module_utils.base import llama_env
from ansible_collections.dankfleet.llm.plugins.module_utils.plan import shape
from ansible_collections.dankfleet.llm.tests.unit.hostile_testlib import hostile_text

NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True)
ONE_LINE = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters=[
    chr(c) for c in list(range(32)) + [127]]), max_size=80)


@given(NAMES, st.one_of(ONE_LINE, st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.booleans()),
       st.one_of(st.none(), ONE_LINE))
def test_a_written_line_reads_back_unchanged(name, value, reason):
    text = shape.env_line(name, value, reasons={name: reason} if reason is not None else None)
    variables, problems = llama_env.parse(text)
    assert problems == [] and variables == {name: str(value)}


@given(hostile_text())
def test_a_hostile_value_is_written_back_or_refused_never_mangled(value):
    try:
        text = shape.env_line("VALUE", value)
    except ValueError as exc:
        assert "control character" in str(exc)
        return
    assert llama_env.parse(text) == ({"VALUE": value}, [])


@pytest.mark.parametrize("value", ["a\nB=evil", "x\ry", "tab\there", "\x7f"])
def test_a_value_that_would_add_a_line_is_refused(value):
    with pytest.raises(ValueError, match="control character"):
        shape.env_line("ALIAS", value)


def test_the_reasons_and_the_comment_are_comments_above_the_value():
    text = shape.env_line("CTX_SIZE", 8192, {"CTX_SIZE": "The KV pool over all slots."}, {"CTX_SIZE": "lab: small"})
    assert text == "# The KV pool over all slots.\n# lab: small\nCTX_SIZE=8192\n"
    with pytest.raises(ValueError, match="not an environment variable name"):
        shape.env_line("1BAD", "x")


def test_the_origin_is_pinned_or_planned():
    settled = {"tensor_split": [], "ctx_size": 8192, "cache_ram": "auto", "n_cpu_moe": 0}
    assert shape.origin(settled) == {"tensor_split": "planned", "ctx_size": "pinned", "cache_ram": "planned",
                                     "n_cpu_moe": "pinned"}
    assert set(shape.ORIGINS) == {"pinned", "planned"}


def test_the_served_shape_fills_in_what_was_left_to_the_plan():
    settled = {"tensor_split": [], "ctx_size": 0, "cache_ram": "auto", "n_cpu_moe": "auto", "parallel": 2}
    out = shape.served(settled, {"tensor_split": [35, 30], "ctx_size": 393216, "cache_ram": 16384, "n_cpu_moe": 7})
    assert (out["tensor_split"], out["ctx_size"], out["cache_ram"], out["n_cpu_moe"], out["parallel"]) == (
        [35, 30], 393216, 16384, 7, 2)
    assert set(out["origin"].values()) == {"planned"}
    # no plan ran: llama.cpp's own defaults, never the word auto
    out = shape.served(settled)
    assert (out["tensor_split"], out["ctx_size"], out["cache_ram"], out["n_cpu_moe"]) == ([], 0, 8192, 0)
    # a pinned value is the inventory's, whatever a plan says
    out = shape.served(dict(settled, ctx_size=8192), {"ctx_size": 4096})
    assert out["ctx_size"] == 8192 and out["origin"]["ctx_size"] == "pinned"


@pytest.mark.parametrize("ctx,parallel,refused", [(8192, 2, False), (8193, 2, True), (0, 3, False), (9, 4, True),
                                                  ("8192", "3", True), (8192, 0, False)])
def test_the_context_divides_over_the_slots(ctx, parallel, refused):
    problem = shape.ctx_parallel_problem(ctx, parallel)
    assert bool(problem) == refused
    if problem:
        assert problem[0] == "llama_server_ctx_size" and "multiple of %s" % parallel in problem[1]
        assert "plan again" in shape.ctx_parallel_problem(ctx, parallel, planned=True)[1]


def test_the_split_has_one_share_per_device():
    assert shape.split_devices_problem([35, 30], ["ROCm0", "ROCm1"]) is None
    assert shape.split_devices_problem([], ["ROCm0"]) is None and shape.split_devices_problem([65], []) is None
    variable, message = shape.split_devices_problem([35, 30], ["ROCm0"])
    assert variable == "llama_server_tensor_split" and "1 device(s)" in message


def test_the_payload_layout():
    assert shape.payload_path({"name": "m", "file": "m.gguf"}, "/srv/models") == "/srv/models/m/m.gguf"
    assert shape.payload_path({"name": "m", "file": "m.gguf", "dest_dir": "/d/"}, "/srv") == "/d/m.gguf"
    assert shape.payload_path({"name": "m"}, "/srv") is None
