"""The page at `/` in a real browser: Playwright drives headless Chromium through each tab, reads
the answer off the page and checks it against the Python API's answer to the same question (the
expected values are `plan()`, `serve()` and `fleet()`, run here). Skipped where the web extra,
Playwright or a Chromium is missing (CI installs neither browser nor Playwright)."""

from __future__ import annotations

import os
import re

import pytest

pytest.importorskip("fastapi", reason="the web extra is not installed")
pytest.importorskip("uvicorn", reason="the web extra is not installed")
sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed")

from tests.web_server import launch, served  # noqa: E402

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "fleet.yaml")


@pytest.fixture(scope="module")
def site():
    with served() as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        try:
            b = launch(p)
        except Exception as err:  # no Chromium here: neither the system's nor Playwright's download
            pytest.skip(f"no Chromium to drive: {str(err).splitlines()[0]}")
        yield b
        b.close()


@pytest.fixture
def page(browser, site):
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(site)
    page.wait_for_selector("#models option", state="attached")
    yield page
    context.close()
    assert not errors, errors


def test_the_train_tab_shows_the_plans_gpu_count_its_charts_and_a_permalink(page, site) -> None:
    from apsi import plan

    page.fill("#form-plan [name=params]", "llama-3.1-70b")
    page.fill("#form-plan [name=tokens]", "15T")
    page.click("#form-plan button[type=submit]")
    gpus = page.wait_for_selector("#plan-gpus", timeout=60_000).get_attribute("data-gpus")
    assert int(gpus) == plan("llama-3.1-70b", tokens="15T").gpus
    assert page.locator('svg[aria-label="memory per GPU by pipeline stage"]').count() == 1
    assert page.locator('svg[aria-label="step time breakdown"]').count() == 1
    page.wait_for_selector('svg[aria-label="days against GPUs"]', timeout=60_000)
    # The launch script downloads as the CLI prints it (apsi plan ... --export megatron).
    with page.expect_download() as got:
        page.click("text=Download launch script")
    with open(got.value.path(), encoding="utf-8") as f:
        script = f.read()
    from apsi.cli.app import main
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["plan", "llama-3.1-70b", "--tokens", "15T", "--export", "megatron"]) == 0
    assert script == out.getvalue()
    # The question is in the address: opened again, the page asks it and shows the same answer.
    assert "params=llama-3.1-70b" in page.url and "tokens=15T" in page.url
    again = page.context.new_page()
    again.goto(page.url)
    assert again.wait_for_selector("#plan-gpus", timeout=60_000).get_attribute("data-gpus") == gpus


def test_an_uploaded_config_json_has_a_permalink_that_asks_it_again(page) -> None:
    # The config.json rides in the address's fragment (never sent to the server as a path), so the
    # link opens the same question: the same GPU count as plan() on that file.
    from apsi import plan

    path = os.path.join(os.path.dirname(__file__), "configs", "llama-3.1-70b.json")
    page.fill("#form-plan [name=params]", "")
    page.set_input_files("#form-plan [name=config]", path)
    page.fill("#form-plan [name=tokens]", "1T")
    page.click("#form-plan button[type=submit]")
    gpus = page.wait_for_selector("#plan-gpus", timeout=60_000).get_attribute("data-gpus")
    assert int(gpus) == plan(path, tokens="1T").gpus
    assert "#config=" in page.url and "params=" not in page.url
    again = page.context.new_page()
    again.goto(page.url)
    assert again.wait_for_selector("#plan-gpus", timeout=60_000).get_attribute("data-gpus") == gpus
    # Asked again on the linked page (more tokens), it is still the config.json's question: the
    # link's file was used once, and the second question fell back to the default model.
    # (each answer awaited by its GPU count: the one before stays on the page until it comes)
    expected = plan(path, tokens="3T").gpus
    assert expected != int(gpus)
    again.fill("#form-plan [name=tokens]", "3T")
    again.click("#form-plan button[type=submit]")
    again.wait_for_selector(f'#plan-gpus[data-gpus="{expected}"]', timeout=60_000)
    assert "#config=" in again.url
    # A model typed after the upload is the question: the file chosen had overridden it.
    expected = plan("llama-3.1-8b", tokens="1T").gpus
    assert expected != int(gpus)
    page.fill("#form-plan [name=params]", "llama-3.1-8b")
    page.click("#form-plan button[type=submit]")
    page.wait_for_selector(f'#plan-gpus[data-gpus="{expected}"]', timeout=60_000)
    assert "#config=" not in page.url and "params=llama-3.1-8b" in page.url


def test_a_bad_option_is_shown_beside_its_field(page, apsi) -> None:
    page.fill("#form-plan [name=tokens]", "-5T")
    page.click("#form-plan button[type=submit]")
    spot = page.wait_for_selector('#form-plan .err[data-for="tokens"]:not(:empty)', timeout=60_000)
    run = apsi("plan", "llama-3.1-70b", "--tokens", "-5T")
    assert spot.inner_text() == run.err.strip().removeprefix("error: ")


def test_the_serve_tab_shows_the_serving_plans_gpu_count(page) -> None:
    from apsi import serve

    page.click("nav button[data-tab=serve]")
    page.fill("#form-serve [name=params]", "llama-3.1-70b")
    page.select_option("#form-serve [name=precision]", "fp8")
    page.fill("#form-serve [name=gpu]", "H100")
    page.fill("#form-serve [name=rate]", "20")
    page.click("#form-serve button[type=submit]")
    gpus = page.wait_for_selector("#serve-gpus", timeout=60_000).get_attribute("data-gpus")
    assert int(gpus) == serve("llama-3.1-70b", precision="fp8", gpu="H100", rate=20).gpus
    page.wait_for_selector('svg[aria-label="tokens per second per GPU against per user"]', timeout=60_000)


