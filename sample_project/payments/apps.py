from django.apps import AppConfig


class PaymentsConfig(AppConfig):
    name = "sample_project.payments"
    label = "payments"
    default_auto_field = "django.db.models.BigAutoField"
