from django.db import models


class Charge(models.Model):
    """One run of the view (status 201: it created; 400: it refused the body)."""

    amount = models.IntegerField(null=True)
    key = models.TextField(null=True)  # noqa: DJ001  None: no key was sent
    caller = models.TextField()
    status = models.IntegerField()
    at = models.FloatField()

    class Meta:
        db_table = "charges"

    def __str__(self) -> str:
        return f"run {self.pk} ({self.status})"


class Call(models.Model):
    """One POST /charges/ as the outermost middleware saw it: who, which key, what answer."""

    key = models.TextField(null=True)  # noqa: DJ001  None: no key was sent
    caller = models.TextField()
    status = models.IntegerField()
    answer_id = models.BigIntegerField(null=True)  # the "id" its answer names
    at = models.FloatField()  # when it arrived

    class Meta:
        db_table = "calls"

    def __str__(self) -> str:
        return f"call {self.pk} ({self.status})"
