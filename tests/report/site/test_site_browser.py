"""`mqlab site` in a real browser: Debian's headless Chromium (packages chromium and
chromium-driver, installed by `scripts/bootstrap --test` from scripts/apt-packages.txt),
driven by Selenium, opens the site from disk (file://).

The site is written from the repository's committed results/ (the durability matrix's
runs under results/durability-matrix/ included) plus one synthetic run. Checked: each page
loads without console errors, the index lists every committed run, sorting and filtering
work, following a run's link shows its plots, a run with faults shows its faults table,
and the comparison page shows the runs ticked on the index. A screenshot of the index is
kept as a test artefact (in tmp_path, and in $MQLAB_TEST_ARTEFACTS when set)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mqlab.analysis.job import summarize_run
from mqlab.archive import layout
from mqlab.report.site import write_site
from tests.fixtures.committed import committed_runs, copy_committed
from tests.report.archive import write_tiny_run

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
COMMITTED = REPO / "results"
MATRIX = COMMITTED / "durability-matrix"  # committed runs with faults
APT_LIST = "scripts/apt-packages.txt"
WAIT_S = 20  # every wait for the browser is bounded by this
PAGE_LOAD_S = 30
LOADED = "return arguments[0].complete"


@dataclass
class Site:
    out: Path
    committed: list[str]
    extra: str  # the synthetic run's id (scenario "tiny")
    faulted: dict[str, int]  # run id -> faults in its summary.json (the durability matrix)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    root = tmp_path_factory.mktemp("site-browser")
    results = root / "results"
    results.mkdir()
    matrix = committed_runs("results/durability-matrix/*")
    found = [*committed_runs("results/*"), *matrix]
    assert found, f"{COMMITTED}: no committed run"
    for path in found:
        copy_committed(path, results / path.name)
    committed = sorted(p.name for p in found)
    faulted = {p.name: len(json.loads((p / layout.SUMMARY).read_text())["faults"]) for p in matrix}
    assert faulted and all(faulted.values()), f"{MATRIX}: no committed run with faults"
    extra = write_tiny_run(results, omit=("workers/receiver-01/delivery.json",))
    summarize_run(extra.run_dir, window_s=2.0)
    out = root / "site"
    result = write_site(results, out)
    assert result.runs == len(committed) + 1 and not result.warnings
    return Site(out, committed, extra.run_id, faulted)


def _tools() -> tuple[str, str]:
    chromium = shutil.which("chromium")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.fail(
            f"headless browser test: {'chromium' if not chromium else 'chromedriver'} not "
            f"found on PATH; install the Debian packages of {APT_LIST} (chromium, "
            "chromium-driver): scripts/bootstrap --test",
            pytrace=False,
        )
    return chromium, driver


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    chromium, chromedriver = _tools()
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as err:  # the dev dependency group is not installed
        pytest.fail(f"selenium missing ({err}): run scripts/bootstrap", pytrace=False)
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager: never download
    profile = tempfile.mkdtemp(prefix="mqlab-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",  # the tests run as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        "--window-size=1400,1000",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = None
    try:
        driver = webdriver.Chrome(options=options, service=Service(chromedriver))
        driver.set_page_load_timeout(PAGE_LOAD_S)
        driver.set_script_timeout(WAIT_S)
        yield driver
    finally:
        if driver is not None:
            driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _wait(driver: Any) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT_S)


def _open(driver: Any, path: Path, fragment: str = "") -> None:
    driver.get_log("browser")  # drop the entries of earlier pages
    driver.get(path.as_uri() + fragment)
    _wait(driver).until(lambda d: d.execute_script("return document.readyState") == "complete")


def _no_console_errors(driver: Any, what: str) -> None:
    severe = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    assert not severe, f"{what}: console errors {severe}"


def _rows(driver: Any) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, "#runs tbody tr"))


def _shown_ids(driver: Any) -> list[str]:
    return [r.get_attribute("data-run") for r in _rows(driver) if r.is_displayed()]


def _header(driver: Any, text: str) -> Any:
    from selenium.webdriver.common.by import By

    found = [
        th
        for th in driver.find_elements(By.CSS_SELECTOR, "#runs thead th")
        if " ".join(th.text.split()).startswith(text)
    ]
    assert len(found) == 1, f"column {text!r}: {len(found)} headings"
    return found[0]


def _sort_values(driver: Any, column: int) -> list[float]:
    return [
        float(v)
        for v in driver.execute_script(
            "return Array.from(document.querySelectorAll('#runs tbody tr'))"
            ".map(r => r.cells[arguments[0]].getAttribute('data-sort'))"
            ".filter(v => v !== '');",
            column,
        )
    ]


def test_index_loads_and_lists_every_committed_run(browser: Any, site: Site) -> None:
    _open(browser, site.out / "index.html")
    _no_console_errors(browser, "index.html")
    ids = [r.get_attribute("data-run") for r in _rows(browser)]
    for run_id in site.committed:
        assert run_id in ids, f"the index lacks the committed run {run_id}"
    assert site.extra in ids
    assert "mqlab" in browser.title


def test_sorting_by_a_column_heading_reorders_the_rows(browser: Any, site: Site) -> None:
    _open(browser, site.out / "index.html")
    heading = _header(browser, "Send msgs/s")
    column = int(browser.execute_script("return arguments[0].cellIndex;", heading))
    before = _shown_ids(browser)
    heading.click()
    _wait(browser).until(lambda d: heading.get_attribute("aria-sort") == "ascending")
    ascending = _shown_ids(browser)
    values = _sort_values(browser, column)
    assert values == sorted(values), values
    heading.click()
    _wait(browser).until(lambda d: heading.get_attribute("aria-sort") == "descending")
    descending = _shown_ids(browser)
    values = _sort_values(browser, column)
    assert values == sorted(values, reverse=True), values
    assert sorted(before) == sorted(ascending) == sorted(descending)  # the same rows
    assert ascending != descending and len(set(values)) > 1
    _no_console_errors(browser, "sorting the index")


def test_the_filter_box_hides_rows_that_do_not_match(browser: Any, site: Site) -> None:
    from selenium.webdriver.common.by import By

    _open(browser, site.out / "index.html")
    box = browser.find_element(By.CSS_SELECTOR, 'input[data-filter="runs"]')
    box.send_keys("tiny")
    _wait(browser).until(lambda d: _shown_ids(d) == [site.extra])
    for row in _rows(browser):
        if row.get_attribute("data-run") in site.committed:
            assert not row.is_displayed()
    count = browser.find_element(By.CSS_SELECTOR, '[data-count-for="runs"]').text
    assert count == f"1 of {len(site.committed) + 1} shown"
    box.clear()
    box.send_keys(" ")  # an input event with nothing to match: every row again
    _wait(browser).until(lambda d: len(_shown_ids(d)) == len(site.committed) + 1)
    _no_console_errors(browser, "filtering the index")


def test_a_runs_link_opens_its_page_with_its_plots(browser: Any, site: Site) -> None:
    from selenium.webdriver.common.by import By

    for run_id in (site.committed[0], site.extra):
        _open(browser, site.out / "index.html")
        link = browser.find_element(By.CSS_SELECTOR, f'#runs tr[data-run="{run_id}"] td.run a')
        link.click()
        _wait(browser).until(lambda d, r=run_id: d.current_url.endswith(f"/{r}/index.html"))
        _wait(browser).until(lambda d: d.execute_script("return document.readyState") == "complete")
        assert browser.find_element(By.TAG_NAME, "h1").text.replace("\n", "") == run_id
        images = browser.find_elements(By.CSS_SELECTOR, "img.plot")
        assert {i.get_attribute("src").rsplit("/", 1)[-1] for i in images} == {
            "latency_percentiles.png",
            "timeline.png",
        }
        for img in images:
            _wait(browser).until(lambda d, i=img: d.execute_script(LOADED, i))
            width = browser.execute_script("return arguments[0].naturalWidth", img)
            assert width > 0, f"{run_id}: {img.get_attribute('src')} did not load"
        _no_console_errors(browser, f"the page of {run_id}")


def test_a_faulted_runs_page_shows_its_faults_table(browser: Any, site: Site) -> None:
    """From the index's durability matrix to a run with faults: its Faults table is
    visible, a row per fault."""
    from selenium.webdriver.common.by import By

    _open(browser, site.out / "index.html")
    matrix = browser.find_element(By.ID, "durability")
    assert matrix.is_displayed()
    rows = matrix.find_elements(By.CSS_SELECTOR, "tbody tr")
    assert sorted(r.get_attribute("data-run") for r in rows) == sorted(site.faulted)
    run_id = sorted(site.faulted)[0]
    browser.find_element(By.CSS_SELECTOR, f'#durability tr[data-run="{run_id}"] td.run a').click()
    _wait(browser).until(lambda d: d.current_url.endswith(f"/{run_id}/index.html"))
    _wait(browser).until(lambda d: d.execute_script("return document.readyState") == "complete")
    table = browser.find_element(By.ID, "faults")
    browser.execute_script("arguments[0].scrollIntoView()", table)
    assert table.is_displayed()
    shown = [r for r in table.find_elements(By.CSS_SELECTOR, "tbody tr") if r.is_displayed()]
    assert len(shown) == site.faulted[run_id]
    heading = table.find_elements(By.CSS_SELECTOR, "thead th")[0].text
    assert heading == "fault"
    _no_console_errors(browser, f"the page of {run_id}")


def test_the_comparison_page_shows_the_runs_ticked_on_the_index(browser: Any, site: Site) -> None:
    from selenium.webdriver.common.by import By

    _open(browser, site.out / "compare.html")
    _no_console_errors(browser, "compare.html")
    published = browser.find_elements(By.CSS_SELECTOR, "#reference tr.published")
    assert any(r.is_displayed() for r in published), "no mqperf 2021 row shown"
    assert "mqperf 2021 (published)" in browser.page_source

    _open(browser, site.out / "index.html")
    browser.find_element(By.CSS_SELECTOR, f'input.pick[value="{site.extra}"]').click()
    button = browser.find_element(By.ID, "compare-picked")
    _wait(browser).until(lambda d: button.is_enabled())
    button.click()
    _wait(browser).until(lambda d: "compare.html#runs=" in d.current_url)
    _wait(browser).until(lambda d: d.execute_script("return document.readyState") == "complete")
    shown = [
        th.text.replace("\n", "")
        for th in browser.find_elements(By.CSS_SELECTOR, "#side thead th[data-col]")
        if th.is_displayed()
    ]
    assert shown == [site.extra]
    _no_console_errors(browser, "compare.html with runs ticked")


def test_a_screenshot_of_the_index_is_kept(browser: Any, site: Site, tmp_path: Path) -> None:
    _open(browser, site.out / "index.html")
    height = browser.execute_script("return document.body.scrollHeight")
    browser.set_window_size(1400, min(max(height + 120, 600), 4000))
    shots = [tmp_path / "index.png"]
    artefacts = os.environ.get("MQLAB_TEST_ARTEFACTS")
    if artefacts:
        Path(artefacts).mkdir(parents=True, exist_ok=True)
        shots.append(Path(artefacts) / "site-index.png")
    for shot in shots:
        assert browser.save_screenshot(str(shot)), shot
        data = shot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, shot
    browser.set_window_size(1400, 1000)
    _no_console_errors(browser, "index.html (screenshot)")
