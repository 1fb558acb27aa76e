"""SQLite (or MySQL) without psycopg: the app must start and protect a view.

psycopg is the ``[postgres]`` extra, not a dependency (the ``sample`` group
that ``make run`` installs lacked it too, until the sample's ``DATABASE_URL``
option made it add it). In 0.3's main, ``store/readonly.py`` and
``store/prepared.py`` import psycopg at module level, so ``django.setup()``
(the admin's autodiscovery imports them) fails with ``ModuleNotFoundError: No
module named 'psycopg'``: ``make run`` and the quick start on SQLite both stop
there.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent(
    """
    import sys

    class NoPsycopg:
        def find_spec(self, name, path=None, target=None):
            if name == "psycopg" or name.startswith(("psycopg.", "psycopg_")):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NoPsycopg())

    import django
    from django.conf import settings

    settings.configure(
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        INSTALLED_APPS=[
            "django.contrib.admin",
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
            "django.contrib.messages",
            "idempotency_django",
        ],
        ROOT_URLCONF=__name__,
        SECRET_KEY="without-psycopg",
        USE_TZ=True,
    )
    django.setup()
    urlpatterns = []

    from django.core.management import call_command
    from django.http import JsonResponse
    from django.test import RequestFactory

    from idempotency_django import idempotent

    call_command("migrate", verbosity=0)

    @idempotent
    def view(request):
        return JsonResponse({"ok": True}, status=201)

    def post():
        request = RequestFactory().post(
            "/x/", "{}", content_type="application/json", headers={"Idempotency-Key": "k"}
        )
        return view(request)

    first, again = post(), post()
    assert (first.status_code, again.status_code) == (201, 201)
    assert again["Idempotent-Replayed"] == "true"
    assert "psycopg" not in sys.modules
    print("ok")
    """
)


def test_the_app_starts_and_replays_on_sqlite_without_psycopg() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "ok"
