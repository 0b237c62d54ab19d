"""The web playground at GET /: one self-contained page served by both frontends (the same
bytes, no key needed to load it, gone with --disable-playground), driven in a real headless
browser (Debian's chromium through chromedriver, with selenium): it loads with no console
error, a message gets a streamed reply that grows over time, Stop ends the stream, and with
--api-key the page asks for the key and then works. The screenshot is a test artifact
(docs/playground.png is a copy)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.launch import Server, start, stop

ARTIFACTS = Path(os.environ.get("HYBRIDLLM_TEST_ARTIFACTS", "/tmp/hybridllm-test-artifacts"))
PAGE = Path(__file__).parents[2] / "python/hybridllm/entrypoints/openai/playground.html"
KEY = "sk-playground"


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--window-size=1280,800"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = webdriver.ChromeService(shutil.which("chromedriver") or "/usr/bin/chromedriver")
    driver = webdriver.Chrome(options=opts, service=service)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def server(model_path: Path, tmp_path_factory) -> Iterator[Server]:
    srv = start("rust", tmp_path_factory.mktemp("playground"), "--max-model-len", "512")
    yield srv
    assert stop(srv) == 0


# Records the last reply's length at every change of the page, in the page itself: what the
# reader saw on the way, however slow the machine (polling from here can miss the stream).
WATCH_REPLY = """
window.replyLengths = [];
new MutationObserver(() => {
  const r = document.querySelectorAll('.msg.assistant');
  if (r.length) window.replyLengths.push(r[r.length - 1].textContent.length);
}).observe(document.body, {subtree: true, childList: true, characterData: true});
"""
LAST_REPLY_LENGTH = """
const r = document.querySelectorAll('.msg.assistant');
return r[r.length - 1].textContent.length;
"""


def _send(driver: webdriver.Chrome, text: str) -> None:
    box = driver.find_element(By.ID, "input")
    box.send_keys(text)
    driver.find_element(By.ID, "send").click()


def test_chat_streams_and_stops_in_a_browser(browser: webdriver.Chrome, server: Server) -> None:
    d = browser
    d.get(server.url + "/")
    wait = WebDriverWait(d, 30)
    wait.until(lambda d: d.find_element(By.ID, "model").text == "SmolLM2-135M-Instruct")
    d.find_element(By.ID, "system").send_keys("You are a helpful assistant.")
    d.execute_script("document.getElementById('max_tokens').value = '48';"
                     "document.getElementById('temperature').value = '0';")
    d.execute_script(WATCH_REPLY)
    _send(d, "What is the capital of France?")
    wait.until(lambda d: not d.find_element(By.ID, "send").get_attribute("disabled"))
    final = d.find_elements(By.CSS_SELECTOR, ".msg.assistant")[-1].text
    assert final and "Paris" in final, final
    # Streamed: the reply was seen at several lengths on its way, not all at once.
    lengths, full = d.execute_script("return window.replyLengths"), d.execute_script(
        LAST_REPLY_LENGTH)
    assert len({n for n in lengths if 0 < n < full}) >= 2, (lengths, full)
    d.execute_script("document.getElementById('max_tokens').value = '400';"
                     "document.getElementById('temperature').value = '0.8';")
    _send(d, "Write a long story about a lighthouse keeper.")
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant")[-1].text) > 20)
    d.find_element(By.ID, "stop").click()
    wait.until(lambda d: not d.find_element(By.ID, "send").get_attribute("disabled"))
    stopped = len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant")[-1].text)
    time.sleep(1.0)
    assert len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant")[-1].text) == stopped
    assert d.find_element(By.ID, "stop").get_attribute("disabled")
    time.sleep(2.5)  # one /metrics poll after the chat: the live panel shows numbers
    assert d.find_element(By.ID, "running").text.isdigit()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    d.save_screenshot(str(ARTIFACTS / "playground.png"))
    errors = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors


def test_page_asks_for_the_key(browser: webdriver.Chrome, model_path: Path,
                               tmp_path: Path) -> None:
    srv = start("rust", tmp_path, "--max-model-len", "512", "--api-key", KEY, "--mock-engine",
                "--mock-step-ms", "5")
    try:
        assert httpx.get(srv.url + "/").status_code == 200  # the page needs no key
        assert httpx.get(srv.url + "/v1/models").status_code == 401
        d = browser
        d.get(srv.url + "/")
        wait = WebDriverWait(d, 30)
        wait.until(lambda d: d.find_element(By.ID, "keybox").is_displayed())
        d.find_element(By.ID, "key").send_keys(KEY)
        d.find_element(By.ID, "keyok").click()
        wait.until(lambda d: d.find_element(By.ID, "model").text == "SmolLM2-135M-Instruct")
        assert not d.find_element(By.ID, "keybox").is_displayed()
        d.execute_script("document.getElementById('max_tokens').value = '8';")
        _send(d, "Hello")
        wait.until(lambda d: not d.find_element(By.ID, "send").get_attribute("disabled"))
        assert d.find_elements(By.CSS_SELECTOR, ".msg.assistant")[-1].text
        assert not d.find_elements(By.CSS_SELECTOR, ".msg.error")
    finally:
        assert stop(srv) == 0


@pytest.mark.parametrize("python", [False, True], ids=["rust", "python"])
def test_both_frontends_serve_the_page(model_path: Path, tmp_path: Path, python: bool) -> None:
    kind = "python" if python else "rust"
    on = start(kind, tmp_path, "--mock-engine", "--max-model-len", "512")
    off = start(kind, tmp_path, "--mock-engine", "--max-model-len", "512",
                "--disable-playground")
    try:
        page = httpx.get(on.url + "/")
        assert page.status_code == 200 and page.content == PAGE.read_bytes()
        assert page.headers["content-type"] == "text/html; charset=utf-8"
        assert httpx.get(off.url + "/").status_code == 404
    finally:
        assert stop(on) == 0 and stop(off) == 0
