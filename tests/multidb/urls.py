from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from tests.multidb import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("sharded/charges/", views.sharded_charge),
    path("sharded/api/charges/", views.ShardedChargeAPI.as_view()),
    path("two-databases/charges/", views.charge_on_the_other_database),
    path("two-databases/async/", views.async_charge_on_the_other_database),
    path("two-databases/nested-call/", views.nested_call_on_the_other_database),
    path("two-databases/uncovered/", views.audit_on_the_other_database),
    path("replica/charges/", views.replica_charge),
    path("", include("tests.testapp.urls")),
]
