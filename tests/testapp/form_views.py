"""Server-rendered form views the form tests protect (``tests/test_forms.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from django import forms
from django.contrib import admin
from django.core.files.uploadhandler import MemoryFileUploadHandler
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.template.response import TemplateResponse
from django.urls import path
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.csrf import csrf_exempt
from django.views.generic import CreateView, DeleteView, FormView, UpdateView

from idempotency_django import idempotency_exempt, idempotent
from idempotency_django.admin import IdempotentAdminMixin, protect_admin
from idempotency_django.forms import IdempotencyKeyField
from idempotency_django.views import IdempotentFormMixin
from tests.testapp.models import Charge
from tests.testapp.urls import urlpatterns as testapp_urlpatterns


class ChargeForm(forms.ModelForm[Charge]):
    class Meta:
        model = Charge
        fields = ("reference", "amount")


class KeyedChargeForm(ChargeForm):
    """For templates that render fields one by one: the key is one of them."""

    idempotency_key = IdempotencyKeyField()


class ReceiptForm(forms.Form):
    reference = forms.CharField()
    receipt = forms.FileField(required=False)


@idempotent
def charge_form(request: HttpRequest) -> HttpResponse:
    """A function view handling its own form: a new charge, then a redirect to it."""
    form = ChargeForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        charge = form.save()
        return HttpResponseRedirect(f"/forms/done/{charge.pk}/")
    return render(request, "testapp/charge_form.html", {"form": form})


@idempotent
def charge_template(request: HttpRequest) -> HttpResponse:
    """``charge_form`` answering a ``TemplateResponse``: its context shows the form's errors."""
    form = ChargeForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        charge = form.save()
        return HttpResponseRedirect(f"/forms/done/{charge.pk}/")
    return TemplateResponse(request, "testapp/charge_form.html", {"form": form})


@idempotent
def upload(request: HttpRequest) -> HttpResponse:
    """A multipart form with a file: one charge per upload."""
    form = ReceiptForm(request.POST, request.FILES)
    if not form.is_valid():
        return HttpResponse(status=400)
    data = form.cleaned_data["receipt"].read() if form.cleaned_data["receipt"] else b""
    charge = Charge.objects.create(reference=form.cleaned_data["reference"], amount=len(data))
    return HttpResponseRedirect(f"/forms/done/{charge.pk}/")


def done(request: HttpRequest, pk: int) -> HttpResponse:
    return HttpResponse(f"charge {pk}")


class ChargeCreate(IdempotentFormMixin, CreateView[Charge, Any]):
    model = Charge
    fields = ("reference", "amount")
    success_url = "/forms/done/{id}/"


class UniqueReferenceForm(ChargeForm):
    """A reference may be used once: a second order with it "already exists"."""

    def clean_reference(self) -> str:
        reference: str = self.cleaned_data["reference"]
        if Charge.objects.filter(reference=reference).exists():
            raise forms.ValidationError("A charge with this reference already exists.")
        return reference


class UniqueChargeCreate(ChargeCreate):
    form_class = UniqueReferenceForm
    fields = None  # type: ignore[assignment]


class RacingChargeCreate(ChargeCreate):
    # Generous: a duplicate must outwait the first on a machine of any speed.
    idempotency_options: ClassVar[Mapping[str, Any]] = {"wait": 60}


class ChargeUpdate(IdempotentFormMixin, UpdateView[Charge, Any]):
    model = Charge
    fields = ("reference", "amount")
    success_url = "/forms/done/{id}/"


class ChargeDelete(IdempotentFormMixin, DeleteView[Charge, Any]):
    model = Charge
    success_url = "/forms/done/0/"


class ChargeFormView(IdempotentFormMixin, FormView[ChargeForm]):
    form_class = ChargeForm
    template_name = "testapp/charge_form.html"

    def form_valid(self, form: ChargeForm) -> HttpResponse:
        return super().form_valid(form)

    def get_success_url(self) -> str:
        return f"/forms/done/{Charge.objects.count()}/"


class PlainChargeCreate(CreateView[Charge, Any]):
    """No mixin: only IdempotencyMiddleware protects it."""

    model = Charge
    fields = ("reference", "amount")
    success_url = "/forms/done/{id}/"


def plain_charge(request: HttpRequest) -> HttpResponse:
    """No decorator: only IdempotencyMiddleware protects it."""
    if request.method == "POST":
        charge = Charge.objects.create(reference=request.POST.get("reference", "x"), amount=1)
        return HttpResponseRedirect(f"/forms/done/{charge.pk}/")
    return render(request, "testapp/charge_form.html", {"form": ChargeForm()})


