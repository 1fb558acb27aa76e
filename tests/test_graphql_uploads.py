"""An upload's content is part of a GraphQL call (issue 53, item 9: ``r202``).

A mutation taking a file (the GraphQL multipart request spec: Strawberry's ``Upload``, and
Graphene's as graphene-file-upload defines it) is "the same call" only for the same file: its
name, content type and content, hashed in chunks as a form's file is. Another file of the same
name, type and size under the same key was answered the first file's result.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client, override_settings

from tests.helpers import charges, new_key

pytestmark = [pytest.mark.faces, pytest.mark.django_db(transaction=True)]

QUERY = (
    "mutation($reference: String!, $file: Upload!, $key: String) "
    "{ attach(reference: $reference, file: $file, idempotencyKey: $key) { id reference } }"
)


def _urls() -> list[Any]:
    urls = ["/graphql/uploads/", "/graphql/async/uploads/"]
    try:  # Graphene needs graphql-core < 3.3 (see tests/testapp/urls.py)
        import tests.testapp.graphene_api  # noqa: F401
    except ImportError:  # pragma: no cover
        skip = pytest.mark.skip(reason="Graphene does not import beside this graphql-core")
        return [*urls, pytest.param("/graphene/uploads/", marks=skip)]
    return [*urls, "/graphene/uploads/"]


def _send(url: str, reference: str, key: str, content: bytes, name: str = "receipt.txt") -> Any:
    """One multipart request: ``operations``, ``map``, and the file (as the spec orders them)."""
    operations = {"query": QUERY, "variables": {"reference": reference, "key": key, "file": None}}
    form = {
        "operations": json.dumps(operations),
        "map": json.dumps({"0": ["variables.file"]}),
        "0": SimpleUploadedFile(name, content, content_type="text/plain"),
    }
    return json.loads(Client().post(url, form).content)


def _codes(answer: Any) -> list[str]:
    return [error["extensions"]["code"] for error in answer.get("errors") or []]


@pytest.mark.parametrize("url", _urls())
def test_another_file_of_the_same_name_type_and_size_is_another_call(url: str) -> None:
    reference, key = new_key(), new_key()
    first = _send(url, reference, key, b"invoice 0001")
    retry = _send(url, reference, key, b"invoice 0001")
    other = _send(url, reference, key, b"invoice 0002")
    assert "errors" not in first, first
    assert retry == first
    assert _codes(other) == ["key-reused"]
    assert charges(reference) == 1


@pytest.mark.parametrize("url", _urls())
def test_another_name_for_the_same_content_is_another_call(url: str) -> None:
    reference, key = new_key(), new_key()
    _send(url, reference, key, b"invoice 0001")
    other = _send(url, reference, key, b"invoice 0001", name="other.txt")
    assert _codes(other) == ["key-reused"]
    assert charges(reference) == 1


@pytest.mark.parametrize("url", _urls())
@override_settings(FILE_UPLOAD_MAX_MEMORY_SIZE=4)
def test_a_file_streamed_to_disk_is_the_same_call_on_its_retry(url: str) -> None:
    """A file larger than ``FILE_UPLOAD_MAX_MEMORY_SIZE`` is a temporary file on disk, whose
    path differs on each retry: its content, not its path, is the call."""
    reference, key = new_key(), new_key()
    first = _send(url, reference, key, b"a larger invoice")
    retry = _send(url, reference, key, b"a larger invoice")
    assert "errors" not in first, first
    assert retry == first
    assert charges(reference) == 1
