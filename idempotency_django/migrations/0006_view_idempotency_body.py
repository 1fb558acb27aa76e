"""Stored answers are sealed: their admin view takes the view_idempotency_body permission."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("idempotency_django", "0005_mysql_binary_keys"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="idempotencyentry",
            options={
                "permissions": [("view_idempotency_body", "Can view stored answers (decrypted)")],
                "verbose_name": "idempotency entry",
                "verbose_name_plural": "idempotency entries",
            },
        ),
    ]
