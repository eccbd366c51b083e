"""The web page in a real browser (Debian's Chromium driven by Playwright): GLM-5.3 at fp8 does not fit on one
8x H100 node and fits on 8x H200; a longer context holds fewer sessions; a plan names the recommended system.
No request may leave the machine."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest

pytest.importorskip("fastapi", reason="the web extra is not installed (pip install -e '.[web]')")
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (test extra)")

from _webserver import running_server  # noqa: E402

CHROMIUM = os.environ.get("CLUSTERFIT_CHROMIUM", "/usr/bin/chromium")
pytestmark = [
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is absent (apt-get install chromium; "
                       ".ci/run installs it)"),
    pytest.mark.filterwarnings("ignore:The 'alias' attribute with value:UserWarning"),
]
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


@pytest.fixture(scope="module")
def page_url() -> Iterator[str]:
    with running_server() as url:
        yield url


@pytest.fixture()
def page(page_url: str) -> Iterator[tuple[object, list[str], list[str]]]:
    outside: list[str] = []
    errors: list[str] = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        context = browser.new_context(viewport={"width": 1440, "height": 1000})

        def guard(route, request) -> None:  # noqa: ANN001
            host = urlparse(request.url).hostname
            if request.url.startswith(("data:", "blob:", "about:")) or host in LOOPBACK:
                route.continue_()
            else:
                outside.append(request.url)
                route.abort()

        context.route("**/*", guard)
        pg = context.new_page()
        pg.on("pageerror", lambda exc: errors.append(str(exc)))
        pg.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        pg.set_default_timeout(15_000)
        pg.goto(page_url + "/")
        yield pg, outside, errors
        browser.close()


def _sessions(pg, system: str) -> int:  # noqa: ANN001
    return int(pg.locator(f".card[data-system={system}] [data-testid=sessions]").inner_text().replace(",", ""))


def test_fit_glm_context_and_plan(page, tmp_path: Path) -> None:  # noqa: ANN001
    pg, outside, errors = page
    pg.get_by_label("Model (Hugging Face id").fill("zai-org/GLM-5.3")
    pg.get_by_label("Weight precision").select_option("fp8")
    h100 = pg.locator(".card[data-system=dgx_h100] .verdict")
    h200 = pg.locator(".card[data-system=hgx_h200] .verdict")
    sync_api.expect(h100).to_contain_text("does not fit on one 8x H100", timeout=10_000)
    sync_api.expect(h200).to_contain_text("fits on one node")
    assert "does not fit" not in h200.inner_text()
    sync_api.expect(pg.locator("#model-facts")).to_contain_text("fp8")
    assert _sessions(pg, "hgx_h200") == 12                      # README: 12 sequences of 32k on 8x H200
    # the fraction the engine (vLLM by default) budgets with, per system, by the engine's own name
    legend = pg.locator(".card[data-system=hgx_h200] .legend")
    sync_api.expect(legend).to_contain_text("vLLM gpu_memory_utilization 0.9")

    pg.get_by_label("Context per session (tokens)").fill("131072")
    sync_api.expect(pg.locator(".card[data-system=hgx_h200] [data-testid=sessions]")).to_have_text("3")
    sync_api.expect(pg.locator(".card[data-system=hgx_h200]")).to_contain_text("sessions of 131,072 tokens")

    pg.get_by_label("Endpoint $ / Mtok in (optional)").fill("0.6")
    pg.get_by_label("Endpoint $ / Mtok out (optional)").fill("2.2")
    pg.get_by_role("button", name="Plan").click()
    recommended = pg.locator("[data-testid=recommended]")
    sync_api.expect(recommended).to_contain_text(re.compile(r"Recommended: (dgx_h100|hgx_h200|dgx_b200)"))
    sync_api.expect(pg.locator("[data-testid=endpoint]")).to_contain_text("Endpoint verdict")
    # the plan's cost per hour is the whole plan's, every replica's GPUs (PlanOption.cost_per_hour)
    sync_api.expect(pg.get_by_role("columnheader", name="$/h, all replicas")).to_be_visible()
    sync_api.expect(pg.locator("#pareto-chart svg polyline").first).to_be_visible()
    pg.get_by_label("Deployment target").select_option("kubernetes")
    pg.get_by_role("button", name="Generate").click()
    sync_api.expect(pg.locator("[data-testid=deploy-file]").first).to_contain_text("kind:", timeout=15_000)
    shot = tmp_path / "web-page.png"
    pg.screenshot(path=str(shot), full_page=True)
    if os.environ.get("CLUSTERFIT_SCREENSHOT"):
        pg.screenshot(path=os.environ["CLUSTERFIT_SCREENSHOT"], full_page=True)
    assert shot.stat().st_size > 10_000
    assert outside == [], f"requests left the machine: {outside}"
    assert errors == []


def test_keyboard_and_errors(page) -> None:  # noqa: ANN001
    pg, outside, errors = page
    pg.locator("#model").focus()
    pg.keyboard.press("Tab")
    assert pg.evaluate("document.activeElement.tagName") == "SUMMARY"     # the custom config.json disclosure
    pg.get_by_label("Model (Hugging Face id").fill("/etc/passwd")
    sync_api.expect(pg.locator("#fit-error")).to_contain_text("not a bundled model")
    pg.get_by_label("Model (Hugging Face id").fill("llama-3.1-8b")
    pg.locator("#custom summary").press("Enter")
    pg.get_by_label("config.json content").fill('{"hidden_size": 4096')
    sync_api.expect(pg.locator("#config-error")).to_contain_text("config.json")
    assert outside == []


def test_plan_and_deploy_with_speculative_decoding(page) -> None:  # noqa: ANN001
    """The drafts feed /api/plan and /api/deploy: mtp (the default drafter) for a model without MTP layers is refused
    with the parameter named; EAGLE-3 plans, says what the TPOT assumes, and deploys with the draft head."""
    pg, outside, errors = page
    pg.get_by_label("Model (Hugging Face id").fill("meta-llama/Llama-3.1-8B")
    pg.get_by_label("Speculative draft tokens per step (optional)").fill("3")
    sync_api.expect(pg.locator("#fit-error")).to_contain_text("speculative_method")     # the fit counts the drafter
    pg.get_by_role("button", name="Plan").click()
    sync_api.expect(pg.locator("#plan-error")).to_contain_text("speculative_method")
    pg.get_by_label("Drafter").select_option("eagle3")
    sync_api.expect(pg.locator("#fit-error")).to_have_text("")
    sync_api.expect(pg.locator("#fit-cards")).to_contain_text("the eagle3 draft head's weights are not counted")
    pg.get_by_role("button", name="Plan").click()
    sync_api.expect(pg.locator("[data-testid=recommended]")).to_be_visible()
    sync_api.expect(pg.locator("[data-testid=speculative]")).to_contain_text(
        "eagle3, 3 draft tokens per step at acceptance 0.70 (2.53 tokens per step")   # 1 + 0.7 + 0.49 + 0.343
    pg.get_by_label("Draft checkpoint for EAGLE (deploy)").fill("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")
    pg.get_by_role("button", name="Generate").click()
    launch = pg.locator("[data-testid=deploy-file]").first
    sync_api.expect(launch).to_contain_text("--speculative-config", timeout=15_000)
    sync_api.expect(launch).to_contain_text("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")
    assert outside == []
    # the refused mtp plan, and the refused mtp fits the typing scheduled (one or more)
    assert [e for e in errors if "status of 422" not in e] == [] and len(errors) >= 2


def test_eagle_head_config_is_read_in_the_browser(page, tmp_path) -> None:  # noqa: ANN001
    """The EAGLE head's config.json is read by the page and sent as content: a head of another width is refused
    naming the field; Llama-3.1-70B's SpecForge head prices its drafts at its own 1,403,027,456 parameters over the
    target's 70,553,706,496 (1.99% of a decode step, tests/test_speculative.py)."""
    pg, outside, errors = page
    head = Path(__file__).parent / "data" / "eagle" / "llama3-70B-eagle3.json"
    pg.get_by_label("Model (Hugging Face id").fill("meta-llama/Llama-3.1-8B")
    pg.get_by_label("Speculative draft tokens per step (optional)").fill("3")
    pg.get_by_label("Drafter").select_option("eagle3")
    not_json = tmp_path / "head.json"
    not_json.write_text("{")
    pg.get_by_label("EAGLE head's config.json (optional: counts its memory and cost)").set_input_files(str(not_json))
    sync_api.expect(pg.locator("#spec-draft-config-error")).to_contain_text("head.json")
    pg.get_by_label("EAGLE head's config.json (optional: counts its memory and cost)").set_input_files(str(head))
    sync_api.expect(pg.locator("#spec-draft-config-error")).to_have_text("")
    sync_api.expect(pg.locator("#fit-error")).to_contain_text("hidden_size 8,192 is not Llama-3.1-8B's 4,096")
    pg.get_by_role("button", name="Plan").click()
    sync_api.expect(pg.locator("#plan-error")).to_contain_text("speculative_draft_config")
    sync_api.expect(pg.locator("#plan-error")).to_contain_text("hidden_size 8,192 is not Llama-3.1-8B's 4,096")
    pg.get_by_label("Model (Hugging Face id").fill("meta-llama/Llama-3.1-70B")
    sync_api.expect(pg.locator("#fit-cards")).to_contain_text("the eagle3 draft head (the draft head's config.json)")
    pg.get_by_role("button", name="Plan").click()
    sync_api.expect(pg.locator("[data-testid=speculative]")).to_contain_text(
        "the drafter costing 1.99% of a decode step per draft token", timeout=30_000)
    assert outside == []
    # the 8B model refused the 70B head: in the fit, and in the plan
    assert [e for e in errors if "status of 422" not in e] == [] and len(errors) >= 2


