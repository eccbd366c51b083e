"""Input files at the edges of what the readers take: long fields, deep nesting, files that are not regular files,
values too long to echo (each found by an adversarial pass: a traceback, a hang or a multi-megabyte error line)."""

from __future__ import annotations

import pytest

#: A trace-driven simulate run of one replica; the trace file is added by each test.
TRACE_RUN = ("simulate", "llama-3.1-8b", "--system", "h200", "--replicas", "1")


def _one_error(code: int, err: str) -> str:
    """The one error line of a run that must exit 2."""
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err[:2000]
    return lines[0]


def test_a_csv_trace_with_a_long_prompt_column_runs(run_json, tmp_path):
    """A prompt-text column of 150,000 characters (the csv module's field limit is 131,072) was a traceback,
    `_csv.Error: field larger than field limit`; the column is not read, so the trace runs."""
    f = tmp_path / "prompts.csv"
    f.write_text("arrival_s,isl,osl,prompt\n0,100,50,hi\n0.5,200,20," + "word " * 30_000 + "\n")
    rep = run_json(*TRACE_RUN, "--trace", str(f))
    assert rep["requests"] == rep["completed"] == 2


def test_a_csv_field_past_the_line_limit_is_one_error_line(run_cli, tmp_path):
    """A quoted field running over 17 lines of 1,048,576 (2^20) characters each: more than the reader's field limit
    (16,777,216 (16 x 2^20) characters, sim.trace_files.MAX_TRACE_LINE_CHARS), reported at the line where the csv
    module gave up (the 17th)."""
    from clusterfit.sim.trace_files import MAX_TRACE_LINE_CHARS

    assert MAX_TRACE_LINE_CHARS == 16 * 1024 * 1024
    f = tmp_path / "q.csv"
    f.write_text('arrival_s,isl,osl,prompt\n0,100,50,"' + ("w" * 1024 * 1024 + "\n") * 17 + '"\n')
    msg = _one_error(*run_cli(*TRACE_RUN, "--trace", str(f))[::2])
    assert msg == f"error: {f}:17: not valid CSV (field larger than field limit (16777216))"


@pytest.mark.parametrize("name", ["long.csv", "long.jsonl"])
def test_a_trace_line_past_the_limit_is_refused_before_it_is_read_whole(run_cli, tmp_path, name):
    """A line of 16,777,217 (16 x 2^20 + 1) characters (no line break: a file that is not a trace would be read
    whole)."""
    f = tmp_path / name
    head = "arrival_s,isl,osl\n" if name.endswith(".csv") else '{"arrival_s": 0, "isl": 1, "osl": 1}\n'
    f.write_text(head + "x" * (16 * 1024 * 1024 + 1))
    msg = _one_error(*run_cli(*TRACE_RUN, "--trace", str(f))[::2])
    assert msg == f"error: {f}:2: the line is longer than 16,777,216 characters"


