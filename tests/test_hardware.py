"""Hardware catalog, loader, validation and the `clusterfit hardware` command."""

from __future__ import annotations

import io
import json
import pathlib

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from clusterfit.errors import ClusterfitError
from clusterfit.hardware import (
    GiB,
    GpuEntry,
    SystemEntry,
    TORCH_PER_NVIDIA_SMI,
    derive_visible_bytes,
    gbps_to_bytes_per_s,
    load_hardware,
    load_prices,
)
from clusterfit.report.hardware_table import hardware_table, render_hardware

REPO = pathlib.Path(__file__).resolve().parents[1]
CATALOG_YAML = REPO / "src" / "clusterfit" / "catalog" / "hardware.yaml"
CSV_GPU_NAMES = ["H100-SXM-80GB", "H200-SXM-141GB", "B200-SXM-180GB", "GB200", "GB300", "GH200-96GB",
                 "GH200-144GB", "A100-SXM4-80GB", "A100-PCIE-80GB", "L40S", "RTX-PRO-6000-Blackwell-Server"]


@pytest.fixture(scope="module")
def cat():
    return load_hardware()


# ----------------------------------------------------------------------------- facts, by hand

def test_h200_visible_bytes_measured(cat):
    h200 = cat.gpu("h200")
    assert h200.visible_memory_bytes == 150_109_880_320
    assert h200.visible_memory_bytes / GiB == pytest.approx(139.8, abs=0.01)
    assert h200.memory_bytes == 141 * 10**9  # marketed, decimal GB
    assert h200.usable_memory_bytes == 150_109_880_320
    assert not h200.visible_memory_derived


def test_torch_vs_nvidia_smi_ratio():
    # 143,771 MiB = 150,754,820,096 bytes; torch saw 0.4278% less.
    assert 143_771 * 2**20 == 150_754_820_096
    assert 1 - TORCH_PER_NVIDIA_SMI == pytest.approx(0.004278, abs=1e-6)
    assert derive_visible_bytes(143_771) == pytest.approx(150_109_880_320, abs=1)


def test_derived_visible_memory_for_gpus_with_only_nvidia_smi(cat):
    l40s = cat.gpu("l40s")
    assert l40s.visible_memory_derived
    assert l40s.visible_memory_bytes == derive_visible_bytes(46068)
    assert l40s.visible_memory_bytes < 46068 * 2**20


def test_h200_nvl_exposes_the_h200_sxm_bytes(cat):
    """Both report 143,771 MiB in nvidia-smi (cited in the catalog), so the same HBM gets one size, not 141e9."""
    nvl, sxm = cat.gpu("h200_nvl"), cat.gpu("h200_sxm")
    assert nvl.visible_memory_derived and not sxm.visible_memory_derived
    assert nvl.usable_memory_bytes == sxm.usable_memory_bytes == 150_109_880_320
    assert cat.system("h200_nvl_8x").gpu.usable_memory_bytes == cat.system("hgx_h200").gpu.usable_memory_bytes


def test_mi300x_bytes_are_the_hip_total_not_nvidia_ratio(cat):
    mi300x = cat.gpu("mi300x")
    assert mi300x.visible_memory_bytes == 196_592 * 2**20 == 206_141_652_992  # HIP total global memory, cited
    assert not mi300x.visible_memory_derived
    assert cat.gpu("h100_pcie").usable_memory_bytes == cat.gpu("h100_sxm").usable_memory_bytes  # both 81,559 MiB
    # H100 NVL: a CUDA deviceQuery's total global memory (what torch reports), cited, taken over the nvidia-smi
    # figure's ratio-derived 100,055,155,985 bytes
    nvl = cat.gpu("h100_nvl")
    assert nvl.usable_memory_bytes == 99_861_594_112 and not nvl.visible_memory_derived


def test_mi325x_memory_is_256_gib_as_rocm_states(cat):
    # ROCm docs/reference/gpu-arch-specs.rst lists the MI325X's VRAM as 256 GiB (as it lists the MI300X's 192 GiB,
    # whose HIP total is 196,592 MiB); '256 GB' on resellers' pages is the rounded marketing figure
    mi325x = cat.gpu("mi325x")
    assert mi325x.memory_bytes == 256 * 2**30 == 274_877_906_944
    assert mi325x.usable_memory_bytes == 274_877_906_944  # no runtime total published: the full capacity