def test_one_token_answers_plan_without_a_tpot(page) -> None:  # noqa: ANN001
    """Prompts answered with one token (classification, scoring): the page's default TPOT target is refused with the
    parameter named (no request decodes, so there is none to hold); without it the plan shows no TPOT."""
    pg, outside, errors = page
    pg.get_by_label("Model (Hugging Face id").fill("meta-llama/Llama-3.1-8B")
    pg.get_by_label("Output tokens (OSL)").fill("1")
    pg.get_by_role("button", name="Plan").click()
    sync_api.expect(pg.locator("#plan-error")).to_contain_text("tpot_ms")
    pg.get_by_label("TPOT target p90 (ms)").fill("")
    pg.get_by_role("button", name="Plan").click()
    recommended = pg.locator("[data-testid=recommended]")
    sync_api.expect(recommended).to_be_visible()
    sync_api.expect(recommended.locator(".figures div", has_text="TPOT (predicted)").locator("b")).to_have_text("-")
    assert outside == []
    assert [e for e in errors if "status of 422" not in e] == [] and len(errors) >= 1


def test_one_endpoint_price_alone_is_an_error_on_the_page(page) -> None:  # noqa: ANN001
    """One endpoint price left empty was sent as 0 (in=0.6,out=0), judging the plan against a free output side."""
    pg, outside, errors = page
    pg.get_by_label("Model (Hugging Face id").fill("llama-3.1-8b")
    pg.get_by_label("Endpoint $ / Mtok in (optional)").fill("0.6")
    pg.get_by_role("button", name="Plan").click()
    sync_api.expect(pg.locator("#plan-error")).to_contain_text("give both $ per million input and output tokens")
    assert outside == []


