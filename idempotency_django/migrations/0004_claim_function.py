"""The read-only claim as one prepared statement (PostgreSQL only; see store/readonly.py).

A VOLATILE PL/pgSQL function: each statement in it reads on a snapshot taken
when that statement starts (at READ COMMITTED), so its lookup, after the lock,
sees what the previous holder committed. Prepared statements can't carry two
statements in one round trip; a call to this function can.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

FUNCTION = "idempotency_django_claim"


def _create(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    table = schema_editor.quote_name(
        apps.get_model("idempotency_django", "IdempotencyEntry")._meta.db_table
    )
    schema_editor.execute(
        f"""
CREATE OR REPLACE FUNCTION {FUNCTION}(
    p_lock bigint, p_wait_ms integer, p_idle_ms integer, p_tenant text, p_key text)
RETURNS TABLE (
    o_got boolean, o_fingerprint text, o_status text, o_code integer, o_reason text,
    o_headers jsonb, o_body bytea, o_dead boolean, o_remaining float8)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    saved text;
BEGIN
    IF p_idle_ms IS NOT NULL THEN
        PERFORM set_config('idle_in_transaction_session_timeout', p_idle_ms::text, true);
    END IF;
    IF p_wait_ms > 0 THEN
        saved := current_setting('lock_timeout');
        PERFORM set_config('lock_timeout', p_wait_ms::text || 'ms', true);
        PERFORM pg_advisory_xact_lock(p_lock);
        PERFORM set_config('lock_timeout', saved, true);
        o_got := true;
    ELSE
        o_got := pg_try_advisory_xact_lock(p_lock);
    END IF;
    -- A statement of its own, after the lock: its snapshot is taken now.
    RETURN QUERY SELECT o_got, e.fingerprint::text, e.status::text, e.response_status::integer,
        e.response_reason::text, e.response_headers, e.response_body,
        (e.expires_at <= statement_timestamp() OR (e.status = 'in_progress'
            AND e.locked_until <= statement_timestamp())),
        EXTRACT(EPOCH FROM (e.expires_at - statement_timestamp()))::float8
    FROM {table} e WHERE e.tenant = p_tenant AND e.key = p_key;
    IF NOT FOUND THEN
        RETURN QUERY SELECT o_got, NULL::text, NULL::text, NULL::integer, NULL::text,
            NULL::jsonb, NULL::bytea, NULL::boolean, NULL::float8;
    END IF;
END
$$
"""
    )


def _drop(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"DROP FUNCTION IF EXISTS {FUNCTION}(bigint, integer, integer, text, text)"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("idempotency_django", "0003_secret"),
    ]

    operations = [migrations.RunPython(_create, _drop, elidable=False)]
