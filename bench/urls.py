from django.urls import URLPattern, path

from bench import views

urlpatterns: list[URLPattern] = [
    path("unprotected/", views.unprotected),
    path("autocommit/", views.autocommit),
    path("lock/", views.lock),
    path("lease/", views.lease),
    path("cached/", views.lock_cached),
    path("cached-generic/", views.lock_cached_generic),
    path("prepared/unprotected/", views.unprotected_prepared),
    path("prepared/lock/", views.lock_prepared),
    path("held/lock/", views.held_lock),
    path("held/lease/", views.held_lease),
    path("ping/", views.ping),
    path("drf/plain/", views.drf_plain),
    path("drf/lock/", views.drf_lock),
    path("drf/peer/", views.drf_peer),
    path("drf/token/plain/", views.drf_token_plain),
    path("drf/token/lock/", views.drf_token_lock),
    path("drf/token/peer/", views.drf_token_peer),
    path("drf/token/peer-shared/", views.drf_token_peer_shared),
]
if views.lock_enqueue is not None:
    urlpatterns.append(path("enqueue/", views.lock_enqueue))
