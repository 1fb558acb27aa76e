from charges.views import ChargeView, count
from django.urls import path

urlpatterns = [path("charges/", ChargeView.as_view()), path("count/", count)]