def test_bare_h100_is_dgx_h100(cat):
    s = cat.system("h100")
    assert s.id == "dgx_h100"
    assert s.gpus_per_node == 8
    assert s.node_memory_bytes == 640 * 10**9
    assert s.scale_up_domain_gpus == 8
    assert cat.system("H100") is s and cat.system("DGX-H100") is s


@pytest.mark.parametrize("name, system_id", [
    ("h200", "hgx_h200"), ("b200", "dgx_b200"), ("b300", "dgx_b300"), ("gb200", "gb200_nvl72"),
    ("gb300", "gb300_nvl72"), ("mi300x", "mi300x_platform"), ("l40s", "l40s_8x"), ("a100", "dgx_a100"),
    ("MI300X", "mi300x_platform"), ("h100_pcie", "h100_pcie_8x"), ("tpu7x", "tpu7x_vm"),
])
def test_bare_gpu_names(cat, name, system_id):
    assert cat.system(name).id == system_id


def test_nvl72_domain(cat):
    for sid, nic in [("gb200_nvl72", 400), ("gb300_nvl72", 800)]:
        s = cat.system(sid)
        assert s.gpus_per_node == 4
        assert s.scale_up_domain_gpus == 72
        assert s.nic_gbps_per_gpu == nic


def test_network_units(cat):
    assert gbps_to_bytes_per_s(400) == 50e9
    assert cat.system("dgx_h100").net_bw_bytes_per_s == 50e9
    # NVLink 4: 900 GB/s bidirectional -> 450e9 bytes/s per direction
    assert cat.gpu("h100").scale_up_bw_bytes_per_s == 450e9
    assert cat.gpu("b200").scale_up_bw_bytes_per_s == 900e9


def test_dense_not_sparse(cat):
    h100 = cat.gpu("h100")
    assert h100.peak_flops("bf16") == 989e12
    assert h100.peak_flops("fp8") == 1979e12
    assert h100.sparse_flops["bf16"] == 1979e12  # kept as documentation only
    assert h100.peak_flops("fp4") == 1979e12  # Hopper has no fp4: falls back to fp8
    assert cat.gpu("b300").peak_flops("fp4") == 14000e12  # B300 fp4 sparse is not 2x dense
    assert cat.gpu("a100").peak_flops("fp8") == 312e12  # no fp8 on Ampere -> bf16


def test_memory_bandwidth_units(cat):
    assert cat.gpu("h200").mem_bw_bytes_per_s == 4.8e12
    assert cat.gpu("tpu7x").memory_bytes == 192 * 2**30  # stated in GiB


def test_pcie_cards_scale_up_over_pcie(cat):
    assert cat.gpu("l40s").scale_up_bw_bytes_per_s == 32e9
    h200nvl = cat.gpu("h200_nvl")
    assert h200nvl.scale_up_bw_bytes_per_s == 64e9  # node-wide: PCIe Gen5
    assert h200nvl.nvlink_bridge_bw_bytes_per_s == 450e9 and h200nvl.nvlink_bridge_gpus == 4


def test_every_csv_gpu_name_resolves(cat):
    """The GPU names of the published-measurements CSV (listed here, so the test needs nothing outside the repo)."""
    for name in CSV_GPU_NAMES:
        assert cat.system(name).gpu is cat.gpu(name)


def test_csv_names_map_to_the_right_parts(cat):
    assert cat.gpu("GH200-96GB").memory_bytes == 96e9
    assert cat.gpu("GH200-144GB").memory_bytes == 144e9
    assert cat.gpu("A100-PCIE-80GB").id == "a100_pcie_80gb"
    assert cat.gpu("B200-SXM-180GB").memory_bytes == 180e9


# ----------------------------------------------------------------------------- the catalog file itself

def test_every_value_has_a_source():
    raw = yaml.safe_load(CATALOG_YAML.read_text())
    undocumented = {"name", "vendor", "aliases", "unverified", "src", "notes", "scale_up", "network",
                    "gpu", "default_for_gpu"}
    for section in ("gpus", "systems"):
        for entry_id, entry in raw[section].items():
            for key, value in entry.items():
                if key in undocumented or value is None:
                    continue
                assert key in entry["src"], f"{section}.{entry_id}.{key} has no src note"
            for key in entry["unverified"]:
                assert key in entry, f"{section}.{entry_id}.unverified names absent field {key}"


