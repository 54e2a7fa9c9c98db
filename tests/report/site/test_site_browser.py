"""`mqlab site` in a real browser: Debian's headless Chromium (packages chromium and
chromium-driver, installed by `scripts/bootstrap --test` from scripts/apt-packages.txt),
driven by Selenium, opens the site from disk (file://).

The site is written from a copy of the repository's committed results/, every folder
of it (seeds, durability matrix), with git tracking the committed manifests as in a
clone, plus one synthetic run of the user's own (untracked). Checked: each page loads
without console errors, the index lists every committed run and every experiment (the
user's own first), sorting and filtering work, following a run's link shows its plots, a
run with faults shows its faults table, the experiment pages draw their charts (mqperf
2021's beside the published rows) and lay out the published sets' tables, the broker
overview and the durability matrix have their rows, and the comparison page shows the
runs ticked on the index. A screenshot of the index is
kept as a test artefact (in tmp_path, and in $MQLAB_TEST_ARTEFACTS when set)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import tomllib
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
    # (folder, family) of every committed run, computed from its scenario.toml
    experiments: dict[str, tuple[str, str]]
    brokers: set[str]  # the brokers of every run


def _experiment_of(run_dir: Path, folder: str) -> tuple[str, str]:
    """The (folder, family) of a run, read from its scenario.toml: the published set it
    names in [reference], else its name without the broker's name."""
    doc = tomllib.loads((run_dir / layout.SCENARIO).read_text())
    ref = doc.get("reference")
    if isinstance(ref, dict) and "set" in ref:
        return folder, str(ref["set"])
    words = [w for w in str(doc["name"]).split("-") if w != doc["broker"]]
    return folder, "-".join(words)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    root = tmp_path_factory.mktemp("site-browser")
    results = root / "results"
    results.mkdir()
    found = committed_runs("results/**")
    matrix = committed_runs("results/durability-matrix/*")
    assert len(found) > 100, f"{COMMITTED}: too few committed runs ({len(found)})"
    experiments, brokers = {}, set()
    for path in found:
        rel = path.relative_to(COMMITTED)
        copy_committed(path, results / rel)
        folder = rel.parent.as_posix()
        experiments[path.name] = _experiment_of(path, folder)
        brokers.add(tomllib.loads((path / layout.SCENARIO).read_text())["broker"])
    committed = sorted(p.name for p in found)
    faulted = {p.name: len(json.loads((p / layout.SUMMARY).read_text())["faults"]) for p in matrix}
    assert faulted and all(faulted.values()), f"{MATRIX}: no committed run with faults"
    # a clone: git tracks the committed runs; the user's run is untracked
    subprocess.run(["git", "init", "-q", str(results)], check=True)
    subprocess.run(
        ["git", "add", *(str(p.relative_to(COMMITTED) / layout.MANIFEST) for p in found)],
        cwd=results,
        check=True,
    )
    extra = write_tiny_run(results, omit=("workers/receiver-01/delivery.json",))
    summarize_run(extra.run_dir, window_s=2.0)
    brokers.add("nats")  # the tiny run's
    out = root / "site"
    result = write_site(results, out)
    assert result.runs == len(committed) + 1 and not result.warnings
    return Site(out, committed, extra.run_id, faulted, experiments, brokers)


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
    """From the durability matrix page to a run with faults: its Faults table is
    visible, a row per fault."""
    from selenium.webdriver.common.by import By

    _open(browser, site.out / "durability.html")
    _no_console_errors(browser, "durability.html")
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


# -- experiments, brokers, durability ------------------------------------------------
def _experiment_rows(driver: Any) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, "#experiments tbody tr"))


def _cells(row: Any) -> list[str]:
    from selenium.webdriver.common.by import By

    return [" ".join(c.text.split()) for c in row.find_elements(By.TAG_NAME, "td")]


def _plots_load(driver: Any, what: str) -> int:
    from selenium.webdriver.common.by import By

    images = driver.find_elements(By.CSS_SELECTOR, "img.plot")
    for img in images:
        _wait(driver).until(lambda d, i=img: d.execute_script(LOADED, i))
        width = driver.execute_script("return arguments[0].naturalWidth", img)
        assert width > 0, f"{what}: {img.get_attribute('src')} did not load"
    return len(images)


