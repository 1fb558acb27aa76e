"""Each entries database gets an identity of its own, bound into its stored answers' seals."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("idempotency_django", "0006_view_idempotency_body"),
    ]

    operations = [
        migrations.CreateModel(
            name="IdempotencyDatabase",
            fields=[
                ("id", models.PositiveSmallIntegerField(primary_key=True, serialize=False)),
                ("identity", models.CharField(max_length=64)),
            ],
            options={"verbose_name": "idempotency database identity"},
        ),
    ]