def test_ids_and_aliases_unique(cat):
    assert len(cat.gpus) >= 20 and len(cat.systems) >= 20
    for gpu_id, g in cat.gpus.items():
        for alias in g.aliases:
            assert cat.gpu(alias).id == gpu_id


def test_every_gpu_has_a_standard_system(cat):
    for gpu_id in cat.gpus:
        assert cat.system(gpu_id).gpu.id == gpu_id


def test_prices_are_typed(cat):
    prices = load_prices()
    assert len(prices) >= 6
    p5e = next(p for p in prices if p.instance.startswith("p5e"))
    assert p5e.gpu_id == "h200_sxm" and p5e.usd_per_gpu_hour == pytest.approx(5.408)
    assert all(p.usd_per_gpu_hour > 0 and p.source for p in prices)


def test_builtin_is_cached():
    assert load_hardware() is load_hardware()


# ----------------------------------------------------------------------------- user catalogs

USER_TOML = """
[gpus.my_accel]
name = "My accelerator 64GB"
vendor = "acme"
aliases = ["myacc"]
memory_gb = 64
mem_bw_tbs = 2.0
bf16_tflops_dense = 500
fp8_tflops_dense = 1000
scale_up_bw_gbs_bidir = 400
tdp_w = 500

[systems.my_node]
name = "4x My accelerator"
gpu = "myacc"
gpus_per_node = 4
scale_up_domain_gpus = 4
nic_gbps_per_gpu = 200

[systems.dgx_h100]
name = "DGX H100 with 800G NICs"
gpu = "h100_sxm"
default_for_gpu = true
gpus_per_node = 8
scale_up_domain_gpus = 8
nic_gbps_per_gpu = 800

[[prices]]
provider = "acme"
instance = "my_node"
gpu = "my_accel"
usd_per_gpu_hour = 1.5
kind = "on-demand"
source = "made up for a test"
"""


