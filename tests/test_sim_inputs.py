"""`clusterfit simulate` inputs the fuzzing pass found read wrongly: traces (booleans, repeated columns, prompts of
0 tokens), failures outside the run or naming no option, output paths naming no option, what a scenario ran."""

from __future__ import annotations

import json

import pytest

#: A small trace-driven simulate run; the trace file is added by each test.
TRACE_RUN = ("simulate", "meta-llama/Llama-3.1-8B", "--system", "hgx_h200", "--replicas", "1")


def _one_error(code: int, err: str) -> str:
    """The one error line of a run that must exit 2."""
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return " ".join(err.split())


@pytest.mark.parametrize("name, text, match", [
    # a JSON true was read as 1 token (README: true / false are never read as 1 / 0)
    ("t.jsonl", '{"arrival_s": 0, "input_tokens": 5, "output_tokens": 5}\n'
                '{"arrival_s": 1, "input_tokens": true, "output_tokens": 5}\n',
     "t.jsonl:2: input tokens must be a number of tokens, got true"),
    ("t.jsonl", '{"arrival_s": 0, "input_tokens": 5, "output_tokens": false}\n',
     "t.jsonl:1: output tokens must be a number of tokens, got false"),
    ("t.jsonl", '{"arrival_s": true, "input_tokens": 5, "output_tokens": 5}\n', "t.jsonl:1: arrival time"),
    # a key given twice: json.loads kept the last value
    ("t.jsonl", '{"arrival_s": 0, "input_tokens": 5, "input_tokens": 7, "output_tokens": 5}\n',
     "t.jsonl:1: key 'input_tokens' is given twice"),
    # a header that repeats a column: the row dict kept the last one silently
    ("t.csv", "arrival_s,input_tokens,output_tokens,arrival_s\n0,5,5,9\n",
     "t.csv:1: column 'arrival_s' is named twice (columns 1 and 4)"),
    ("t.csv", "Input_Tokens,arrival_s,input_tokens,output_tokens\n5,0,5,5\n",
     "t.csv:1: column 'input_tokens' is named twice (columns 1 and 3)"),
    # a prompt of 0 tokens was run as 1 token; it is not a request
    ("t.csv", "arrival_s,input_tokens,output_tokens\n0,5,5\n1,0,5\n",
     "t.csv:3: input tokens must be at least 1 (a prompt of 0 tokens is not a request), got '0'"),
    ("t.csv", "arrival_s,input_tokens,output_tokens\n0,0.4,5\n", "t.csv:2: input tokens must be at least 1"),
    ("t.jsonl", '{"arrival_s": 0, "input_tokens": 0, "output_tokens": 5}\n', "t.jsonl:1: input tokens must be at"),
])
def test_bad_trace_values_are_refused_naming_file_line_and_field(run_cli, tmp_path, name, text, match):
    path = tmp_path / name
    path.write_text(text)
    msg = _one_error(*run_cli(*TRACE_RUN, "--trace", str(path))[::2])
    assert match in msg, msg


def test_zero_output_tokens_still_run_as_one_token(run_json, tmp_path):
    """BurstGPT logs failed requests with 0 response tokens: they stay requests of one output token (documented in
    sim/trace_files.py and the README), and fractional counts are rounded."""
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,input_tokens,output_tokens\n0,100,0\n0.5,99.6,3.4\n")
    rep = run_json(*TRACE_RUN, "--trace", str(path), "--requests-csv", str(tmp_path / "r.csv"))
    assert rep["requests"] == rep["completed"] == 2
    rows = (tmp_path / "r.csv").read_text().splitlines()
    header = rows[0].split(",")
    got = [dict(zip(header, r.split(","))) for r in rows[1:]]
    assert [(int(r["input_tokens"]), int(r["output_tokens"])) for r in got] == [(100, 1), (100, 3)]
