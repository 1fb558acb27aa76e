from django.contrib import admin
from django.urls import include, path

from idempotency_django.contrib.prometheus.views import metrics
from sample_project.payments import checkout, ninja_api, views, webhooks

urlpatterns = [
    path("", views.index, name="index"),
    path("favicon.ico", views.favicon),
    path("charges/", views.create_charge, name="create-charge"),
    path("charges/<int:pk>/", views.charge_detail, name="charge-detail"),
    path("api/", include("sample_project.payments.api_urls")),
    path("ninja/", ninja_api.api.urls),
    path("graphql/", include("sample_project.payments.graphql_api")),
    path("admin/", admin.site.urls),
    path("metrics", metrics, name="metrics"),
    path("webhooks/provider/", webhooks.provider_webhook, name="provider-webhook"),
    path("checkout/", checkout.checkout, name="checkout"),
    path("checkout/pay/", checkout.pay, name="checkout-pay"),
    path("checkout/orders/<str:order>/", checkout.order_status, name="checkout-order"),
    path("checkout/form/", checkout.pay_form, name="checkout-form"),
    path("checkout/receipts/<int:pk>/", checkout.receipt, name="checkout-receipt"),
]
