"""The sample's order form and admin in headless Chromium: the back button and the admin's
"Save" pressed twice each leave one order, and the person sees a page that says so. Each
story docs/forms.rst tells is played here as the browser plays it.

(The double-click on the order form is ``test_checkout.test_the_form_submitted_twice_pays_once``.)
"""

from __future__ import annotations

import json
import secrets

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.browser.conftest import Sample
from tests.browser.test_checkout import Screenshot, form_posts, server_charges
from tests.browser.test_demo_pages import log_in_as_demo

# The sample runs on the pass's database ("lock" on PostgreSQL): each pass proves it.
pytestmark = [pytest.mark.browser, pytest.mark.every_database]


def pay_by_form(browser: webdriver.Chrome, sample: Sample) -> str:
    """Open the order form, pay, land on the receipt; the order's id."""
    browser.get(f"{sample.url}/checkout/form/")
    order = browser.find_element(By.ID, "order").text
    browser.find_element(By.ID, "submit").click()
    WebDriverWait(browser, 15).until(lambda b: "/checkout/receipts/" in b.current_url)
    return order


def test_the_back_button_and_the_same_form_sent_again_shows_the_same_receipt(
    browser: webdriver.Chrome, sample: Sample, screenshot: Screenshot
) -> None:
    order = pay_by_form(browser, sample)
    receipt = browser.current_url
    browser.back()  # the form, as it was: the same key
    WebDriverWait(browser, 10).until(lambda b: "/checkout/form/" in b.current_url)
    browser.find_element(By.ID, "submit").click()
    WebDriverWait(browser, 15).until(lambda b: "/checkout/receipts/" in b.current_url)
    assert browser.current_url == receipt
    assert int(browser.find_element(By.ID, "charges").text) == server_charges(sample, order) == 1
    screenshot("form-back-same")


def test_the_back_button_and_an_edited_form_shows_a_page_that_says_what_happened(
    browser: webdriver.Chrome, sample: Sample, screenshot: Screenshot
) -> None:
    order = pay_by_form(browser, sample)
    browser.back()
    WebDriverWait(browser, 10).until(lambda b: "/checkout/form/" in b.current_url)
    amount = browser.find_element(By.NAME, "amount")
    amount.clear()
    amount.send_keys("2500")
    browser.find_element(By.ID, "submit").click()
    WebDriverWait(browser, 15).until(
        lambda b: b.find_elements(By.CSS_SELECTOR, "[data-idempotency-refusal]")
    )
    page = browser.find_element(By.TAG_NAME, "main")
    assert page.get_attribute("data-idempotency-refusal") == "key-reused"
    assert "This form was already sent" in page.text
    assert server_charges(sample, order) == 1
    browser.find_element(By.ID, "fresh-form").click()  # what the person can do next
    WebDriverWait(browser, 10).until(lambda b: b.find_elements(By.ID, "order"))
    assert browser.find_element(By.ID, "order").text != order
    screenshot("form-back-edited")


def test_a_never_cached_form_page_after_back_sent_again_shows_the_same_receipt(
    browser: webdriver.Chrome, sample: Sample, screenshot: Screenshot
) -> None:
    """The tag's page sent never-cached: Back fetches it again, rendered with a new key, and
    the script puts the first key back (the order is the page's address, not drawn anew)."""
    order = secrets.token_hex(6)
    page = f"/checkout/form/?order={order}&cache=never"
    browser.get(f"{sample.url}{page}")
    browser.find_element(By.ID, "submit").click()
    WebDriverWait(browser, 15).until(lambda b: "/checkout/receipts/" in b.current_url)
    receipt = browser.current_url
    # A cookie changed meanwhile (as the admin's message after a save): Chromium then
    # fetches a never-cached page again on Back instead of restoring it from its cache.
    browser.execute_script("document.cookie = 'seen_receipt=1; path=/';")
    browser.back()
    WebDriverWait(browser, 10).until(lambda b: b.find_elements(By.ID, "submit"))
    fetched = f'"GET {page} HTTP/1.1"'
    WebDriverWait(browser, 10).until(lambda _: sample.log.read_text().count(fetched) == 2)
    browser.find_element(By.ID, "submit").click()
    WebDriverWait(browser, 15).until(lambda b: "/checkout/receipts/" in b.current_url)
    assert browser.current_url == receipt
    assert server_charges(sample, order) == 1
    screenshot("form-never-cached-back-same")


def test_the_admins_add_form_saved_twice_adds_one_row(
    browser: webdriver.Chrome, sample: Sample, sample_database: str, screenshot: Screenshot
) -> None:
    log_in_as_demo(browser, sample, sample_database)
    order = secrets.token_hex(6)
    browser.get(f"{sample.url}/admin/payments/charge/add/")
    browser.find_element(By.NAME, "amount").send_keys("700")
    browser.find_element(By.NAME, "description").send_keys(f"checkout {order}")
    # Two clicks 300 ms apart, from the page itself (the driver would wait in between).
    browser.execute_script(
        "const b = arguments[0]; b.click(); setTimeout(() => b.click(), 300);",
        browser.find_element(By.NAME, "_save"),
    )
    WebDriverWait(browser, 15).until(lambda b: b.current_url.endswith("/admin/payments/charge/"))
    assert server_charges(sample, order) == 1
    screenshot("admin-saved-twice")


