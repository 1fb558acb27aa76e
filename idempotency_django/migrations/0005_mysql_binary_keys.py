"""MySQL and MariaDB: compare tenants and keys byte for byte, as every other database does.

Their default collations fold case and ignore trailing spaces ("PAD SPACE"):
``abc``, ``ABC`` and ``"abc "`` would be one key to the unique index, so a
request could replay another's answer. A binary NO PAD collation keeps them
apart. The model's state is unchanged: other databases compare bytes already.

(The partial indexes need nothing: where conditions are unsupported Django
creates them as plain indexes, with the warning models.W037.)
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

COLUMNS = ("tenant", "key")


def binary_collation(connection: Any) -> str:
    if connection.mysql_is_mariadb:
        return "utf8mb4_nopad_bin"  # MariaDB 10.2+
    if connection.mysql_version >= (8, 0, 17):
        return "utf8mb4_0900_bin"
    return "utf8mb4_bin"  # case-sensitive, but PAD SPACE: "abc " is still "abc"


def forwards(apps: Any, schema_editor: Any) -> None:
    connection = schema_editor.connection
    if connection.vendor != "mysql":
        return
    model = apps.get_model("idempotency_django", "IdempotencyEntry")
    quote = schema_editor.quote_name
    collation = binary_collation(connection)
    changes = ", ".join(
        f"MODIFY {quote(name)} varchar(255) CHARACTER SET utf8mb4 COLLATE {collation} NOT NULL"
        for name in COLUMNS
    )
    schema_editor.execute(f"ALTER TABLE {quote(model._meta.db_table)} {changes}")


class Migration(migrations.Migration):
    atomic = False  # MySQL cannot roll DDL back; Django refuses DDL in a transaction there
    dependencies = [("idempotency_django", "0004_claim_function")]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop, elidable=False)]
