"""The admin login with a Kubernetes token: the login form's token field, the authentication
backend that reviews it and logs in a shadow Django user, and the middleware that re-asks
RBAC on every console page so a removed binding takes effect within the Reviewer's TTL.

The shadow user (`kube:<kubernetes user>`, staff, unusable password) exists so the admin's
LogEntry and the session have a user row; what it may do is always asked of the cluster with
the Kubernetes name and groups kept in the session. The token itself is never stored.
In settings: AUTHENTICATION_BACKENDS and MIDDLEWARE; `console.admin` sets the login form.
Tests: tests/console/test_kube_logins.py.
"""

# mypy: disallow-subclassing-any=False

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import authenticate, get_user_model, logout
from django.contrib.auth.backends import BaseBackend
from django.contrib.auth.signals import user_logged_in
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse

from console import kubeauth
from kube.reviews import KubeUser

logger = logging.getLogger(__name__)

SHADOW_PREFIX = "kube:"  # not a valid Django username character set: createsuperuser cannot clash
UNCHECKED_PREFIXES = ("/api/", "/healthz", "/readyz", "/metrics", "/webhooks/", "/static/")


class TokenRefused(Exception):
    """Why a token login is refused, in words for the login page."""


def shadow_username(name: str) -> str:
    """`kube:<name>`, cut to the username column (150) with a hash suffix when longer."""
    max_length = get_user_model()._meta.get_field("username").max_length or 150
    full = SHADOW_PREFIX + name
    if len(full) <= max_length:
        return full
    digest = hashlib.sha256(name.encode()).hexdigest()[:12]
    return f"{full[: max_length - 13]}~{digest}"


class KubeTokenBackend(BaseBackend):
    """`authenticate(request, kube_token=...)`: TokenReview, then `get` on nebula.io/console."""

    def authenticate(self, request: HttpRequest | None, kube_token: str | None = None, **kwargs: Any) -> Any:
        if not kube_token:
            return None
        try:
            user = kubeauth.review(kube_token)
            if user is None:
                raise TokenRefused("The cluster does not accept this token (invalid or expired).")
            if not kubeauth.allows(user, kubeauth.VIEW_CONSOLE):
                raise TokenRefused(kubeauth.denial(user, kubeauth.VIEW_CONSOLE) + ".")
        except kubeauth.ReviewFailed as err:
            raise TokenRefused(f"{str(err).capitalize()}; try again.") from None
        shadow = self._shadow(user)
        setattr(shadow, "kube_user", user)  # noqa: B010 - read by `remember_identity` after the login
        return shadow

    def get_user(self, user_id: Any) -> Any:
        shadow = get_user_model().objects.filter(pk=user_id, is_active=True).first()
        return shadow if shadow is not None and shadow.get_username().startswith(SHADOW_PREFIX) else None

    @staticmethod
    def _shadow(user: KubeUser) -> Any:
        model = get_user_model()
        shadow, created = model.objects.get_or_create(
            username=shadow_username(user.name), defaults={"is_staff": True, "is_active": True}
        )
        if created:
            shadow.set_unusable_password()
            shadow.save(update_fields=["password"])
        elif shadow.has_usable_password() or not shadow.is_active:
            # A row of that name that is not ours (a password, or disabled by an admin): refuse.
            raise TokenRefused(f"The console user {shadow.get_username()!r} is not a token login's; ask an admin.")
        elif not shadow.is_staff:
            shadow.is_staff = True
            shadow.save(update_fields=["is_staff"])
        return shadow


def remember_identity(sender: Any, request: HttpRequest, user: Any, **kwargs: Any) -> None:
    """After a login: keep a token login's Kubernetes name and groups in the session."""
    kube_user = getattr(user, "kube_user", None)
    if isinstance(kube_user, KubeUser):
        kubeauth.remember(request.session, kube_user, user.get_username())
        logger.info("console login by Kubernetes user %s", kube_user.name)


user_logged_in.connect(remember_identity, dispatch_uid="nebula.kubelogin.remember_identity")


class LoginForm(AdminAuthenticationForm):
    """The admin login: a username and password, or a token from `kubectl create token`."""

    token = forms.CharField(
        label="Kubernetes token",
        required=False,
        strip=True,
        widget=forms.PasswordInput(attrs={"autocomplete": "off"}),
        help_text="or paste a token from kubectl create token <serviceaccount> -n <namespace>",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["username"].required = False
        self.fields["password"].required = False

    def clean(self) -> dict[str, Any]:
        token = self.cleaned_data.get("token")
        if not token:
            if not self.cleaned_data.get("username") or not self.cleaned_data.get("password"):
                raise ValidationError("Enter a username and password, or a Kubernetes token.", code="required")
            return dict(super().clean())
        try:
            self.user_cache = authenticate(self.request, kube_token=token)
        except TokenRefused as err:
            raise ValidationError(str(err), code="token_refused") from None
        if self.user_cache is None:
            raise ValidationError("This console does not accept Kubernetes tokens.", code="token_refused")
        self.confirm_login_allowed(self.user_cache)
        return dict(self.cleaned_data)


class KubeSessionCheck:
    """For a token login's session, re-ask `get nebula.io/console` on each console page (the
    API asks per view): denied logs the session out, an unreachable API server answers 503."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path.startswith(UNCHECKED_PREFIXES):
            refused = self.check(request)
            if refused is not None:
                return refused
        return self.get_response(request)

    @staticmethod
    def check(request: HttpRequest) -> HttpResponse | None:
        if not request.user.is_authenticated or not request.user.get_username().startswith(SHADOW_PREFIX):
            return None
        user = kubeauth.session_user(request)
        try:
            allowed = user is not None and kubeauth.allows(user, kubeauth.VIEW_CONSOLE)
        except kubeauth.ReviewFailed as err:
            return HttpResponse(f"{err}; try again.\n", status=503, content_type="text/plain")
        if not allowed:
            logger.info("console session of %s ended: RBAC no longer allows it", user.name if user else "?")
            logout(request)
        return None
