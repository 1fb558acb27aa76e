from django.urls import path

from bench import views

urlpatterns = [
    path("unprotected/", views.unprotected),
    path("protected/", views.protected),
    path("cached/", views.protected_cached),
    path("prepared/unprotected/", views.unprotected_prepared),
    path("prepared/protected/", views.protected_prepared),
    path("ping/", views.ping),
    path("outbox/", views.protected_outbox),
]