def test_an_error_clears_the_results_it_makes_stale(page) -> None:  # noqa: ANN001
    """A Plan that fails (0 requests/s) left the last plan on the page with its Deployment section live (Generate
    deployed the stale plan); a fit that fails (an unknown model) left the last model's facts line."""
    pg, outside, errors = page
    pg.get_by_label("Model (Hugging Face id").fill("llama-3.1-8b")
    sync_api.expect(pg.locator("#model-facts")).to_contain_text("Llama-3.1-8B")
    pg.get_by_role("button", name="Plan").click()
    sync_api.expect(pg.locator("[data-testid=recommended]")).to_be_visible()
    sync_api.expect(pg.locator("#deploy")).to_be_visible()
    sync_api.expect(pg.locator("#pareto")).to_be_visible()
    pg.get_by_label("Requests / s").fill("0")
    pg.get_by_role("button", name="Plan").click()
    sync_api.expect(pg.locator("#plan-error")).to_contain_text("rate")
    sync_api.expect(pg.locator("#plan-out")).to_have_text("")
    sync_api.expect(pg.locator("#deploy")).to_be_hidden()
    sync_api.expect(pg.locator("#pareto")).to_be_hidden()
    pg.get_by_label("Model (Hugging Face id").fill("nonexistent-model")
    sync_api.expect(pg.locator("#fit-error")).to_contain_text("unknown model 'nonexistent-model'")
    sync_api.expect(pg.locator("#model-facts")).to_have_text("")
    sync_api.expect(pg.locator("#fit-cards")).to_have_text("")
    assert outside == []
    assert [e for e in errors if "status of 422" not in e] == [] and len(errors) >= 2


def test_enter_runs_the_sections_action(page) -> None:  # noqa: ANN001
    """Enter in a field did nothing (the buttons are type="button", so no implicit submission): among the traffic and
    targets it plans, on the deployment target it generates the files, and elsewhere it fits at once."""
    pg, outside, errors = page
    pg.get_by_label("Model (Hugging Face id").fill("llama-3.1-8b")
    pg.get_by_label("Model (Hugging Face id").press("Enter")
    sync_api.expect(pg.locator("#model-facts")).to_contain_text("Llama-3.1-8B")
    assert pg.locator("[data-testid=recommended]").count() == 0     # Enter in the model fits; it does not plan
    pg.get_by_label("Requests / s").fill("2")
    pg.get_by_label("Requests / s").press("Enter")
    sync_api.expect(pg.locator("[data-testid=recommended]")).to_be_visible()
    pg.get_by_label("Deployment target").select_option("slurm")
    pg.get_by_label("Deployment target").press("Enter")
    sync_api.expect(pg.locator("[data-testid=deploy-file]").first).to_contain_text("#SBATCH", timeout=15_000)
    pg.get_by_label("TTFT target p90 (ms)").fill("-1")
    pg.get_by_label("TTFT target p90 (ms)").press("Enter")
    sync_api.expect(pg.locator("#plan-error")).to_contain_text("ttft_ms")
    assert outside == []
    assert [e for e in errors if "status of 422" not in e] == []