def add_charge_in_the_admin(browser: webdriver.Chrome, sample: Sample, order: str) -> None:
    """Open the admin's add page, fill it, Save, land on the changelist."""
    browser.get(f"{sample.url}/admin/payments/charge/add/")
    fill_charge(browser, "700", order)
    browser.find_element(By.NAME, "_save").click()
    WebDriverWait(browser, 15).until(lambda b: b.current_url.endswith("/admin/payments/charge/"))


def fill_charge(browser: webdriver.Chrome, amount: str, order: str) -> None:
    for name, value in (("amount", amount), ("description", f"checkout {order}")):
        field = browser.find_element(By.NAME, name)
        field.clear()
        field.send_keys(value)


def back_to_the_add_page(browser: webdriver.Chrome) -> None:
    """Back: the admin's pages are never cached, so Chromium fetches the page again."""
    browser.back()
    WebDriverWait(browser, 10).until(
        lambda b: b.current_url.endswith("/add/") and b.find_elements(By.NAME, "_save")
    )


def test_the_admins_add_page_after_back_saved_again_adds_no_second_row(
    browser: webdriver.Chrome, sample: Sample, sample_database: str, screenshot: Screenshot
) -> None:
    """0.5: Back refetched the never-cached page, which rendered a new key: a second row."""
    log_in_as_demo(browser, sample, sample_database)
    order = secrets.token_hex(6)
    add_charge_in_the_admin(browser, sample, order)
    back_to_the_add_page(browser)
    fill_charge(browser, "700", order)  # the same form, as it was sent
    browser.find_element(By.NAME, "_save").click()
    WebDriverWait(browser, 15).until(lambda b: b.current_url.endswith("/admin/payments/charge/"))
    assert server_charges(sample, order) == 1
    screenshot("admin-back-same")


def test_the_admins_add_page_after_back_edited_shows_a_page_that_says_what_happened(
    browser: webdriver.Chrome, sample: Sample, sample_database: str, screenshot: Screenshot
) -> None:
    log_in_as_demo(browser, sample, sample_database)
    order = secrets.token_hex(6)
    add_charge_in_the_admin(browser, sample, order)
    back_to_the_add_page(browser)
    fill_charge(browser, "2500", order)
    browser.find_element(By.NAME, "_save").click()
    WebDriverWait(browser, 15).until(
        lambda b: b.find_elements(By.CSS_SELECTOR, "[data-idempotency-refusal]")
    )
    page = browser.find_element(By.TAG_NAME, "main")
    assert page.get_attribute("data-idempotency-refusal") == "key-reused"
    assert server_charges(sample, order) == 1
    browser.find_element(By.ID, "fresh-form").click()  # a new add page, with a new key
    WebDriverWait(browser, 10).until(lambda b: b.find_elements(By.NAME, "_save"))
    fill_charge(browser, "2500", order)
    browser.find_element(By.NAME, "_save").click()
    WebDriverWait(browser, 15).until(lambda b: b.current_url.endswith("/admin/payments/charge/"))
    assert server_charges(sample, order) == 2
    screenshot("admin-back-edited")


def test_reload_after_the_redirect_fetches_its_page_and_sends_nothing(
    browser: webdriver.Chrome, sample: Sample
) -> None:
    order = pay_by_form(browser, sample)
    browser.get_log("performance")  # drop what earlier pages logged
    browser.refresh()
    WebDriverWait(browser, 10).until(lambda b: b.find_elements(By.ID, "charges"))
    assert form_posts(browser)[0] == 0
    assert server_charges(sample, order) == 1


def test_reload_of_a_posts_own_answer_sends_it_again_and_gets_the_stored_answer(
    browser: webdriver.Chrome, sample: Sample
) -> None:
    """The post's own answer on screen (here the form's 400 page): reload sends the POST
    again, with its key, and Chromium asks nothing first (headless, as with a person's F5
    after confirming)."""
    browser.get(f"{sample.url}/checkout/form/")
    amount = browser.find_element(By.NAME, "amount")
    amount.clear()
    amount.send_keys("0")
    browser.find_element(By.ID, "submit").click()
    WebDriverWait(browser, 10).until(lambda b: b.find_elements(By.ID, "error"))
    browser.get_log("performance")
    browser.refresh()
    WebDriverWait(browser, 10).until(lambda b: b.find_elements(By.ID, "error"))
    assert form_answers(browser) == [(400, "true")]


def form_answers(browser: webdriver.Chrome) -> list[tuple[int, str]]:
    """The status and ``Idempotent-Replayed`` of each answer to a POST of the form page."""
    posted, answers = set(), []
    for entry in browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        params = message["params"]
        if message["method"] == "Network.requestWillBeSent":
            if params["request"]["method"] == "POST":
                posted.add(params["requestId"])
        elif message["method"] == "Network.responseReceived" and params["requestId"] in posted:
            response = params["response"]
            replayed = response["headers"].get("Idempotent-Replayed", "")
            answers.append((response["status"], replayed))
    return answers
