from django.urls import path

from bench import views

urlpatterns = [
    path("unprotected/", views.unprotected),
    path("protected/", views.protected),
    path("cached/", views.protected_cached),
    path("ping/", views.ping),
]
