"""What ``make run`` prints (``sample_project/hint.py``): every ``curl`` it gives works as printed."""

from __future__ import annotations

import json
import re
import shlex
import socket
import sys

import pytest
from django.test import Client

from sample_project.hint import HINT, serve
from sample_project.payments.management.commands.ensure_demo_user import demo_token

pytestmark = [pytest.mark.faces, pytest.mark.django_db, pytest.mark.urls("sample_project.urls")]
BASE = "http://127.0.0.1:8000"


def _posts(text: str) -> list[tuple[str, dict[str, str], str]]:
    """Each ``curl -X POST`` of the hint: its path, headers and body."""
    posts = []
    for command in re.findall(r"curl -i -X POST .*?\n.*?\n", text.replace("\\\n", "\n")):
        words = shlex.split(command)
        url = words[words.index("POST") + 1]
        pairs = [h.partition(": ") for i, h in enumerate(words) if i and words[i - 1] == "-H"]
        headers = {name: value for name, _, value in pairs}
        posts.append((url.removeprefix(BASE), headers, words[words.index("-d") + 1]))
    return posts


def test_the_hint_shows_the_three_apis() -> None:
    paths = [path for path, _, _ in _posts(HINT.format(base=BASE, token="t"))]
    assert paths == ["/charges/", "/api/charges/", "/ninja/charges"]
    assert f"{BASE}/ninja/docs" in HINT.format(base=BASE, token="t")


@pytest.mark.parametrize("index", [0, 1, 2])
def test_every_curl_of_the_hint_executes_then_replays(index: int) -> None:
    path, headers, body = _posts(HINT.format(base=BASE, token=demo_token()))[index]
    content_type = headers.pop("Content-Type")
    client = Client(headers=headers)
    first = client.post(path, body, content_type=content_type)
    again = client.post(path, body, content_type=content_type)
    assert first.status_code == 201, first.content
    assert (again.status_code, again.content) == (201, first.content)
    assert again["Idempotent-Replayed"] == "true"
    assert json.loads(first.content)["amount"] == json.loads(body)["amount"]


def test_the_index_links_both_api_docs_pages(client: Client) -> None:
    page = client.get("/").content.decode()
    assert 'href="/api/docs/"' in page
    assert 'href="/ninja/docs"' in page


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# A stand-in server: says so once it listens, answers one connection (the hint's wait), exits.
_SERVER = """
import socket, sys
server = socket.socket()
server.bind(("127.0.0.1", int(sys.argv[1])))
server.listen()
print("listening", flush=True)
server.accept()[0].close()
"""


def test_make_run_prints_its_hint_once_the_server_listens(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """0.5 printed the curl lines before runserver started: the first one was refused."""
    port = free_port()
    assert serve(port, [sys.executable, "-c", _SERVER, str(port)], "THE HINT") == 0
    assert capfd.readouterr().out.split() == ["listening", "THE", "HINT"]


def test_make_run_prints_no_hint_when_the_server_never_listens(
    capfd: pytest.CaptureFixture[str],
) -> None:
    assert serve(free_port(), [sys.executable, "-c", "raise SystemExit(3)"], "THE HINT") == 3
    assert "THE HINT" not in capfd.readouterr().out
