"""The checkout page in headless Chromium: a double click, a slow network, a new intent, a form."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.browser.conftest import Sample

# The sample runs on the pass's database ("lock" on PostgreSQL): each pass proves it.
pytestmark = [pytest.mark.browser, pytest.mark.every_database]

Screenshot = Callable[[str], Path]


def open_checkout(browser: webdriver.Chrome, sample: Sample) -> str:
    browser.get(f"{sample.url}/checkout/")
    WebDriverWait(browser, 10).until(lambda b: root(b).get_attribute("data-ready") == "1")
    return str(root(browser).get_attribute("data-order"))


def root(browser: webdriver.Chrome) -> Any:
    return browser.find_element(By.ID, "checkout")


def settle(browser: webdriver.Chrome, timeout: float = 30) -> list[dict[str, str]]:
    """Wait for every payment on the page to finish; the log's rows, oldest first."""
    WebDriverWait(browser, timeout).until(lambda b: root(b).get_attribute("data-pending") == "0")
    rows = browser.find_elements(By.CSS_SELECTOR, "#log tbody tr")
    fields = ("call", "key", "attempt", "status", "replayed", "error")
    return [{f: str(row.get_attribute(f"data-{f}")) for f in fields} for row in reversed(rows)]


def server_charges(sample: Sample, order: str) -> int:
    with urllib.request.urlopen(f"{sample.url}/checkout/orders/{order}/") as answer:
        return int(json.load(answer)["charges"])


def page_charges(browser: webdriver.Chrome) -> int:
    return int(browser.find_element(By.ID, "charges").text)


def test_double_click_pays_once(
    browser: webdriver.Chrome, sample: Sample, screenshot: Screenshot
) -> None:
    order = open_checkout(browser, sample)
    ActionChains(browser).double_click(browser.find_element(By.ID, "pay")).perform()
    rows = settle(browser)
    finals = [row for row in rows if row["status"] == "201"]
    assert len(finals) == 2, rows  # both clicks were answered ...
    assert [row["replayed"] for row in rows].count("true") == 1, rows  # ... one of them by a replay
    assert len({row["key"] for row in rows}) == 1
    assert {row["call"] for row in finals} == {"1", "2"}
    assert page_charges(browser) == server_charges(sample, order) == 1
    screenshot("checkout-double-click")


def test_slow_network_retries_with_the_same_key(
    browser: webdriver.Chrome, sample: Sample, screenshot: Screenshot
) -> None:
    order = open_checkout(browser, sample)
    browser.find_element(By.ID, "slow").click()
    browser.find_element(By.ID, "pay").click()
    rows = settle(browser)
    assert rows[0]["error"] == "TimeoutError", rows  # the client gave up on the first ...
    assert rows[1]["status"] == "409", rows  # ... while the server was still working
    assert rows[-1]["status"] == "201", rows
    assert rows[-1]["replayed"] == "true", rows  # the first execution's answer, replayed
    assert len({row["key"] for row in rows}) == 1
    retry_after = browser.find_elements(By.CSS_SELECTOR, "#log tbody tr.busy td:nth-child(7)")
    assert retry_after, "no 409 row"
    assert all(cell.text.isdigit() for cell in retry_after)
    assert page_charges(browser) == server_charges(sample, order) == 1
    screenshot("checkout-slow-network")
    # At 1280 px the log (a timeout's message, three lines of "why") stays inside the
    # page's column: it stuck out of it on the right, past the panels above.
    script = "const t = document.getElementById('log').getBoundingClientRect(); "
    script += "const m = document.getElementById('checkout').getBoundingClientRect(); "
    script += "return Math.round(t.right - m.right);"
    assert browser.execute_script(script) <= 0


def test_a_new_intent_is_a_second_charge(
    browser: webdriver.Chrome, sample: Sample, screenshot: Screenshot
) -> None:
    order = open_checkout(browser, sample)
    browser.find_element(By.ID, "pay").click()
    settle(browser)
    browser.find_element(By.ID, "new-intent").click()
    browser.find_element(By.ID, "pay").click()
    rows = settle(browser)
    assert [row["status"] for row in rows] == ["201", "201"]
    assert len({row["key"] for row in rows}) == 2
    assert "true" not in [row["replayed"] for row in rows]
    assert page_charges(browser) == 1  # this intent's
    order_charges = int(browser.find_element(By.ID, "order-charges").text)
    assert order_charges == server_charges(sample, order) == 2
    screenshot("checkout-new-intent")


def test_the_form_submitted_twice_pays_once(
    browser: webdriver.Chrome, sample: Sample, screenshot: Screenshot
) -> None:
    browser.get(f"{sample.url}/checkout/form/?delay=1")  # slow: the first is still running
    order = browser.find_element(By.ID, "order").text
    screenshot("form")
    browser.get_log("performance")  # drop what earlier pages logged
    # Two clicks 300 ms apart, from the page itself: the driver would wait for the first
    # navigation to end before clicking again.
    browser.execute_script(
        "const b = arguments[0]; b.click(); setTimeout(() => b.click(), 300);",
        browser.find_element(By.ID, "submit"),
    )
    WebDriverWait(browser, 15).until(lambda b: "/checkout/receipts/" in b.current_url)
    posts, redirects = form_posts(browser)
    assert posts == 2  # the browser really sent it twice ...
    assert redirects == [{"Idempotent-Replayed": "true"}]  # ... and shows the second, a replay
    assert browser.find_element(By.ID, "order").text == order
    assert int(browser.find_element(By.ID, "charges").text) == server_charges(sample, order) == 1
    screenshot("form-receipt")


def form_posts(browser: webdriver.Chrome) -> tuple[int, list[dict[str, str]]]:
    """POSTs of the form the browser sent, and the redirects it followed (from Chrome's log)."""
    posts, redirects = 0, []
    for entry in browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] != "Network.requestWillBeSent":
            continue
        params = message["params"]
        posts += params["request"]["method"] == "POST"
        if "redirectResponse" in params:
            headers = params["redirectResponse"]["headers"]
            redirects.append({"Idempotent-Replayed": headers.get("Idempotent-Replayed", "")})
    return posts, redirects


@pytest.mark.parametrize(("page", "name"), [("docs", "swagger-ui"), ("redoc", "redoc")])
def test_the_api_docs_work_offline(
    browser: webdriver.Chrome, sample: Sample, screenshot: Screenshot, page: str, name: str
) -> None:
    browser.get(f"{sample.url}/api/{page}/")
    WebDriverWait(browser, 15).until(
        lambda b: "Sample payments API" in b.find_element(By.TAG_NAME, "body").text
    )
    sources = [
        s.get_attribute("src") for s in browser.find_elements(By.CSS_SELECTOR, "script[src]")
    ]
    assert sources
    assert all(str(src).startswith(f"{sample.url}/static/") for src in sources), sources
    screenshot(name)