def test_the_index_lists_every_committed_experiment_the_users_first(
    browser: Any, site: Site
) -> None:
    _open(browser, site.out / "index.html")
    _no_console_errors(browser, "index.html")
    rows = [_cells(r) for r in _experiment_rows(browser)]
    # Experiment, Folder, Scenario family, Runs, Brokers, Published set, Yours
    shown = {(c[1], c[2]): int(c[3]) for c in rows if c[6] != "yes"}
    expected: dict[tuple[str, str], int] = {}
    for key in site.experiments.values():
        expected[key] = expected.get(key, 0) + 1
    assert shown == expected
    assert sum(shown.values()) == len(site.committed)
    first = rows[0]
    assert first[6] == "yes" and first[3] == "1" and first[2] == "tiny", first
    assert all(c[6] != "yes" for c in rows[1:])
    # the runs table: the user's run first, every committed run after it
    ids = [r.get_attribute("data-run") for r in _rows(browser)]
    assert ids[0] == site.extra and sorted(ids[1:]) == site.committed


def test_the_experiments_table_filters_and_sorts(browser: Any, site: Site) -> None:
    from selenium.webdriver.common.by import By

    _open(browser, site.out / "index.html")
    box = browser.find_element(By.CSS_SELECTOR, 'input[data-filter="experiments"]')
    box.send_keys("mqperf-2021")
    _wait(browser).until(
        lambda d: [_cells(r)[2] for r in _experiment_rows(d) if r.is_displayed()] == ["mqperf-2021"]
    )
    count = browser.find_element(By.CSS_SELECTOR, '[data-count-for="experiments"]').text
    assert count == f"1 of {len(_experiment_rows(browser))} shown"
    box.clear()
    box.send_keys(" ")
    heading = next(
        th
        for th in browser.find_elements(By.CSS_SELECTOR, "#experiments thead th")
        if th.text.strip().startswith("Runs")
    )
    heading.click()
    _wait(browser).until(lambda d: heading.get_attribute("aria-sort") == "ascending")
    counts = [int(_cells(r)[3]) for r in _experiment_rows(browser)]
    assert counts == sorted(counts) and len(set(counts)) > 1
    heading.click()
    _wait(browser).until(lambda d: heading.get_attribute("aria-sort") == "descending")
    counts = [int(_cells(r)[3]) for r in _experiment_rows(browser)]
    assert counts == sorted(counts, reverse=True)
    _no_console_errors(browser, "filtering and sorting the experiments")


def test_every_experiment_page_loads_with_its_runs_and_charts(browser: Any, site: Site) -> None:
    from selenium.webdriver.common.by import By

    _open(browser, site.out / "index.html")
    links = [
        (r.find_element(By.TAG_NAME, "a").get_attribute("href"), _cells(r))
        for r in _experiment_rows(browser)
    ]
    for href, cells in links:
        browser.get_log("browser")
        browser.get(href)
        _wait(browser).until(lambda d: d.execute_script("return document.readyState") == "complete")
        _no_console_errors(browser, href)
        ids = [r.get_attribute("data-run") for r in _rows(browser)]
        assert len(ids) == int(cells[3]), href
        plots = _plots_load(browser, href)
        if int(cells[3]) > 1:
            assert plots >= 2, f"{href}: no sweep chart"


