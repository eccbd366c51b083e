"""Untrusted files and values: whatever a user feeds the parsers and the CLI, the answer is a valid result or
one `error:` line with exit 2 - never a traceback, never a hang, never a changed input file (hypothesis)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

#: Documents: random bytes, random text, and random nesting of YAML/JSON values.
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=8),
                           lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids,
                                                                                      max_size=4), max_leaves=30)


def _check(code: int, out: str, err: str) -> None:
    assert "Traceback" not in err and "Traceback" not in out
    assert code in (0, 2), (code, err)
    if code == 2:
        lines = err.strip().splitlines()
        assert lines and lines[0].startswith("error:"), err


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _document(data: object, raw: bytes | None) -> bytes:
    import json

    return raw if raw is not None else json.dumps(data, allow_nan=True).encode()


@SETTINGS
@given(data=JSON_VALUES, raw=st.none() | st.binary(max_size=200))
def test_scenario_files(run_cli, tmp_path, data, raw):
    f = tmp_path / "s.yaml"
    f.write_bytes(_document(data, raw))
    before = _digest(f)
    _check(*run_cli("plan", "--scenario", str(f), "--system", "h200", "--json"))
    assert _digest(f) == before


@SETTINGS
@given(data=JSON_VALUES, raw=st.none() | st.binary(max_size=200))
def test_hardware_catalogs(run_cli, tmp_path, data, raw):
    f = tmp_path / "hw.yaml"
    f.write_bytes(_document(data, raw))
    _check(*run_cli("hardware", "--catalog", str(f), "--json"))


@SETTINGS
@given(data=JSON_VALUES, raw=st.none() | st.binary(max_size=200))
def test_model_configs(run_cli, tmp_path, data, raw):
    f = tmp_path / "config.json"
    f.write_bytes(_document(data, raw))
    _check(*run_cli("model", str(f), "--json"))


@SETTINGS
@given(rows=st.lists(st.tuples(st.one_of(st.floats(allow_nan=True), st.text(max_size=5)),
                               st.one_of(st.integers(-5, 10**7), st.text(max_size=4)),
                               st.one_of(st.integers(-5, 10**6), st.floats(allow_nan=True))), max_size=6),
       raw=st.none() | st.binary(max_size=120))
def test_traces(run_cli, tmp_path, rows, raw):
    f = tmp_path / "t.csv"
    text = "arrival_s,input_tokens,output_tokens\n" + "".join(f"{a},{i},{o}\n" for a, i, o in rows)
    f.write_bytes(raw if raw is not None else text.encode())
    before = _digest(f)
    _check(*run_cli("simulate", "llama-3.1-8b", "--system", "h200", "--trace", str(f), "--replicas", "1",
                    "--json"))
    assert _digest(f) == before


@pytest.mark.parametrize("tokens", ["1e300", "1e19", "100000001"])
def test_a_trace_token_count_beyond_the_bound_is_one_error_line(run_cli, tmp_path, tokens):
    """A count past schema.MAX_TOKENS (100,000,000) once overflowed int64 into a traceback (found by test_traces)."""
    f = tmp_path / "t.csv"
    f.write_text(f"arrival_s,input_tokens,output_tokens\n0,10,{tokens}\n")
    code, out, err = run_cli("simulate", "llama-3.1-8b", "--system", "h200", "--trace", str(f), "--replicas", "1")
    _check(code, out, err)
    assert code == 2 and "output tokens must be at most 100,000,000 tokens" in err


@SETTINGS
@given(flag=st.sampled_from(["--tp", "--pp", "--ep", "--dp", "--isl", "--osl", "--batch", "--context",
                             "--concurrency", "--gpus"]),
       value=st.one_of(st.integers(-10**12, 10**12).map(str), st.floats(allow_nan=True).map(str),
                       st.text(max_size=6)))
def test_perf_option_values(run_cli, flag, value):
    args = {"--isl": "100", "--osl": "10", "--batch": "1"}
    args[flag] = value
    if flag == "--concurrency":
        del args["--batch"]
    argv = ["perf", "llama-3.1-8b", "--system", "h200"] + [x for kv in args.items() for x in kv]
    _check(*run_cli(*argv, "--json"))


def test_an_output_never_overwrites_an_input(run_cli, tmp_path):
    trace = Path(__file__).resolve().parents[1] / "src" / "clusterfit" / "sim" / "traces" / "azure_conv_sample.csv"
    copy = tmp_path / "t.csv"
    copy.write_bytes(trace.read_bytes())
    before = _digest(copy)
    code, out, err = run_cli("simulate", "llama-3.1-8b", "--system", "h200", "--trace", str(copy), "--csv", str(copy))
    assert code == 2 and "is also an input" in err and _digest(copy) == before
    code, out, err = run_cli("simulate", "llama-3.1-8b", "--system", "h200", "--trace", str(copy), "--csv",
                             str(tmp_path))
    assert code == 2 and "is a directory" in err


@pytest.mark.parametrize("content, says", [
    (b"model: llama-3.1-8b\n\xff\xfe\n", "not UTF-8"),
    (b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nest"),  # ours, or libyaml's own depth limit
    (b"model: [\n", "not valid YAML at line 2, column 1"),
    # 'billion laughs': nine lines whose aliases expand to 9^9 values (hung every reader walking them)
    (b"l0: &l0 [" + b",".join([b"lol"] * 9) + b"]\n" + b"".join(
        b"l%d: &l%d [" % (i, i) + b",".join([b"*l%d" % (i - 1)] * 9) + b"]\n" for i in range(1, 9)),
     "holds more than 1,000,000 values (YAML aliases expanded)"),
    # plan passed the simulation section through unread; --verify would have run it
    (b"model: llama-3.1-8b\nworkload: {isl: 100, osl: 10, load: {requests_per_s: 1}}\nsimulation: {policy: foo}\n",
     "simulation: policy: Input should be 'round_robin'"),
    (b"model: llama-3.1-8b\nworkload: {isl: 100, osl: 10, load: {requests_per_s: 1}}\ncost: {prices: {hgx_h200: true}}\n",
     "prices must be numbers in (0, 1,000] $/GPU-hour (bad: hgx_h200)"),   # true was read as $1/GPU-hour
], ids=["not-utf8", "nested-5000-deep", "broken-yaml", "billion-laughs", "simulation-section", "price-true"])
def test_scenario_file_problems_are_one_line(run_cli, tmp_path, content, says):
    f = tmp_path / "s.yaml"
    f.write_bytes(content)
    code, out, err = run_cli("plan", "--scenario", str(f))
    assert code == 2 and len(err.strip().splitlines()) == 1 and says in err, err


def test_a_trace_beyond_the_row_cap_is_refused_unless_cut(monkeypatch):
    """The cap (config.MAX_REQUESTS, 5M) lowered to 3 rows: a longer trace is an error; --requests 2 reads 2."""
    import clusterfit.sim.config as config
    from clusterfit.errors import ClusterfitError
    from clusterfit.sim.trace_files import load_trace

    trace = Path(__file__).resolve().parents[1] / "src" / "clusterfit" / "sim" / "traces" / "azure_conv_sample.csv"
    monkeypatch.setattr(config, "MAX_REQUESTS", 3)
    with pytest.raises(ClusterfitError, match="more than 3 requests"):
        load_trace(trace)
    assert len(load_trace(trace, limit=2).input_tokens) == 2


_SCENARIO = "model: llama-3.1-8b\nsystems: [hgx_h200]\nworkload:\n  isl: {isl}\n  osl: 200\n  load: {load}\n"


@pytest.mark.parametrize("isl, load, says", [
    # simulate crashed with a pydantic traceback on these lengths (plan planned with the 1e300-token p90)
    ("{mean: 1000, p50: 800, p90: 1.0e+300}", "{requests_per_s: 2}",
     "p90 must be a number of tokens in 1..100,000,000"),
    ("1.0e+300", "{requests_per_s: 2}", "must be a number of tokens in 1..100,000,000"),
    ("{mean: 1.0e-320}", "{requests_per_s: 2}", "must be a number of tokens in 1..100,000,000, got 9.99989e-321"),
    ("{p50: 10, p90: 90000000}", "{requests_per_s: 2}", "in its tail"),
    # these hung (100,000 bins; a 1e300 requests/s load the command line's --rate bound refuses)
    ("{tokens: [%s], counts: [%s]}" % (",".join(["5"] * 1001), ",".join(["1"] * 1001)), "{requests_per_s: 2}",
     "at most 1,000 bins"),
    ("1000", "{requests_per_s: 1.0e+300}", "load (requests_per_s) must be at most 1,000,000"),
    ("1000", "{output_tokens_per_s: 1.0e+300}", "load (output_tokens_per_s) must be at most 1,000,000,000"),
], ids=["p90-1e300", "isl-1e300", "mean-subnormal", "tail-beyond-bound", "histogram-bins", "rate", "tokens-per-s"])
@pytest.mark.parametrize("command", ["plan", "simulate"])
def test_scenario_lengths_and_loads_are_bounded(run_cli, tmp_path, command, isl, load, says):
    f = tmp_path / "s.yaml"
    f.write_text(_SCENARIO.format(isl=isl, load=load))
    code, out, err = run_cli(command, "--scenario", str(f), "--system", "h200")
    assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error:") and says in err, err


# ---- config.json fields the fuzzing pass found read as a guess: one `error:` line naming the field --------------

def _qwen3_8b() -> dict:
    from importlib.resources import files

    from clusterfit.arch import parse_config_text

    text = files("clusterfit").joinpath("catalog/models/Qwen__Qwen3-8B.json").read_text(encoding="utf-8")
    return parse_config_text(text, "Qwen3-8B")


def _no_head_dim(cfg: dict) -> None:
    del cfg["head_dim"]
    cfg["hidden_size"] = cfg["num_attention_heads"] * 128 + 4


#: (edit of a valid config, what the one error line names); ids say which finding each is.
BAD_CONFIGS = {
    "hidden-not-a-multiple-of-heads": (_no_head_dim, "hidden_size"),
    "tie-as-string": (lambda c: c.update(tie_word_embeddings="false"), "tie_word_embeddings"),
    "architectures-of-numbers": (lambda c: c.update(architectures=[1, 2]), "architectures"),
    "model-type-a-number": (lambda c: c.update(model_type=5), "model_type"),
    "gptq-bits-0": (lambda c: c.update(quantization_config={"quant_method": "gptq", "bits": 0}),
                    "quantization_config.bits"),
    "gptq-bits-string": (lambda c: c.update(quantization_config={"quant_method": "gptq", "bits": "4"}),
                         "quantization_config.bits"),
    "rope-factor-negative": (lambda c: c.update(rope_scaling={"rope_type": "yarn", "factor": -4}),
                             "rope_scaling.factor"),
    "rope-scaling-string": (lambda c: c.update(rope_scaling="yarn"), "rope_scaling"),
    "rope-scaling-list": (lambda c: c.update(rope_scaling=["yarn", 4]), "rope_scaling"),
}

_COMMANDS = {"model": ("model",), "fit": ("fit", "-s", "h200"),
             "perf": ("perf", "-s", "h200", "--isl", "100", "--osl", "10", "--batch", "1")}


@pytest.mark.parametrize("command", sorted(_COMMANDS))
@pytest.mark.parametrize("finding", sorted(BAD_CONFIGS))
def test_bad_config_fields_are_one_error_line(run_cli, tmp_path, finding, command):
    import json

    edit, field = BAD_CONFIGS[finding]
    cfg = _qwen3_8b()
    good = tmp_path / "good.json"
    good.write_text(json.dumps(cfg))
    first, *rest = _COMMANDS[command]
    code, out, err = run_cli(first, str(good), *rest)
    assert code == 0, err                       # the unedited config passes the same command
    edit(cfg)
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps(cfg))
    code, out, err = run_cli(first, str(bad), *rest)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:") and field in lines[0], err


@pytest.fixture(scope="module")
def web_url():
    pytest.importorskip("fastapi", reason="the web extra is not installed (pip install -e '.[web]')")
    pytest.importorskip("httpx")
    from _webserver import running_server

    with running_server() as url:
        yield url


@pytest.mark.filterwarnings("ignore:The 'alias' attribute with value:UserWarning")
@pytest.mark.parametrize("finding", sorted(BAD_CONFIGS))
def test_bad_inline_config_fields_are_4xx_naming_config(web_url, finding):
    import httpx

    edit, field = BAD_CONFIGS[finding]
    cfg = _qwen3_8b()
    edit(cfg)
    resp = httpx.post(f"{web_url}/api/fit", json={"model": "edited", "config": cfg, "systems": ["h200"]}, timeout=30)
    assert resp.status_code == 422, resp.text
    assert resp.json()["parameter"] == "config" and field in resp.json()["detail"], resp.text


@pytest.mark.filterwarnings("ignore:The 'alias' attribute with value:UserWarning")
@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize("where", ["rope_theta", "rope_scaling.factor", "extra.deep"])
def test_non_finite_numbers_nested_in_an_inline_config_are_refused(web_url, literal, where):
    import json

    import httpx

    cfg = _qwen3_8b()
    outer, _, inner = where.partition(".")
    cfg[outer] = {inner: "@"} if inner else "@"
    text = json.dumps({"model": "edited", "config": cfg, "systems": ["h200"]}).replace('"@"', literal)
    resp = httpx.post(f"{web_url}/api/fit", content=text, headers={"Content-Type": "application/json"}, timeout=30)
    assert resp.status_code == 422, resp.text
    assert resp.json()["parameter"] == "config", resp.text
    assert f"{where}: " in resp.json()["detail"] and "is not a finite number" in resp.json()["detail"], resp.text


# ---- scenario fields the fuzzing pass found accepted where the command line refuses the same --------------------

_BASE = "model: llama-3.1-8b\nsystems: [hgx_h200]\nworkload: {isl: 1000, osl: 200, load: {requests_per_s: 2}}\n"


def _one_error(code: int, err: str, *says: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), err
    assert all(s in lines[0] for s in says), err


@pytest.mark.parametrize("slo, field", [
    ("{min_goodput: 0.5}", "slo.min_goodput: judges the latency targets"),
    ("{ttft_ms: 1000, tpot_percentile: 99}", "slo.tpot_percentile: judges the TPOT target"),
    ("{tpot_ms: 30, ttft_percentile: 99}", "slo.ttft_percentile: judges the TTFT target"),
    ("{tokens_per_s_per_user: 20, ttft_percentile: 99}", "slo.ttft_percentile: judges the TTFT target"),
], ids=["goodput-without-targets", "tpot-percentile-without-tpot", "ttft-percentile-without-ttft",
        "ttft-percentile-with-tokens-per-s"])
@pytest.mark.parametrize("command", ["plan", "simulate"])
def test_a_scenario_slo_qualifier_needs_its_target(run_cli, tmp_path, command, slo, field):
    """As --min-goodput / --tpot-percentile / --ttft-percentile without their targets on the command line: these
    were accepted and ignored."""
    f = tmp_path / "s.yaml"
    f.write_text(_BASE + f"slo: {slo}\n")
    code, out, err = run_cli(command, "--scenario", str(f), "--system", "h200")
    _one_error(code, err, f"scenario file {f}: {field}")


def test_a_scenario_slo_qualifier_with_its_target_is_accepted(tmp_path):
    from clusterfit.planning.scenario import load_scenario

    f = tmp_path / "s.yaml"
    f.write_text(_BASE + "slo: {tokens_per_s_per_user: 20, tpot_percentile: 99, min_goodput: 0.5, ttft_ms: 900, "
                 "ttft_percentile: 99}\n")
    slo = load_scenario(f).to_slo()
    assert (slo.tpot_percentile, slo.ttft_percentile, slo.min_goodput) == (99, 99, 0.5)


@pytest.mark.parametrize("command, text, key, line", [
    (("plan", "--system", "h200", "--scenario"), _BASE + "model: Qwen/Qwen3-8B\n", "model", 4),
    (("simulate", "--system", "h200", "--scenario"), _BASE + "slo: {ttft_ms: 900, ttft_ms: 2000}\n", "ttft_ms", 4),
    (("hardware", "--catalog"), "gpus:\n  x1: {name: X}\n  x2: {name: Y}\n  x1: {name: Z}\n", "x1", 4),
], ids=["scenario-model-twice", "scenario-flow-mapping", "catalog-gpu-twice"])
def test_a_yaml_key_given_twice_is_refused(run_cli, tmp_path, command, text, key, line):
    """PyYAML kept the last value silently (TOML refuses a repeated key)."""
    f = tmp_path / "f.yaml"
    f.write_text(text)
    code, out, err = run_cli(*command, str(f))
    _one_error(code, err, f"{f}: not valid YAML at line {line}", f"the key '{key}' is repeated (first on line")


def test_yaml_aliases_and_merge_keys_still_read(run_cli, tmp_path):
    """A key a mapping sets over one it merges (``<<``) is no repeat, also through a chain of merges."""
    from clusterfit.inputs import parse_document

    data = parse_document("a: &a {isl: 500, osl: 100}\nb: &b {<<: *a, isl: 800}\nc: {<<: *b, osl: 200}\n"
                          "d: {<<: [*a, *b], osl: 300}\n", "f", "yaml")
    assert data["c"] == {"isl": 800, "osl": 200} and data["d"] == {"isl": 500, "osl": 300}
    f = tmp_path / "s.yaml"
    f.write_text("model: llama-3.1-8b\nsystems: &sys [hgx_h200]\n"
                 "workload: {<<: {isl: 500, osl: 100}, osl: 200, load: {requests_per_s: 2}}\n"
                 "simulation: {replicas: 1, requests: 50}\n")
    code, out, err = run_cli("simulate", "--scenario", str(f), "--json")
    assert code == 0, err


@pytest.mark.parametrize("section, field", [
    ("search: {disaggregated: 1}", "search.disaggregated"),
    ("search: {disaggregated: 'no'}", "search.disaggregated"),
    ("engine_settings: {enforce_eager: 0}", "engine_settings.enforce_eager"),
    ("simulation: {replica: {prefix_cache: 1}}", "simulation: replica.prefix_cache"),
    ("simulation: {exact_steps: 'true'}", "simulation: exact_steps"),
], ids=["disaggregated-1", "disaggregated-string", "enforce-eager-0", "prefix-cache-1", "exact-steps-string"])
@pytest.mark.parametrize("command", ["plan", "simulate"])
def test_a_yes_no_field_takes_only_true_or_false(run_cli, tmp_path, command, section, field):
    """As true / false go only to yes/no fields, a yes/no field takes only them: 1 was read as true."""
    f = tmp_path / "s.yaml"
    f.write_text(_BASE + section + "\n")
    code, out, err = run_cli(command, "--scenario", str(f), "--system", "h200")
    _one_error(code, err, f"scenario file {f}: {field}: a yes/no field takes true or false only")


@pytest.mark.parametrize("word", ["no", "yes", "off", "On"])
def test_an_unquoted_yaml_yes_no_in_a_text_field_says_why_it_is_a_boolean(run_cli, tmp_path, word):
    """YAML 1.1 reads `name: no` as false: the refusal said 'true / false only go to yes/no fields' about a file
    that never wrote true or false; it now names YAML's reading and the fix (quote the text). A number field that
    gets one keeps the short message."""
    f = tmp_path / "s.yaml"
    f.write_text(f"name: {word}\n" + _BASE)
    code, out, err = run_cli("plan", "--scenario", str(f))
    _one_error(code, err, f"scenario file {f}: name: true / false only go to yes/no fields (YAML reads an unquoted "
                          "yes / no / on / off as true / false: quote text such as 'no')")
    f.write_text(f"name: '{word}'\n" + _BASE)
    code, out, err = run_cli("plan", "--scenario", str(f), "--json")
    assert code == 0, err
    f.write_text(_BASE.replace("isl: 1000", f"isl: {word}"))
    code, out, err = run_cli("plan", "--scenario", str(f))
    _one_error(code, err, "workload.isl: true / false only go to yes/no fields")
    assert "YAML reads" not in err


def test_yes_no_fields_still_take_true_false_and_none():
    from clusterfit.planning.scenario import parse_scenario
    from clusterfit.sim.api import parse_simulation

    sc = parse_scenario({"model": "m", "workload": {"isl": 1, "osl": 1, "load": {"requests_per_s": 1}},
                         "search": {"disaggregated": False}, "engine_settings": {"enforce_eager": None}})
    assert sc.search.disaggregated is False and sc.engine_settings.enforce_eager is None
    assert parse_simulation({"replica": {"prefix_cache": False}}).replica.prefix_cache is False


def test_a_json_key_given_twice_is_refused(run_cli, tmp_path):
    """Python's json keeps the last of a repeated key silently (YAML and TOML files refuse it): a config.json with
    hidden_size twice is refused naming the key."""
    f = tmp_path / "config.json"
    f.write_text('{"model_type": "llama", "hidden_size": 4096, "hidden_size": 1024}')
    code, out, err = run_cli("model", str(f))
    assert code == 2 and "the key 'hidden_size' is repeated in one object" in err, err


@pytest.mark.parametrize("args", [
    ["simulate", "llama-3.1-8b", "--system", "h200", "--isl", "100", "--osl", "10", "--rate", "1", "--requests", "10",
     "--csv", "{long}.csv"],
    ["simulate", "llama-3.1-8b", "--system", "h200", "--trace", "{long}.csv"],
    ["fit", "llama-3.1-8b", "--catalog", "{long}.yaml"],
    ["plan", "--scenario", "{long}.yaml"],
    ["deploy", "llama-3.1-8b", "--isl", "100", "--osl", "10", "--rate", "1", "--system", "h200", "--out", "{long}"],
], ids=["output", "trace", "catalog", "scenario", "deploy-out"])
def test_a_file_name_too_long_is_one_error(run_cli, tmp_path, args):
    """A 300-character file name (most file systems take 255) raised OSError: File name too long, a traceback and
    exit 1, from every option naming a file."""
    long = str(tmp_path / ("y" * 300))
    code, out, err = run_cli(*[a.replace("{long}", long) for a in args])
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: "), err


def test_a_profile_for_another_devices_memory_states_both_in_bytes_and_gb(run_cli, tmp_path):
    """A profile's gpu.memory_bytes far from the GPU's was refused with it in bytes beside the catalog's in GB ('...
    85,899,345,920 is not h200_sxm's memory (150 GB in the hardware catalog)', while the catalog says 141 GB): both
    figures are now given in bytes and GB, saying which catalog figure the profile is held to."""
    import json

    doc = json.loads((Path(__file__).parent / "data" / "profiles" / "h200-shipped.json").read_text())
    doc["gpu"]["memory_bytes"] = 80 * 2**30   # 85,899,345,920 bytes: an 80 GiB device called h200_sxm
    profile = tmp_path / "p.json"
    profile.write_text(json.dumps(doc))
    code, out, err = run_cli("perf", "llama-3.1-8b", "--system", "h200", "--tp", "1", "--isl", "128", "--osl", "16",
                             "--batch", "1", "--profile", str(profile))
    _check(code, out, err)
    # H200's usable memory: 150,109,880,320 bytes as torch reports it (catalog visible_memory_bytes, tests/
    # test_hardware.py), 141 GB marketed; 85,899,345,920 / 150,109,880,320 = 0.57, outside 0.75..1.25
    assert code == 2 and err.strip() == (
        "error: --profile: gpu.memory_bytes 85,899,345,920 bytes (85.9 GB) is not h200_sxm's memory: the hardware "
        "catalog has 150,109,880,320 bytes (150.1 GB, as the device reports it; 141 GB marketed), and a profile's "
        "must be within 25% of it: the profile was measured on another device"), err


def test_text_that_reads_as_rich_markup_prints_as_it_is(run_cli, tmp_path, monkeypatch):
    """A config.json's model_type 'weird[/]type' reached rich's markup in the notes and the model title: 'closing tag
    [/] at position 34 has nothing to close', a traceback (fit, model, perf). An output folder named 'o[/]ut' would
    have failed deploy's 'wrote ...' lines the same way."""
    import json

    bundled = Path(__file__).resolve().parents[1] / "src" / "clusterfit" / "catalog" / "models"
    config = {k: v for k, v in json.loads((bundled / "meta-llama__Llama-3.1-8B.json").read_text()).items()
              if not k.startswith("_")}   # the bundle's _source / _notes are the catalog's, not HF's
    config["model_type"] = "weird[/]type [red]x"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    for args in (("fit", str(path)), ("model", str(path)),
                 ("perf", str(path), "--system", "h200", "--isl", "100", "--osl", "10", "--batch", "1")):
        code, out, err = run_cli(*args)
        assert code == 0 and "Traceback" not in err, err
        assert "model_type 'weird[/]type [red]x' is not one" in " ".join(out.split()), out
    # a model folder whose name reads as a style tag kept its brackets out of the titles ('mdlx: 8.0B parameters')
    styled = tmp_path / "mdl[red]x"
    styled.mkdir()
    config["model_type"] = "llama"
    (styled / "config.json").write_text(json.dumps(config))
    for args in (("fit", str(styled / "config.json")),
                 ("perf", str(styled / "config.json"), "--system", "h200", "--isl", "100", "--osl", "10", "--batch",
                  "1"),
                 ("plan", str(styled / "config.json"), "--system", "h200", "--isl", "100", "--osl", "10", "--rate",
                  "1")):
        code, out, err = run_cli(*args)
        assert code == 0 and "mdl[red]x" in out, (args, out, err)
    monkeypatch.setenv("COLUMNS", "400")   # no path wrapped at a dot
    for name in ("o[/]ut", "o[bold]ut"):   # 'o[/]ut': the folder ']ut' in 'o['; 'o[bold]ut' showed as 'out'
        folder = tmp_path / name
        folder.mkdir(parents=True)
        code, out, err = run_cli("deploy", "llama-3.1-8b", "--system", "h200", "--isl", "100", "--osl", "10", "--rate",
                                 "1", "--out", str(folder))
        assert code == 0 and f"wrote {folder}/launch.sh" in " ".join(out.split()), err


def test_the_safe_consoles_second_try_keeps_the_markup_that_parses():
    """safe_console prints a line whose markup breaks again object by object: a string that parses keeps its
    styling and escapes, only the broken one is printed as it is (the first version printed every object raw,
    '[bold]ok[/]' and escaping backslashes included)."""
    from clusterfit.commands.output import safe_console

    console = safe_console()
    with console.capture() as captured:
        console.print("[bold]ok[/] one \\[x]", "two [/] three")
    assert captured.get().strip() == "ok one [x] two [/] three"
