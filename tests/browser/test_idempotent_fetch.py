"""``idempotentFetch`` in Chromium against the sample's real pay endpoint, faults injected there."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from selenium import webdriver

from tests.browser.conftest import Sample
from tests.browser.test_checkout import open_checkout, server_charges

pytestmark = pytest.mark.browser

UUID7 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")

# Runs in the page: imports the module as users do, calls it, reports every attempt.
CALL = """
const done = arguments[arguments.length - 1];
const [moduleUrl, url, options] = arguments;
const attempts = [];
const csrf = document.getElementById("checkout").dataset.csrf;
const onAttempt = ({ attempt, key, response, error, delay }) => attempts.push({
  attempt, key, delay, status: response ? response.status : null, error: error ? error.name : null,
});
const controller = new AbortController();
if (options.abortAfter) setTimeout(() => controller.abort(), options.abortAfter);
import(moduleUrl).then(async ({ idempotentFetch }) => {
  try {
    const response = await idempotentFetch(url, {
      ...options, headers: { "X-CSRFToken": csrf }, onAttempt, signal: controller.signal,
    });
    done({ status: response.status, replayed: response.headers.get("Idempotent-Replayed"),
           body: await response.text(), attempts });
  } catch (error) {
    done({ thrown: error.name, attempts });
  }
});
"""


@pytest.fixture
def order(browser: webdriver.Chrome, sample: Sample) -> str:
    browser.set_script_timeout(30)
    return open_checkout(browser, sample)


def call(browser: webdriver.Chrome, sample: Sample, url: str = "", **options: Any) -> Any:
    module = f"{sample.url}/static/idempotency_django/idempotent-fetch.js"
    return browser.execute_async_script(CALL, module, url or f"{sample.url}/checkout/pay/", options)


def payment(order: str, **fields: Any) -> dict[str, Any]:
    return {"order": order, "amount": 1999, **fields}


def test_a_first_503_is_retried_with_the_same_key_after_retry_after(
    browser: webdriver.Chrome, sample: Sample, order: str
) -> None:
    result = call(browser, sample, json=payment(order, fail=1))
    assert result["status"] == 201
    assert [a["status"] for a in result["attempts"]] == [503, 201]
    assert len({a["key"] for a in result["attempts"]}) == 1
    assert result["attempts"][0]["delay"] >= 1000  # Retry-After: 1
    assert server_charges(sample, order) == 1


# Not 408: Chrome's network stack resends after a 408 itself, before fetch() sees it.
@pytest.mark.parametrize("status", [500, 502, 504, 425, 429])
def test_transient_answers_are_retried(
    browser: webdriver.Chrome, sample: Sample, order: str, status: int
) -> None:
    result = call(browser, sample, json=payment(order, fail=2, fail_status=status), baseDelay=50)
    assert [a["status"] for a in result["attempts"]] == [status, status, 201]
    assert server_charges(sample, order) == 1


def test_a_final_4xx_is_not_retried_and_is_replayed(
    browser: webdriver.Chrome, sample: Sample, order: str
) -> None:
    first = call(
        browser, sample, json=payment(order, amount=0), idempotencyKey="final-4xx-" + order
    )
    again = call(
        browser, sample, json=payment(order, amount=0), idempotencyKey="final-4xx-" + order
    )
    assert [a["status"] for a in first["attempts"]] == [400]
    assert first["attempts"][0]["delay"] is None
    assert (again["status"], again["replayed"], again["body"]) == (400, "true", first["body"])


def test_a_reused_key_is_not_retried(browser: webdriver.Chrome, sample: Sample, order: str) -> None:
    key = "reused-" + order
    assert call(browser, sample, json=payment(order), idempotencyKey=key)["status"] == 201
    result = call(browser, sample, json=payment(order, amount=5), idempotencyKey=key)
    assert [a["status"] for a in result["attempts"]] == [422]
    assert server_charges(sample, order) == 1


def test_attempts_are_bounded(browser: webdriver.Chrome, sample: Sample, order: str) -> None:
    payload = payment(order, fail=3, fail_status=502)
    result = call(browser, sample, json=payload, maxAttempts=2, baseDelay=10)
    assert result["status"] == 502  # the last answer, returned
    assert [a["delay"] is None for a in result["attempts"]] == [False, True]
    assert server_charges(sample, order) == 0


def test_total_time_is_bounded(browser: webdriver.Chrome, sample: Sample, order: str) -> None:
    # The server asks for 1 s; the caller allows 0.5 s in all: no waiting, the 503 is returned.
    result = call(browser, sample, json=payment(order, fail=1), maxElapsed=500)
    assert result["status"] == 503
    assert len(result["attempts"]) == 1


def test_total_time_bounds_a_running_attempt_and_the_key_still_recovers(
    browser: webdriver.Chrome, sample: Sample, order: str
) -> None:
    key, slow = "budget-" + order, payment(order, delay=1)
    result = call(browser, sample, json=slow, idempotencyKey=key, maxElapsed=300)
    assert result["thrown"] == "TimeoutError"
    assert [a["error"] for a in result["attempts"]] == ["TimeoutError"]
    later = call(browser, sample, json=slow, idempotencyKey=key, baseDelay=50)
    assert (later["status"], later["replayed"]) == (201, "true")  # the first execution's answer
    assert [a["status"] for a in later["attempts"]][-1] == 201
    assert server_charges(sample, order) == 1


def test_network_errors_are_retried_then_thrown(
    browser: webdriver.Chrome, sample: Sample, order: str
) -> None:
    from tests.browser.conftest import free_port

    url = f"http://127.0.0.1:{free_port()}/nothing-listens/"
    result = call(browser, sample, url, json={}, maxAttempts=3, baseDelay=10)
    assert result["thrown"] == "TypeError"
    assert [a["error"] for a in result["attempts"]] == ["TypeError"] * 3
    assert len({a["key"] for a in result["attempts"]}) == 1


def test_the_callers_abort_is_final(browser: webdriver.Chrome, sample: Sample, order: str) -> None:
    result = call(browser, sample, json=payment(order, delay=2), abortAfter=200)
    assert result["thrown"] == "AbortError"
    assert result["attempts"] == []


def test_each_call_has_its_own_uuidv7_key(
    browser: webdriver.Chrome, sample: Sample, order: str
) -> None:
    keys = [call(browser, sample, json=payment(order))["attempts"][0]["key"] for _ in range(2)]
    assert keys[0] != keys[1]
    for key in keys:
        assert UUID7.fullmatch(key), key
        milliseconds = int(key.replace("-", "")[:12], 16)
        assert abs(milliseconds / 1000 - time.time()) < 60
    assert server_charges(sample, order) == 2


# The module's pure parts, where a real server can't reach (Chrome resends 408 itself).
DECIDE = """
const done = arguments[arguments.length - 1];
import(arguments[0]).then((m) => {
  const headers = (value) => ({ headers: new Headers(value === null ? {} : { "Retry-After": value }) });
  const now = Date.parse("2026-01-01T00:00:00Z");
  done({
    retryable: [200, 201, 400, 401, 403, 404, 408, 409, 410, 422, 425, 429, 500, 503].filter(m.isRetryable),
    seconds: m.retryAfterMs(headers("3")),
    date: m.retryAfterMs(headers("Thu, 01 Jan 2026 00:00:02 GMT"), now),
    past: m.retryAfterMs(headers("Wed, 31 Dec 2025 00:00:00 GMT"), now),
    junk: m.retryAfterMs(headers("soon")),
    none: m.retryAfterMs(headers(null)),
    backoff: [1, 2, 3, 10].map((n) => m.backoffMs(n, { baseDelay: 100, maxDelay: 1000, random: () => 0.999999 })),
    key: m.uuidv7(0x0123456789ab),
  });
});
"""


def test_the_retry_rules(browser: webdriver.Chrome, sample: Sample, order: str) -> None:
    module = f"{sample.url}/static/idempotency_django/idempotent-fetch.js"
    rules = browser.execute_async_script(DECIDE, module)
    assert rules["retryable"] == [408, 409, 425, 429, 500, 503]
    assert (rules["seconds"], rules["date"], rules["past"]) == (3000, 2000, 0)
    assert (rules["junk"], rules["none"]) == (None, None)
    assert rules["backoff"] == [99, 199, 399, 999]  # full jitter under a capped doubling ceiling
    assert rules["key"].startswith("01234567-89ab-7")
