"""llama-bench's rows are read through their shape (issue 33): any JSON value at any position of a real row ends
in the row, typed, or the row dropped -- never a crash in cell_row, never NaN or a word as a rate."""
import json

from hypothesis import given, settings, strategies as st

from ansible_collections.dankfleet.llm.plugins.module_utils.bench.bench_batch import cell_row, parse_bench_output
from ansible_collections.dankfleet.llm.tests.unit import hostile_testlib as hostile

PP = {"build_commit": "abc1234", "build_number": 11434, "backends": "CPU", "n_prompt": 512, "n_gen": 0,
      "n_depth": 0, "avg_ts": 812.5, "stddev_ts": 3.1, "devices": "CPU", "tensor_split": "0.00"}
TG = dict(PP, n_prompt=0, n_gen=32, avg_ts=41.2, stddev_ts=0.4)


def test_real_rows_read_as_written_in_both_formats():
    for text in (json.dumps([PP, TG]), json.dumps(PP) + "\n" + json.dumps(TG) + "\n"):
        rows = parse_bench_output(text)
        assert rows == [PP, TG]
        row = cell_row(6144, 512, 0, rows, 0, "", None, 1.0, "llama-bench")
        assert (row["pp_tps"], row["tg_tps"], row["status"]) == (812.5, 41.2, "ok")


@settings(max_examples=300, deadline=None)
@given(case=hostile.hostile_answers([PP, TG]), jsonl=st.booleans())
def test_any_value_anywhere_is_a_typed_row_or_a_dropped_one(case, jsonl):
    _, rows = case
    if jsonl and isinstance(rows, list):
        text = "\n".join(hostile.dumps(r) for r in rows)
    else:
        text = hostile.dumps(rows)
    got = parse_bench_output(text)
    for r in got:
        assert isinstance(r["avg_ts"], (int, float)) and r["avg_ts"] == r["avg_ts"] and r["avg_ts"] >= 0
        assert isinstance(r["n_prompt"], int) and isinstance(r["n_gen"], int)
    row = cell_row(6144, 512, 0, got, 0, "", None, 1.0, "llama-bench")
    json.dumps(row, allow_nan=False)