def test_a_deeply_nested_jsonl_trace_line_is_one_error_line(run_cli, tmp_path):
    """A line of 100,000 '[' was a RecursionError traceback; it is refused as the catalog, plan and HTTP readers
    refuse one (inputs.nested_too_deep, MAX_DEPTH = 64)."""
    f = tmp_path / "deep.jsonl"
    f.write_text('{"arrival_s": 0, "isl": 100, "osl": 50}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    msg = _one_error(*run_cli(*TRACE_RUN, "--trace", str(f))[::2])
    assert msg == f"error: {f}:2: nested more than 64 levels deep"
    code, _, err = run_cli("bench", "http://127.0.0.1:9", "--trace", str(f))   # read before any connection
    assert _one_error(code, err) == f"error: {f}:2: nested more than 64 levels deep"


def test_a_deeply_nested_config_says_what_every_reader_says(run_cli, tmp_path):
    """config.json's reader said 'nested too deeply' where the other readers say how deep is too deep."""
    f = tmp_path / "config.json"
    f.write_text('{"a": ' * 5000 + "1" + "}" * 5000)
    msg = _one_error(*run_cli("model", str(f))[::2])
    assert msg == f"error: model config {f}: nested more than 64 levels deep"


def _cli_process(args: list[str], **kw):
    """`clusterfit ARGS...` in a process of its own, stopped after 60 s and at 2 GiB of memory: before the fix these
    inputs blocked forever (a FIFO) or read until memory ran out (/dev/zero), which must not take the test run
    with them."""
    import resource
    import subprocess
    import sys

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    return subprocess.run([sys.executable, "-c", "from clusterfit.cli import main; main()", *args],
                          capture_output=True, text=True, timeout=60, preexec_fn=limit_memory, **kw)


NOT_A_FILE = "is not a regular file (a pipe, a device or a socket); give a file"


def test_a_fifo_given_as_a_scenario_is_refused_not_waited_on(tmp_path):
    """`mkfifo ff.yaml; clusterfit plan --scenario ff.yaml` waited forever for a writer (read_text stat()ed a size
    of 0, then read to the end); it is opened without blocking and refused."""
    import os

    fifo = tmp_path / "ff.yaml"
    os.mkfifo(fifo)
    proc = _cli_process(["plan", "--scenario", str(fifo)])
    assert _one_error(proc.returncode, proc.stderr) == f"error: --scenario: scenario file {fifo} {NOT_A_FILE}"


def test_a_fifo_given_as_a_model_config_is_named_for_what_it_is(tmp_path):
    """A FIFO named cfg.json was 'config file not found' (it is there; it is not a file)."""
    import os

    fifo = tmp_path / "cfg.json"
    os.mkfifo(fifo)
    proc = _cli_process(["model", str(fifo)])
    assert _one_error(proc.returncode, proc.stderr) == f"error: model config {fifo} {NOT_A_FILE}"


@pytest.mark.parametrize("args, what", [
    (["fit", "llama-3.1-8b", "--system", "h200", "--catalog"], "hardware catalog"),
    (["perf", "llama-3.1-8b", "--system", "h200", "--isl", "10", "--osl", "1", "--batch", "1", "--profile"],
     "--profile: profile"),
    (["deploy", "--out", "o", "--plan"], "--plan: plan file"),
])
def test_a_device_given_as_an_input_file_is_refused(tmp_path, args, what):
    """`--catalog /dev/zero` read zeros until the process was killed (stat() says 0 bytes)."""
    proc = _cli_process([*args, "/dev/zero"], cwd=tmp_path)
    assert _one_error(proc.returncode, proc.stderr) == f"error: {what} /dev/zero {NOT_A_FILE}"


def test_a_pipe_given_as_a_scenario_is_refused():
    """A pipe (`--scenario <(...)`, here /dev/stdin) of 60 MB was read whole past the 4 MiB limit."""
    proc = _cli_process(["plan", "--scenario", "/dev/stdin"], input="#" * 60_000_000)
    assert _one_error(proc.returncode, proc.stderr) == f"error: --scenario: scenario file /dev/stdin {NOT_A_FILE}"


def test_a_file_over_the_size_limit_is_refused_with_its_size(run_cli, tmp_path):
    """A scenario file one byte over MAX_DOCUMENT_BYTES (4 MiB = 4,194,304 bytes) is refused from its size (fstat),
    before it is read; here a sparse file, so the test writes no 4 MiB."""
    f = tmp_path / "big.yaml"
    with open(f, "wb") as fh:
        fh.truncate(4 * 1024 * 1024 + 1)
    msg = _one_error(*run_cli("plan", "--scenario", str(f))[::2])
    assert msg == f"error: --scenario: scenario file {f} is 4,194,305 bytes; the limit is 4,194,304 bytes"


def test_a_file_that_grew_past_the_limit_while_read_is_not_given_a_size(monkeypatch, tmp_path):
    """fstat said the file fit, the read found more (it grew in between): the bytes read (the limit + 1) are not the
    file's size, so the error says 'more than' the limit (it said 'is 11 bytes' of a file of unknown size). The
    growth is stood in for by an fstat that reports the file empty."""
    import os

    from clusterfit import inputs
    from clusterfit.errors import ClusterfitError

    f = tmp_path / "grows.yaml"
    f.write_bytes(b"a: 1\n" * 100)   # 500 bytes
    real_fstat = os.fstat

    def fstat_before_it_grew(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid, st.st_gid, 0,
                               int(st.st_atime), int(st.st_mtime), int(st.st_ctime)))

    monkeypatch.setattr(inputs.os, "fstat", fstat_before_it_grew)
    with pytest.raises(ClusterfitError) as exc:
        inputs.read_text(f, "scenario file", max_bytes=10)
    assert str(exc.value) == f"scenario file {f} is more than 10 bytes, the limit (it grew while read)"