def test_user_toml_adds_gpu_and_system(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text(USER_TOML)
    cat = load_hardware([f])
    g = cat.gpu("MYACC")
    assert g.memory_bytes == 64e9 and g.dense_flops["fp8"] == 1000e12 and g.scale_up_bw_bytes_per_s == 200e9
    s = cat.system("myacc")
    assert s.id == "my_node" and s.gpu is g and s.node_memory_bytes == 256e9
    assert cat.system("h100").nic_gbps_per_gpu == 800  # override by id
    assert "hgx_h200" in cat.systems  # built-ins still there
    assert any(p.gpu_id == "my_accel" for p in cat.prices)
    assert load_hardware().system("h100").nic_gbps_per_gpu == 400  # the cached built-in is untouched


def test_user_yaml_system_reuses_builtin_gpu(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("systems:\n  h200_16x:\n    name: two HGX H200 joined\n    gpu: H200-SXM-141GB\n"
                 "    gpus_per_node: 8\n    scale_up_domain_gpus: 16\n    nic_gbps_per_gpu: 400\n")
    cat = load_hardware([f])
    assert cat.system("h200_16x").gpu is cat.gpu("h200")
    assert cat.system("h200").id == "hgx_h200"  # the built-in default stays the default


def _bad(tmp_path, text, suffix=".yaml"):
    f = tmp_path / f"bad{suffix}"
    f.write_text(text)
    with pytest.raises(ClusterfitError) as exc:
        load_hardware([f])
    return str(exc.value)


GOOD_GPU = ("gpus:\n  x1:\n    name: X\n    memory_gb: {mem}\n    mem_bw_tbs: {bw}\n    bf16_tflops_dense: 100\n"
            "    scale_up_bw_gbs_bidir: 100\n")


def test_negative_memory_names_file_entry_field(tmp_path):
    msg = _bad(tmp_path, GOOD_GPU.format(mem=-80, bw=1))
    assert "bad.yaml" in msg and "gpus.x1.memory_gb" in msg and "greater than 0" in msg


def test_absurd_memory(tmp_path):
    msg = _bad(tmp_path, GOOD_GPU.format(mem=80e9, bw=1))  # bytes typed into a GB field
    assert "gpus.x1" in msg and "absurd" in msg


def test_zero_bandwidth(tmp_path):
    msg = _bad(tmp_path, GOOD_GPU.format(mem=80, bw=0))
    assert "gpus.x1.mem_bw_tbs" in msg


def test_missing_field(tmp_path):
    msg = _bad(tmp_path, "gpus:\n  x1:\n    name: X\n    memory_gb: 80\n    bf16_tflops_dense: 1\n"
                         "    scale_up_bw_gbs_bidir: 1\n")
    assert "gpus.x1.mem_bw_tbs" in msg and "required" in msg.lower()


def test_unknown_key_is_rejected(tmp_path):
    msg = _bad(tmp_path, GOOD_GPU.format(mem=80, bw=1) + "    memory_GB: 80\n")
    assert "gpus.x1.memory_GB" in msg


def test_unknown_gpu_reference(tmp_path):
    msg = _bad(tmp_path, "systems:\n  s1:\n    name: S\n    gpu: h1000\n    gpus_per_node: 8\n"
                         "    scale_up_domain_gpus: 8\n    nic_gbps_per_gpu: 400\n")
    assert "bad.yaml" in msg and "systems.s1.gpu" in msg and "h1000" in msg and "h100" in msg


def test_domain_smaller_than_node(tmp_path):
    msg = _bad(tmp_path, "systems:\n  s1:\n    name: S\n    gpu: h100\n    gpus_per_node: 8\n"
                         "    scale_up_domain_gpus: 4\n    nic_gbps_per_gpu: 400\n")
    assert "systems.s1" in msg and "scale_up_domain_gpus" in msg


def test_zero_gpus_per_node(tmp_path):
    msg = _bad(tmp_path, "systems:\n  s1:\n    name: S\n    gpu: h100\n    gpus_per_node: 0\n"
                         "    scale_up_domain_gpus: 8\n    nic_gbps_per_gpu: 400\n")
    assert "systems.s1.gpus_per_node" in msg


def test_malformed_yaml(tmp_path):
    msg = _bad(tmp_path, "gpus:\n  x1: [unclosed\n")
    assert "hardware catalog " in msg and "bad.yaml" in msg and "not valid YAML" in msg and "line" in msg


def test_malformed_toml(tmp_path):
    msg = _bad(tmp_path, "[gpus.x1\nname = 'X'\n", suffix=".toml")
    assert "bad.toml" in msg and "not valid TOML" in msg


def test_not_a_mapping(tmp_path):
    assert "must be a mapping" in _bad(tmp_path, "- just\n- a list\n")


def test_missing_file(tmp_path):
    with pytest.raises(ClusterfitError, match="hardware catalog not found"):
        load_hardware([tmp_path / "nope.yaml"])


def test_bad_id(tmp_path):
    msg = _bad(tmp_path, GOOD_GPU.format(mem=80, bw=1).replace("x1:", "X-1:"))
    assert "X-1" in msg


def test_unknown_system_lists_close_matches(cat):
    with pytest.raises(ClusterfitError) as exc:
        cat.system("dgx_h10")
    msg = str(exc.value)
    assert "unknown system 'dgx_h10'" in msg and "dgx_h100" in msg


def test_unknown_gpu(cat):
    with pytest.raises(ClusterfitError, match="unknown gpu 'h1OO'"):
        cat.gpu("h1OO")


def test_entry_models_reject_nonsense():
    with pytest.raises(Exception):
        GpuEntry(name="x", memory_gb=80, memory_gib=80, mem_bw_tbs=1, bf16_tflops_dense=1,
                 scale_up_bw_gbs_bidir=1)
    with pytest.raises(Exception):
        SystemEntry(name="s", gpu="h100", gpus_per_node=8, scale_up_domain_gpus=8, nic_gbps_per_gpu=-1)


# ----------------------------------------------------------------------------- report and CLI

def test_hardware_table_rows(cat):
    rows = {r["id"]: r for r in hardware_table(cat)}
    assert set(rows) == set(cat.systems)
    h = rows["dgx_h100"]
    assert h["hbm_gb_per_gpu"] == 80 and h["hbm_gb_per_node"] == 640
    assert h["scale_up_gbs_per_gpu_per_dir"] == 450 and h["network_gbps_per_node"] == 3200
    assert h["bf16_tflops_dense_per_gpu"] == 989 and h["fp4_tflops_dense_per_gpu"] is None
    assert rows["hgx_h200"]["hbm_gib_visible_per_gpu"] == pytest.approx(139.8, abs=0.01)


def test_cli_hardware_json(cat):
    from clusterfit.cli import app

    result = CliRunner().invoke(app, ["hardware", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert {r["id"] for r in payload["systems"]} == set(cat.systems)


def test_cli_hardware_table_and_user_catalog(tmp_path):
    from clusterfit.cli import app

    f = tmp_path / "mine.toml"
    f.write_text(USER_TOML)
    result = CliRunner().invoke(app, ["hardware", "--catalog", str(f)])
    assert result.exit_code == 0, result.output
    assert "my_node" in result.stdout and "dgx_h100" in result.stdout
    result = CliRunner().invoke(app, ["hardware", "--catalog", str(f), "--json"])
    assert "my_node" in {r["id"] for r in json.loads(result.stdout)["systems"]}


def test_render_wide_table(cat):
    console = Console(width=250, file=io.StringIO(), color_system=None)
    render_hardware(console, hardware_table(cat))
    text = console.file.getvalue()
    for sid in cat.systems:
        assert sid in text
    assert "marketed" in text and "GiB" in text and "GB/s/dir" in text and "Left out" not in text


def test_cli_bad_catalog_exits_2(tmp_path):
    from clusterfit.cli import main

    f = tmp_path / "bad.yaml"
    f.write_text(GOOD_GPU.format(mem=-1, bw=1))
    with pytest.raises(SystemExit) as exc:
        main(["hardware", "--catalog", str(f), "--json"])
    assert exc.value.code == 2


@pytest.mark.parametrize("gpu, cc", [("a100", 8.0), ("A100-PCIE-80GB", 8.0), ("l40s", 8.9), ("h100", 9.0),
                                     ("h200", 9.0), ("gh200_144gb", 9.0), ("b200", 10.0), ("GB200", 10.0),
                                     ("b300", 10.3), ("RTX-PRO-6000-Blackwell-Server", 12.0), ("mi300x", None)])
def test_compute_capability_from_nvidias_table(cat, gpu, cc):
    """developer.nvidia.com/cuda-gpus: 8.0 A100, 8.9 L40S, 9.0 H100 / H200 / GH200, 10.0 B200 / GB200, 10.3 B300,
    12.0 RTX PRO 6000 Blackwell; AMD parts have none."""
    assert cat.gpu(gpu).compute_capability == cc


def test_true_is_not_a_number_in_a_user_catalog(tmp_path):
    """memory_gb = true was read as 1 GB (pydantic's lax mode); it names the field now (inputs.RefuseBool)."""
    f = tmp_path / "hw.toml"
    f.write_text(USER_TOML.replace("memory_gb = 64", "memory_gb = true"))
    with pytest.raises(ClusterfitError, match=r"gpus\.my_accel\.memory_gb: true / false only go to yes/no fields"):
        load_hardware([f])


_CATALOG = """gpus:
  xg:
    name: X GPU
    memory_gb: {mem}
    mem_bw_tbs: {bw}
    bf16_tflops_dense: 900
    scale_up_bw_gbs_bidir: 900
systems:
  xs:
    name: X Sys
    gpu: xg
    gpus_per_node: 8
    scale_up_domain_gpus: 8
    nic_gbps_per_gpu: 400
"""


@pytest.mark.parametrize("mem, bw, says", [
    (80, "1e-300", "mem_bw_tbs: Input should be greater than or equal to 0.01"),   # perf printed a 5.7e301 ms TTFT
    (-1, -1, "memory_gb: Input should be greater than 0 (got -1); gpus.xg.mem_bw_tbs"),  # was three lines
])
def test_catalog_problems_are_one_line(run_cli, tmp_path, mem, bw, says):
    f = tmp_path / "c.yaml"
    f.write_text(_CATALOG.format(mem=mem, bw=bw))
    code, out, err = run_cli("hardware", "--catalog", str(f))
    assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error: invalid hardware catalog")
    assert says in err, err


def test_a_node_without_nics_is_refused(run_cli, tmp_path):
    """nics_per_node 0 beside nic_gbps_per_gpu 400 is a contradiction the model would not notice (it reads only the
    per-GPU bandwidth): refused naming the field."""
    f = tmp_path / "c.yaml"
    f.write_text(_CATALOG.format(mem=80, bw=3) + "    nics_per_node: 0\n")
    code, out, err = run_cli("hardware", "--catalog", str(f))
    assert code == 2 and "systems.xs.nics_per_node: Input should be greater than or equal to 1" in err, err