def test_the_mqperf_2021_page_draws_its_charts_beside_the_published_rows(
    browser: Any, site: Site
) -> None:
    from selenium.webdriver.common.by import By

    page = site.out / "experiments" / "seeds-mqperf-2021-mqperf-2021.html"
    _open(browser, page)
    _no_console_errors(browser, page.name)
    mqperf = {k for k, v in site.experiments.items() if v[1] == "mqperf-2021"}
    brokers = {
        tomllib.loads((p / layout.SCENARIO).read_text())["broker"]
        for p in committed_runs("results/**")
        if p.name in mqperf
    }
    charts = browser.find_elements(By.CSS_SELECTOR, "img.chart")
    assert {c.get_attribute("src").rsplit("/", 1)[-1] for c in charts} == {
        f"mqperf-{b}.png" for b in brokers
    }
    assert _plots_load(browser, page.name) == len(brokers) + 2  # and the two sweep charts
    blocks = browser.find_element(By.ID, "published-blocks")
    captions = [c.text for c in blocks.find_elements(By.TAG_NAME, "caption")]
    assert sorted(c.split(" ", 1)[0] for c in captions) == sorted(mqperf)  # a block per run
    sources = [
        r.find_elements(By.TAG_NAME, "td")[0].text
        for r in blocks.find_elements(By.CSS_SELECTOR, "tbody tr")
    ]
    assert any(s.startswith("mqlab") for s in sources)
    assert any("mqperf" in s.lower() and not s.startswith("mqlab") for s in sources), sources
    assert "stand-in" in blocks.text.lower()  # the set-up notes and marks


def test_the_brokers_bench_and_omb_pages_have_their_tables(browser: Any, site: Site) -> None:
    from selenium.webdriver.common.by import By

    for name, headings, caption in (
        ("seeds-brokers-bench-brokers-bench.html", {"p99 ms", "p99.9 ms"}, "vs"),
        (
            "seeds-omb-paper-omb-paper-2023.html",
            {"events/s", "mqlab p99 ms"},
            "throughput-size-sweep",
        ),
    ):
        _open(browser, site.out / "experiments" / name)
        _no_console_errors(browser, name)
        blocks = browser.find_element(By.ID, "published-blocks")
        ths = {" ".join(t.text.split()) for t in blocks.find_elements(By.TAG_NAME, "th")}
        assert headings <= ths, (name, ths)
        captions = [c.text for c in blocks.find_elements(By.TAG_NAME, "caption")]
        assert any(caption in c for c in captions), captions
    omb = browser.find_element(By.ID, "published-blocks").text
    assert "latency-fixed-rate" in omb


def test_the_broker_overview_has_a_row_per_broker_and_sorts(browser: Any, site: Site) -> None:
    from selenium.webdriver.common.by import By

    _open(browser, site.out / "brokers.html")
    _no_console_errors(browser, "brokers.html")
    rows = browser.find_elements(By.CSS_SELECTOR, "#brokers tbody tr")
    assert {r.get_attribute("data-broker") for r in rows} == site.brokers
    assert sum(int(_cells(r)[1]) for r in rows) == len(site.committed) + 1
    heading = next(
        th
        for th in browser.find_elements(By.CSS_SELECTOR, "#brokers thead th")
        if th.text.strip().startswith("best send")
    )
    heading.click()
    _wait(browser).until(lambda d: heading.get_attribute("aria-sort") == "ascending")
    values = [
        float(v)
        for v in browser.execute_script(
            "return Array.from(document.querySelectorAll('#brokers tbody tr'))"
            ".map(r => r.cells[3].getAttribute('data-sort')).filter(v => v);"
        )
    ]
    assert values == sorted(values) and len(values) > 1
    for broker in {b for b in site.brokers}:
        assert browser.find_element(By.ID, f"broker-{broker}")
    faulted_brokers = browser.find_elements(By.CSS_SELECTOR, "table[id^='durability-'] tbody tr")
    assert sorted(r.get_attribute("data-run") for r in faulted_brokers) == sorted(site.faulted)
    _no_console_errors(browser, "sorting brokers.html")


def test_the_durability_page_lists_the_faulted_runs(browser: Any, site: Site) -> None:
    from selenium.webdriver.common.by import By

    _open(browser, site.out / "durability.html")
    _no_console_errors(browser, "durability.html")
    rows = browser.find_elements(By.CSS_SELECTOR, "#durability tbody tr")
    assert sorted(r.get_attribute("data-run") for r in rows) == sorted(site.faulted)
    nav = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "header nav a")]
    assert nav == ["Runs", "Brokers", "Durability", "Compare"]