@idempotent
def guest_checkout(request: HttpRequest) -> HttpResponse:
    """A guest checkout that remembers its order in the session (a session write)."""
    charge = Charge.objects.create(reference=request.POST.get("reference", "x"), amount=1)
    request.session["last_order"] = charge.pk
    return HttpResponseRedirect(f"/forms/done/{charge.pk}/")


@idempotent
def guest_cycling(request: HttpRequest) -> HttpResponse:
    """A guest checkout that gives the visitor a new session key (as login() does)."""
    charge = Charge.objects.create(reference=request.POST.get("reference", "x"), amount=1)
    request.session.cycle_key()
    return HttpResponseRedirect(f"/forms/done/{charge.pk}/")


class PostDecorated(View):
    """A class view protecting its own handler: ``@method_decorator(idempotent)``."""

    @method_decorator(idempotent(wait=0))
    def post(self, request: HttpRequest) -> HttpResponse:
        charge = Charge.objects.create(reference=request.POST.get("reference", "x"), amount=1)
        return HttpResponseRedirect(f"/forms/done/{charge.pk}/")


@idempotent
def _inner_charge(request: HttpRequest) -> HttpResponse:
    charge = Charge.objects.create(reference=request.POST.get("reference", "x"), amount=1)
    return HttpResponseRedirect(f"/forms/done/{charge.pk}/")


def delegating_charge(request: HttpRequest) -> HttpResponse:
    """A plain view handing its request to a protected one (nothing marks it from outside)."""
    return _inner_charge(request)


@csrf_exempt
def csrf_exempt_charge(request: HttpRequest) -> HttpResponse:
    """Exempt from CSRF only: the middleware still protects it."""
    charge = Charge.objects.create(reference=request.POST.get("reference", "x"), amount=1)
    return HttpResponseRedirect(f"/forms/done/{charge.pk}/")


@csrf_exempt
def custom_upload(request: HttpRequest) -> HttpResponse:
    """Django's per-request upload handlers: set before request.POST or FILES is read."""
    request.upload_handlers = [MemoryFileUploadHandler(request)]
    return HttpResponse(str(len(request.FILES)), status=201)


@idempotency_exempt
def exempt_charge(request: HttpRequest) -> HttpResponse:
    charge = Charge.objects.create(reference=request.POST.get("reference", "x"), amount=1)
    return HttpResponseRedirect(f"/forms/done/{charge.pk}/")


class ChargeAdmin(IdempotentAdminMixin, admin.ModelAdmin[Charge]):
    actions = ("double_amounts",)
    list_display = ("reference", "amount")
    list_display_links = ("reference",)
    list_editable = ("amount",)

    @admin.action(description="Double the amounts")
    def double_amounts(self, request: HttpRequest, queryset: Any) -> None:
        for charge in queryset:
            charge.amount *= 2
            charge.save()


# One site with the mixin on its ModelAdmin, one protected whole by protect_admin().
forms_admin = admin.AdminSite(name="forms_admin")
forms_admin.register(Charge, ChargeAdmin)
plain_admin = admin.AdminSite(name="plain_admin")
plain_admin.register(Charge)
protect_admin(plain_admin)

urlpatterns = [
    path("forms-admin/", forms_admin.urls),
    path("plain-admin/", plain_admin.urls),
    path("forms/charge/", charge_form),
    path("forms/upload/", upload),
    path("forms/template-function/", charge_template),
    path("forms/done/<int:pk>/", done),
    path("forms/create/", ChargeCreate.as_view()),
    path("forms/racing/", RacingChargeCreate.as_view()),
    path("forms/unique/", UniqueChargeCreate.as_view()),
    path("forms/update/<int:pk>/", ChargeUpdate.as_view()),
    path("forms/delete/<int:pk>/", ChargeDelete.as_view()),
    path("forms/formview/", ChargeFormView.as_view()),
    path("forms/plain/", plain_charge),
    path("forms/plain-create/", PlainChargeCreate.as_view()),
    path("forms/exempt/", exempt_charge),
    path("forms/guest/", guest_checkout),
    path("forms/post-decorated/", PostDecorated.as_view()),
    path("forms/delegating/", delegating_charge),
    path("forms/csrf-exempt/", csrf_exempt_charge),
    path("forms/custom-upload/", custom_upload),
    path("forms/guest-cycling/", guest_cycling),
    *testapp_urlpatterns,
]
