"""Planner and start-up speed: the full search for DeepSeek-V3 over every catalog system and layout, whole process.

    python benchmarks/plan_speed.py [--repeat 5] [--no-pin] [--out FILE]

Runs ``clusterfit plan deepseek-ai/DeepSeek-V3 --isl 4096 --osl 1024 --rate 5 --ttft-ms 2000 --tpot-ms 50
--json`` as a fresh process pinned to one CPU core (``taskset -c 0`` where available), ``--repeat`` times,
and reports the median wall time of the whole process (interpreter start, imports, catalogs, search,
JSON) and the configurations evaluated: with every module's bytecode cached (as after ``pip install``), and
compiling the modules that have none on every run (an editable checkout under PYTHONDONTWRITEBYTECODE). It also
times the command line's start-up the same way (bytecode cached): a fresh ``python -c "import clusterfit.cli"`` and
``clusterfit --help``. Writes benchmarks/results/plan_speed.json.
To time another checkout, run it with ``PYTHONPATH=OTHER/src`` and ``--out``.

If the pip package ``aiconfigurator`` is importable, the same question (DeepSeek-V3, ISL 4000 / OSL 500,
TTFT 2000 ms, TPOT 50 ms, one 8-GPU node, on each system it knows among h100_sxm, h200_sxm, b200_sxm) goes
through ``aiconfigurator cli default`` and the time ratio is printed; otherwise it says it is not installed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULT = ROOT / "benchmarks" / "results" / "plan_speed.json"
QUESTION = ["deepseek-ai/DeepSeek-V3", "--isl", "4096", "--osl", "1024", "--rate", "5", "--ttft-ms", "2000",
            "--tpot-ms", "50", "--json"]
AIC_SYSTEMS = ["h100_sxm", "h200_sxm", "b200_sxm"]


def _pin() -> list[str]:
    return ["taskset", "-c", "0"] if shutil.which("taskset") else []


def _loadavg() -> float | None:
    """The 1-minute load average (other jobs on a shared machine slow every figure), None where unknown."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def bytecode_env(cache: Path | None) -> dict[str, str]:
    """The child's environment: with ``cache``, bytecode is written to and read from that folder
    (PYTHONPYCACHEPREFIX; as after ``pip install``, which compiles every module); without, no bytecode is written
    (PYTHONDONTWRITEBYTECODE), so every run compiles the modules that have none (an editable checkout's)."""
    env = dict(os.environ)
    if cache is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPYCACHEPREFIX", None)
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(cache)
    return env


def run_clusterfit(pin: bool, env: dict[str, str] | None = None) -> tuple[float, dict]:
    cmd = (_pin() if pin else []) + [sys.executable, "-c", "from clusterfit.cli import main; main()", "plan", *QUESTION]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"clusterfit plan failed ({out.returncode}): {out.stderr.strip()}")
    return wall, json.loads(out.stdout)


def time_startup(pin: bool, repeat: int, env: dict[str, str] | None = None) -> dict[str, float]:
    """Median wall time of a fresh interpreter importing the CLI, and of ``clusterfit --help``."""
    out = {}
    for name, code, args in (("import_cli_s", "import clusterfit.cli", []),
                             ("help_s", "from clusterfit.cli import main; main()", ["--help"])):
        walls = []
        for _ in range(max(3, repeat)):
            t0 = time.perf_counter()
            subprocess.run((_pin() if pin else []) + [sys.executable, "-c", code, *args], capture_output=True,
                           cwd=ROOT, check=False, env=env)
            walls.append(time.perf_counter() - t0)
        out[name] = statistics.median(walls)
    t0 = time.perf_counter()
    for _ in range(max(3, repeat)):
        subprocess.run((_pin() if pin else []) + [sys.executable, "-c", "pass"], capture_output=True, check=False)
    out["bare_python_s"] = (time.perf_counter() - t0) / max(3, repeat)
    return out