def test_a_disaggregated_plan_shows_its_ttft_and_tpot(page) -> None:
    # The pools' table has no TTFT of its own (a prefill pool's is half the story): the page showed
    # none for a disaggregated plan. Its totals carry the pair's, as apsi serve --disagg prints them.
    from apsi import serve_disagg

    page.click("nav button[data-tab=serve]")
    page.fill("#form-serve [name=params]", "llama-3.1-70b")
    page.fill("#form-serve [name=ttft]", "500")
    page.fill("#form-serve [name=rate]", "10")
    page.check("#form-serve [name=disagg]")
    page.click("#form-serve button[type=submit]")
    ttft = page.wait_for_selector("#serve-ttft", timeout=120_000).inner_text()
    plan = serve_disagg("llama-3.1-70b", ttft=500, rate=10)
    assert ttft == (f"{plan.ttft_ms:,.0f} ms (p50 {plan.ttft_p50_ms:,.0f}, p90 {plan.ttft_p90_ms:,.0f}, "
                    f"p99 {plan.ttft_p99_ms:,.0f})")


def test_the_fleet_tab_draws_the_schedule(page) -> None:
    from apsi import fleet

    page.click("nav button[data-tab=fleet]")
    with open(EXAMPLE) as f:
        page.fill("#form-fleet [name=fleet]", f.read())
    page.fill("#form-fleet [name=time_limit]", "20")
    page.click("#form-fleet button[type=submit]")
    status = page.wait_for_selector("#fleet-status", timeout=120_000)
    expected = fleet(EXAMPLE, time_limit_s=20)
    assert int(status.get_attribute("data-late")) == expected.late_runs
    scheduled = sum(1 for r in expected.runs if r.scheduled)
    assert re.match(rf"{expected.status}: {scheduled} runs scheduled", status.inner_text())
    assert page.locator('svg[aria-label="fleet schedule"] rect.run').count() == scheduled


def test_a_long_question_can_be_cancelled(page) -> None:
    # DeepSeek-V3's frontier, asked after its plan, takes seconds (docs/benchmarks.md).
    page.fill("#form-plan [name=params]", "deepseek-v3")
    page.fill("#form-plan [name=tokens]", "14.8T")
    page.click("#form-plan button[type=submit]")
    page.wait_for_selector("#plan-gpus", timeout=60_000)
    page.wait_for_selector("#status:not([hidden])", timeout=10_000)
    page.click("#cancel")
    assert page.wait_for_selector(".frontier", timeout=10_000).inner_text() == "frontier: cancelled"


def test_a_reference_plan_shows_without_a_step_chart(page) -> None:
    # The reference arithmetic has no step-time model (its plan's time is null): the page read
    # null.compute_seconds and showed only that error.
    from apsi import plan

    page.select_option("#form-plan [name=framework]", "reference")
    page.fill("#form-plan [name=params]", "70B")
    page.fill("#form-plan [name=tokens]", "1.4T")
    page.click("#form-plan button[type=submit]")
    gpus = page.wait_for_selector("#plan-gpus", timeout=60_000).get_attribute("data-gpus")
    assert int(gpus) == plan("70B", tokens="1.4T", framework="reference").gpus
    assert page.locator("text=no step-time model under the reference arithmetic").count() == 1


def test_the_launch_menu_starts_at_the_plans_framework_and_a_refusal_keeps_the_answer(page) -> None:
    # The menu started at megatron whatever the plan's framework, so a torchtitan plan's launch was
    # refused, and the refusal replaced the whole answer.
    page.select_option("#form-plan [name=framework]", "torchtitan")
    page.fill("#form-plan [name=params]", "llama-3.1-8b")
    page.fill("#form-plan [name=tokens]", "100B")
    page.click("#form-plan button[type=submit]")
    page.wait_for_selector("#plan-gpus", timeout=60_000)
    assert page.locator("#export-format").input_value() == "torchtitan"
    with page.expect_download() as got:
        page.click("text=Download launch script")
    assert got.value.suggested_filename.endswith(".py")
    page.select_option("#export-format", "deepspeed")
    page.click("text=Download launch script")
    said = page.wait_for_selector(".launch-error:not(:empty)", timeout=30_000).inner_text()
    assert said.startswith("the plan is a torchtitan plan")
    assert page.locator("#plan-gpus").count() == 1


def test_a_phone_wide_page_does_not_scroll_sideways(browser, site) -> None:
    # At a phone's 375 px the serving plan's table (11 columns) made the page 839 px wide and the
    # plan's buttons 388: wide tables now scroll within the page, the buttons wrap.
    context = browser.new_context(viewport={"width": 375, "height": 800})
    page = context.new_page()
    page.goto(site)
    page.wait_for_selector("#models option", state="attached")
    page.click("#form-plan button[type=submit]")
    page.wait_for_selector(".answer h2", timeout=120_000)
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    page.click("nav button[data-tab=serve]")
    page.click("#form-serve button[type=submit]")
    page.wait_for_selector("#serve-gpus", timeout=120_000)
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    page.click("nav button[data-tab=fleet]")
    with open(EXAMPLE) as f:
        page.fill("#form-fleet [name=fleet]", f.read())
    page.fill("#form-fleet [name=time_limit]", "20")
    page.click("#form-fleet button[type=submit]")
    page.wait_for_selector("#fleet-status", timeout=120_000)
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    context.close()
