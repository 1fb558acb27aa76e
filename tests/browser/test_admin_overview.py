"""The admin's overview in Chromium: reached from the entries list, its panels and its
server-drawn chart (inline SVG) on screen at 1280 px, no console error."""

from __future__ import annotations

from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By

from tests.browser.conftest import Sample
from tests.browser.test_demo_pages import (
    Screenshot,
    console_errors,
    log_in_as_demo,
    overflow,
    post_long_keys,
)

pytestmark = pytest.mark.browser


def test_the_overview_opens_from_the_entries_list(
    browser: webdriver.Chrome, sample: Sample, sample_database: str, screenshot: Screenshot
) -> None:
    post_long_keys(sample)
    log_in_as_demo(browser, sample, sample_database)
    browser.get_log("browser")
    browser.get(f"{sample.url}/admin/idempotency_django/idempotencyentry/")
    browser.find_element(By.ID, "idem-overview-link").click()
    assert browser.current_url.endswith("/admin/idempotency_django/idempotencyentry/overview/")
    screenshot("admin-overview-1280")
    window = browser.find_element(By.ID, "idem-window")
    assert "Completed" in window.text  # the two entries just posted
    bars: Any = browser.find_elements(By.CSS_SELECTOR, "#idem-chart svg g")
    assert len(bars) == 24
    svg: Any = browser.find_element(By.CSS_SELECTOR, "#idem-chart svg")
    assert svg.rect["width"] > 0
    assert svg.rect["height"] > 0
    for panel in ("idem-in-flight", "idem-outbox"):
        assert browser.find_element(By.ID, panel).is_displayed()
    assert browser.find_elements(By.ID, "idem-consumers") == []  # not in the sample
    assert overflow(browser) == 0
    assert console_errors(browser) == []