def run_aiconfigurator(pin: bool) -> dict:
    if importlib.util.find_spec("aiconfigurator") is None:
        return {"installed": False}
    exe = shutil.which("aiconfigurator")
    base = [exe] if exe else [sys.executable, "-m", "aiconfigurator.main"]
    times, errors = [], []
    for system in AIC_SYSTEMS:
        cmd = (_pin() if pin else []) + base + ["cli", "default", "--model", "DEEPSEEK_V3", "--total_gpus", "8",
                                                "--system", system, "--isl", "4000", "--osl", "500",
                                                "--ttft", "2000", "--tpot", "50"]
        t0 = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True)
        dt = time.perf_counter() - t0
        if out.returncode == 0:
            times.append(dt)
        else:
            errors.append(f"{system}: exit {out.returncode}: {out.stderr.strip().splitlines()[-1:] or ''}")
    return {"installed": True, "systems": AIC_SYSTEMS, "wall_s_total": sum(times), "runs_ok": len(times),
            "errors": errors}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-pin", action="store_true", help="do not pin to one core")
    ap.add_argument("--out", type=Path, default=RESULT, help="where to write the figures")
    args = ap.parse_args()
    pin = not args.no_pin
    load_before = _loadavg()
    walls, compiling, data = [], [], {}
    with tempfile.TemporaryDirectory(prefix="clusterfit-pycache-") as cache:
        cached, uncached = bytecode_env(Path(cache)), bytecode_env(None)
        run_clusterfit(pin, cached)          # writes the bytecode; not timed
        for _ in range(max(1, args.repeat)):
            wall, data = run_clusterfit(pin, cached)
            walls.append(wall)
            compiling.append(run_clusterfit(pin, uncached)[0])
        startup = time_startup(pin, args.repeat, cached)
    median = statistics.median(walls)
    load_after = _loadavg()
    rec = data.get("recommended") or {}
    print(f"clusterfit plan {' '.join(QUESTION[:-1])}")
    print(f"  whole process, one core{' (taskset -c 0)' if pin and _pin() else ''}: median {median:.3f} s "
          f"over {len(walls)} runs (min {min(walls):.3f}, max {max(walls):.3f})")
    print(f"  (bytecode cached, as installed; compiling the package's modules every run, as an editable checkout "
          f"under PYTHONDONTWRITEBYTECODE: median {statistics.median(compiling):.3f} s)")
    print(f"  machine load (1-min average) {load_before} before, {load_after} after")
    print(f"  configurations evaluated: {data['configurations_evaluated']:,} "
          f"({data['candidates_compiled']} replica layouts compiled, "
          f"{len(data['per_system'])} systems with a plan)")
    print(f"  start-up: import clusterfit.cli {startup['import_cli_s']:.3f} s, clusterfit --help "
          f"{startup['help_s']:.3f} s (bare python {startup['bare_python_s']:.3f} s)")
    if rec:
        print(f"  recommended: {rec['system']} {rec['layout']} x{rec['replicas']}, ${rec['cost_per_hour']:,.2f}/h")
    aic = run_aiconfigurator(pin)
    if not aic["installed"]:
        print("  aiconfigurator: not installed (pip install aiconfigurator to compare)")
    elif aic["runs_ok"]:
        ratio = aic["wall_s_total"] / median
        aic["ratio_vs_clusterfit"] = ratio
        print(f"  aiconfigurator cli default, {aic['runs_ok']} systems: {aic['wall_s_total']:.1f} s "
              f"-> clusterfit is {ratio:.0f}x faster on this question")
    else:
        print(f"  aiconfigurator installed but failed: {'; '.join(aic['errors'])}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "command": "clusterfit plan " + " ".join(QUESTION), "pinned_one_core": bool(pin and _pin()),
        "wall_s_median": median, "wall_s_runs": walls, "configurations_evaluated": data["configurations_evaluated"],
        "candidates_compiled": data["candidates_compiled"], "systems_with_plan": len(data["per_system"]),
        "startup": startup, "loadavg_1m_before_after": [load_before, load_after],
        "bytecode": "wall_s_* with the bytecode of every module cached (PYTHONPYCACHEPREFIX, written by an untimed "
                    "first run), as after pip install; wall_s_compiling_* under PYTHONDONTWRITEBYTECODE",
        "wall_s_compiling_median": statistics.median(compiling), "wall_s_compiling_runs": compiling,
        "recommended": {k: rec.get(k) for k in ("system", "layout", "replicas", "total_gpus", "cost_per_hour")},
        "aiconfigurator": aic, "python": platform.python_version(), "machine": platform.machine(),
        "date": time.strftime("%Y-%m-%d"),
    }, indent=2) + "\n")
    print(f"  wrote {args.out}")


if __name__ == "__main__":
    main()