def test_a_trace_that_is_not_a_file_says_so_as_every_input_does(run_cli):
    msg = _one_error(*run_cli(*TRACE_RUN, "--trace", "/dev/zero")[::2])
    assert msg.startswith("error: --trace: trace file /dev/zero: not a regular file (a pipe, a device or a socket) (shipped")


def test_a_trace_name_too_long_for_the_file_system_is_one_error_line(run_cli):
    """A 5,000-character --trace (past the file system's 255-byte name limit): os.stat raised OSError 'File name too
    long', shown without the flag ('error: 'aaa...: File name too long'; from the Python API a traceback). The
    name is shown cut short, as errors.brief shows any value."""
    from clusterfit.errors import ParameterError
    from clusterfit.sim.trace_files import resolve_trace_path

    name = "a" * 5000
    msg = _one_error(*run_cli(*TRACE_RUN, "--trace", name)[::2])
    assert msg == "error: --trace: trace file '" + "a" * 56 + "...: cannot look it up (File name too long)"
    with pytest.raises(ParameterError) as exc:
        resolve_trace_path(name)
    assert exc.value.parameter == "trace"


#: How errors show a value of any length (errors.brief, as scenario and HTTP errors do): its repr cut to 60
#: characters, the last three '...'.
SHOWN = "'" + "x" * 56 + "..."


def test_a_catalog_value_is_not_echoed_whole(run_cli, tmp_path):
    """A 4,000,000-character value in a catalog was echoed whole: a 4 MB error line."""
    f = tmp_path / "big.yaml"
    f.write_text("a: " + "x" * 4_000_000 + "\n")
    msg = _one_error(*run_cli("fit", "llama-3.1-8b", "--system", "h200", "--catalog", str(f))[::2])
    assert msg == f"error: invalid hardware catalog: {f}: a: Extra inputs are not permitted (got {SHOWN})"


@pytest.mark.parametrize("name, text", [
    ("t.jsonl", '{"arrival_s": 0, "isl": "' + "x" * 3_000_000 + '", "osl": 5}\n'),
    ("t.csv", "arrival_s,isl,osl\n0," + "x" * 100_000 + ",5\n"),
], ids=["jsonl-3MB", "csv-100kB"])
def test_a_trace_value_is_not_echoed_whole(run_cli, tmp_path, name, text):
    """A 3 MB isl string (JSONL) and a 100 kB one (CSV) were echoed whole in the error line."""
    f = tmp_path / name
    f.write_text(text)
    msg = _one_error(*run_cli(*TRACE_RUN, "--trace", str(f))[::2])
    line = 1 if name.endswith(".jsonl") else 2
    assert msg == f"error: {f}:{line}: input tokens {SHOWN} is not a number"


def test_a_trace_header_without_the_columns_lists_twenty_of_them_at_most(run_cli, tmp_path):
    """A header of 100,000 columns and none of the recognised ones was listed whole after 'found:'."""
    f = tmp_path / "wide.csv"
    f.write_text(",".join(f"c{i}" for i in range(100_000)) + "\n" + ",".join("1" * 100_000) + "\n")
    msg = _one_error(*run_cli(*TRACE_RUN, "--trace", str(f))[::2])
    assert msg.endswith("; found: " + ", ".join(f"'c{i}'" for i in range(20)) + ", ...")


#: A Llama config (the shape of meta-llama/Llama-3.1-8B's config.json) with one field left as '@'.
LLAMA = ('{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, '
         '"intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32, '
         '"vocab_size": 128256, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}')


#: LLAMA with a head_dim and a sliding_window (fields read with a plain ``get``, not the required-field helpers).
LLAMA_WINDOWED = LLAMA[:-1] + ', "head_dim": 128, "sliding_window": 4096}'
#: EleutherAI/gpt-j-6b's shape in GPT-J's own field names (configuration_gptj.py: n_embd, n_layer, n_head, n_positions).
GPTJ = ('{"architectures": ["GPTJForCausalLM"], "model_type": "gptj", "n_embd": 4096, "n_layer": 28, "n_head": 16, '
        '"n_positions": 2048, "rotary_dim": 64, "vocab_size": 50400, "torch_dtype": "float16"}')


