"""benchmarks/rollback_time.py: the dark spans of the port and the switch's parts from the json callback's output
(the lab run itself is the lead's: `python benchmarks/rollback_time.py` against a staged lab)."""
import pytest

import rollback_time as rt


def test_the_port_is_dark_from_the_last_answer_before_to_the_first_after():
    samples = [(0.0, True), (1.0, True), (2.0, False), (3.0, False), (4.0, True), (5.0, False)]
    assert rt.dark_spans(samples) == [(1.0, 4.0), (4.0, None)]
    assert rt.dark_spans([(0.0, True), (1.0, True)]) == []


def task(name, start, end, skipped=False):
    return {"task": {"name": name, "duration": {"start": "2026-09-21T03:00:%02d.000000Z" % start,
                                                "end": "2026-09-21T03:00:%02d.000000Z" % end}},
            "hosts": {"lab": {"skipped": skipped}}}


@pytest.fixture
def parts_of():
    """The json callback's result of plays (each a list of task()s) on host lab, through rt.parts_of: the parts
    as (start, end) seconds after 03:00:00, and the slow roles named."""
    base = rt.parse_time("2026-09-21T03:00:00Z")

    def run(*plays):
        parts, slow = rt.parts_of({"plays": [{"tasks": tasks} for tasks in plays]}, "lab")
        return dict((k, (a - base, b - base)) for k, (a, b) in parts.items()), slow
    return run


def test_the_parts_follow_the_markers_and_a_slow_role_that_ran_is_named(parts_of):
    parts, slow = parts_of([
        task("Settle the inventory", 0, 2),
        task("Switch - refuse when nothing is staged or the host does not match the staged record", 2, 3),
        task("dankfleet.llm.llama_server : Refuse a missing binary or payload", 3, 4),
        task("dankfleet.llm.runtime_retire : Retire each runtime", 4, 9),
        task("dankfleet.llm.llama_server : Start the unit when it is down and nothing changed", 9, 10),
        task("dankfleet.llm.llama_server : Gate the new shape; on failure roll back", 10, 30),
        task("dankfleet.llm.gguf_fetch : Fetch each missing, partial or wrong file", 30, 31),
        task("dankfleet.llm.llama_cpp_build : Install | bundle", 31, 32, skipped=True),
    ])
    assert parts == {
        "settle, facts, plan": (0, 2), "staged-record check": (2, 3), "serve preflight again (nothing rendered)": (3, 4),
        "retire the predecessor": (4, 9), "start": (9, 10), "gate": (10, 31)}
    assert slow == ["dankfleet.llm.gguf_fetch : Fetch each missing, partial or wrong file"]


def test_the_rollbacks_first_play_is_no_preflight_and_no_gate_and_a_part_never_goes_back(parts_of):
    """The rollback reads its recorded shape with serve-role tasks before the switch's check ("Look for the last
    gated shape"), and the gate's plan-vs-actual runs after verify: neither moves a part (the first lab run's parts
    overlapped, gate and preflight both spanning the whole switch)."""
    parts, slow = parts_of(
        [task("dankfleet.llm.llama_server : Look for the last gated shape", 1, 2),
         task("Read the staged record (a staged shape not switched to yet wins over a record)", 2, 3)],
        [task("Settle the inventory", 3, 4),
         task("Switch - refuse when nothing is staged or the host does not match the staged record", 4, 5),
         task("dankfleet.llm.llama_server : Look for the last gated shape", 5, 6),
         task("dankfleet.llm.runtime_retire : Retire each runtime", 6, 9),
         task("dankfleet.llm.llama_server : Enable the unit", 9, 10),
         task("dankfleet.llm.llama_server : Gate: run the checks - new shape", 10, 20),
         task("dankfleet.llm.llama_server : Verify: run the checks - new shape", 20, 25),
         task("dankfleet.llm.llama_server : Plan vs actual after a passing gate (warns, never fails)", 25, 26),
         task("dankfleet.llm.llama_server : Publish the role's result (llama_server_result)", 26, 27),
         task("Switch - mark the staged shape switched and say how long the switch took", 27, 28)])
    assert parts == {
        "settle, facts, plan": (1, 4), "staged-record check": (4, 5), "serve preflight again (nothing rendered)": (5, 6),
        "retire the predecessor": (6, 9), "start": (9, 10), "gate": (10, 20), "verify": (20, 27),
        "mark, report": (27, 28)}
    assert slow == []
