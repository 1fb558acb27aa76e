"""The chaos tier's served settings, with the protocol chosen by ``IDEMPOTENCY_PROTOCOL``.

``bench.chaos_settings`` plus one line: the system tier runs every scenario
under "lock" and "lease" (issue 10), each against a server of its own.
"""

from __future__ import annotations

import os

from bench.chaos_settings import *  # noqa: F403

IDEMPOTENCY_PROTOCOL = os.environ.get("IDEMPOTENCY_PROTOCOL") or None