@pytest.mark.parametrize("config, field, literal, shown", [
    (LLAMA, "hidden_size", "NaN", "nan"),                # was: missing required field 'hidden_size'
    (LLAMA, "intermediate_size", "Infinity", "inf"),     # was: missing required field 'intermediate_size'
    (LLAMA, "num_key_value_heads", "-Infinity", "-inf"),  # was read as absent: as many KV heads as query heads
    (LLAMA_WINDOWED, "head_dim", "NaN", "nan"),          # was read as absent: hidden_size / heads
    (LLAMA_WINDOWED, "sliding_window", "Infinity", "inf"),  # was read as absent: full attention
    (GPTJ, "n_embd", "NaN", "nan"),                      # was: missing required field 'hidden_size' (an alias)
], ids=["hidden_size", "intermediate_size", "num_key_value_heads", "head_dim", "sliding_window", "gptj-n_embd"])
def test_a_nan_or_infinity_in_a_field_clusterfit_reads_is_not_a_finite_number(run_cli, tmp_path, config, field,
                                                                               literal, shown):
    """As 1e999 (a number that reads as inf) already was: 'intermediate_size: inf is not a finite number'."""
    f = tmp_path / "cfg.json"
    assert f'"{field}": ' in config
    f.write_text(config.replace(f'"{field}": ', f'"{field}": {literal}, "was": '))
    msg = _one_error(*run_cli("model", str(f))[::2])
    assert msg == f"error: model config {f}: {field}: {shown} is not a finite number"


def test_the_gptj_and_windowed_configs_of_the_nan_test_load_as_they_are(run_json, tmp_path):
    """The configs the test above spoils load unspoiled (so its errors come from the NaN, not the config)."""
    for i, config in enumerate((LLAMA_WINDOWED, GPTJ)):
        f = tmp_path / f"cfg{i}.json"
        f.write_text(config)
        assert run_json("model", str(f))["layers"] == (32, 28)[i]


def test_a_nan_in_a_field_clusterfit_does_not_read_is_still_ignored(run_json, tmp_path):
    """Hugging Face writes float('nan') / float('inf') as NaN / Infinity; where clusterfit does not read the field
    (here 'router_jitter' and a list) the config loads as before."""
    f = tmp_path / "cfg.json"
    f.write_text(LLAMA[:-1] + ', "router_jitter": NaN, "time_step_limit": [0.0, Infinity]}')
    rep = run_json("model", str(f))
    assert (rep["layers"], rep["hidden"]) == (32, 4096)


def test_an_integer_of_5000_digits_is_one_error_line_in_a_trace_and_a_config(run_cli, tmp_path):
    """CPython reads integers of at most sys.get_int_max_str_digits() (4,300) digits: a JSONL trace with a longer
    one was a ValueError traceback, and config.json's error told the user to call sys.set_int_max_str_digits()."""
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "isl": ' + "9" * 5000 + ', "osl": 5}\n')
    msg = _one_error(*run_cli(*TRACE_RUN, "--trace", str(trace))[::2])
    assert msg == f"error: {trace}:1: not valid JSON (an integer has more than 4,300 digits)"
    cfg = tmp_path / "cfg.json"
    cfg.write_text(LLAMA.replace('"hidden_size": 4096', '"hidden_size": ' + "9" * 5000))
    msg = _one_error(*run_cli("model", str(cfg))[::2])
    assert msg == f"error: model config {cfg}: not valid JSON: an integer has more than 4,300 digits"


def test_a_jsonl_trace_may_start_with_a_byte_order_mark_as_a_csv_trace_may(run_json, tmp_path):
    """A JSONL trace saved with a UTF-8 BOM was 'not valid JSON (Unexpected UTF-8 BOM (decode using utf-8-sig))';
    the CSV reader already skipped it."""
    f = tmp_path / "t.jsonl"
    f.write_bytes(b'\xef\xbb\xbf{"arrival_s": 0, "isl": 100, "osl": 5}\n{"arrival_s": 1, "isl": 100, "osl": 5}\n')
    rep = run_json(*TRACE_RUN, "--trace", str(f))
    assert rep["requests"] == rep["completed"] == 2
