"""The demo at 1280 px: every page without a console error, the admin's columns on screen,
and a refused retry (422) saying why. Screenshots land in ``build/screenshots``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.browser.conftest import ROOT, Sample, _environment
from tests.browser.test_checkout import open_checkout, settle

pytestmark = pytest.mark.browser
Screenshot = Callable[[str], Path]
PAY = "/checkout/pay/"
# The demo's own refusals (409, 422, 503) are answers it shows in its log; Chrome also
# reports each as a failed resource load. Anything else is a defect.
EXPECTED = "/checkout/pay/ - Failed to load resource"


def console_errors(browser: webdriver.Chrome) -> list[str]:
    """The console's errors since the last call (page errors, failed loads), bar the expected."""
    time.sleep(0.5)  # the favicon is fetched after the load event
    found = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    return [message for message in found if EXPECTED not in message]


def lines(browser: webdriver.Chrome, element: Any) -> int:
    """How many lines the element's text takes (1: it doesn't wrap)."""
    script = "const r = document.createRange(); r.selectNodeContents(arguments[0]); "
    script += "return new Set([...r.getClientRects()].map((box) => box.top)).size;"
    return int(browser.execute_script(script, element))


def viewport_width(browser: webdriver.Chrome) -> int:
    return int(browser.execute_script("return document.documentElement.clientWidth"))


def overflow(browser: webdriver.Chrome) -> int:
    """How many pixels the page is wider than the window (0: no sideways scrolling)."""
    script = "const d = document.documentElement; return d.scrollWidth - d.clientWidth;"
    return int(browser.execute_script(script))


@pytest.mark.parametrize(
    ("page", "name"),
    [
        ("/", "index"),
        ("/checkout/", "checkout"),
        ("/checkout/form/", "form"),
        ("/api/docs/", "swagger-ui"),
        ("/ninja/docs", "ninja-swagger-ui"),
        ("/admin/login/", "admin-login"),
    ],
)
def test_every_page_loads_without_a_console_error(
    browser: webdriver.Chrome, sample: Sample, screenshot: Screenshot, page: str, name: str
) -> None:
    browser.get_log("browser")  # what earlier tests left
    browser.get(f"{sample.url}{page}")
    WebDriverWait(browser, 15).until(
        lambda b: b.execute_script("return document.readyState") == "complete"
    )
    assert viewport_width(browser) >= 1264  # 1280 less a scroll bar at most
    assert overflow(browser) == 0
    assert console_errors(browser) == []
    screenshot(f"{name}-1280")


def test_a_refused_retry_says_why(
    browser: webdriver.Chrome, sample: Sample, screenshot: Screenshot
) -> None:
    open_checkout(browser, sample)
    browser.get_log("browser")
    browser.find_element(By.ID, "pay").click()
    settle(browser)
    browser.find_element(By.ID, "fail").click()  # the same intent, another request
    browser.find_element(By.ID, "pay").click()
    settle(browser)
    row = browser.find_element(By.CSS_SELECTOR, "#log tbody tr:first-child")
    WebDriverWait(browser, 10).until(lambda b: row.get_attribute("data-why"))
    assert row.get_attribute("data-status") == "422"
    why = row.find_element(By.CSS_SELECTOR, "td.why").text
    assert "already used with a different request" in why
    assert "New intent" in why
    screenshot("checkout-422-1280")
    assert lines(browser, row.find_element(By.CSS_SELECTOR, "td.key")) == 1
    assert overflow(browser) == 0
    assert console_errors(browser) == []
    assert browser.find_element(By.ID, "charges").text == "1"
    screenshot("checkout-422-1280")


def post_long_keys(sample: Sample) -> None:
    for key in ("k-" + "0123456789abcdef" * 12, "order-2026-11-24-short"):
        request = urllib.request.Request(
            f"{sample.url}/charges/",
            data=json.dumps({"amount": 1000, "currency": "eur"}).encode(),
            headers={"Idempotency-Key": key, "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request) as answer:
            assert answer.status == 201


def log_in_as_demo(browser: webdriver.Chrome, sample: Sample, sample_database: str) -> None:
    manage = [sys.executable, str(ROOT / "manage.py"), "ensure_demo_user"]
    subprocess.run(
        manage, env=_environment(sample_database), cwd=ROOT, check=True, capture_output=True
    )
    # Logged out first: another test of the session's one browser may have logged in.
    browser.get(f"{sample.url}/admin/login/")
    browser.delete_all_cookies()
    browser.get(f"{sample.url}/admin/login/")
    browser.find_element(By.ID, "id_username").send_keys("demo")
    browser.find_element(By.ID, "id_password").send_keys("demo")
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    WebDriverWait(browser, 10).until(lambda b: "/admin/login/" not in b.current_url)


def test_the_admins_columns_stay_on_a_1280_px_screen(
    browser: webdriver.Chrome, sample: Sample, sample_database: str, screenshot: Screenshot
) -> None:
    post_long_keys(sample)
    log_in_as_demo(browser, sample, sample_database)
    browser.get_log("browser")
    browser.get(f"{sample.url}/admin/idempotency_django/idempotencyentry/")
    screenshot("admin-entries-1280")
    # The results scroll sideways inside their box when they don't fit it.
    box: Any = browser.find_element(By.CSS_SELECTOR, "#changelist .results")
    visible = min(box.rect["x"] + box.rect["width"], viewport_width(browser))
    for column in ("readable_key", "status", "answer", "tenant_shown", "expires", "expired"):
        header: Any = browser.find_element(By.CSS_SELECTOR, f"th.column-{column}")
        right = header.rect["x"] + header.rect["width"]
        assert right <= visible + 1, f"the {column} column ends at {right} px, past {visible}"
    assert console_errors(browser) == []
    screenshot("admin-entries-1280")
