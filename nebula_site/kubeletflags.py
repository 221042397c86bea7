"""`runvnode`'s flags for the kubelet listener (client CA, serving certificate, who may use
the kubelet API, stream timeouts), and the NEBULA settings of who may use it.

Called by `manage.py runvnode` (`add_arguments`, then `auth_options`; with `--dev-cluster`
the embedded cluster's client CA goes to `DEV_KUBELET_CLIENT_CA`); the manager
(`nebula_site.manager`) builds the listener's `vnode.kubelet.auth.KubeletAuth` from what
`auth_options` returns. Parses, never wires.
Tests: tests/vnode/kubelet/test_kubelet_auth_runvnode.py, tests/nebula_site/test_servingcert.py.
"""

from __future__ import annotations

from argparse import ArgumentParser, BooleanOptionalAction
from typing import Any

from django.conf import settings

from nebula_site import servingcert
from nebula_site.manager import config as manager_config
from vnode.kubelet import auth

DEV_KUBELET_CLIENT_CA = ".nebula/kubelet-client-ca.pem"  # --dev-cluster: the CA of its kubelet client certificate


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument(
        "--kubelet-client-ca",
        default=None,
        metavar="PATH",
        help="PEM bundle: a client certificate it signed authenticates (user CN, groups O); "
        "--dev-cluster: the embedded cluster's kubelet client CA",
    )
    parser.add_argument("--kubelet-cert-source", choices=servingcert.SOURCES, help="see docs/kubelet-api.md")
    parser.add_argument("--kubelet-cert", metavar="PATH", help="PEM serving certificate, reloaded on change")
    parser.add_argument("--kubelet-key", metavar="PATH", help="PEM private key of --kubelet-cert")
    parser.add_argument(
        "--kubelet-anonymous-auth",
        action=BooleanOptionalAction,
        default=None,
        help="requests without credentials are system:anonymous (still authorised); "
        "default NEBULA['KUBELET_ANONYMOUS_AUTH'] (off: 401)",
    )
    parser.add_argument(
        "--kubelet-token-auth",
        action=BooleanOptionalAction,
        default=None,
        help="check bearer tokens with TokenReview; default NEBULA['KUBELET_TOKEN_AUTH'] (on)",
    )
    parser.add_argument(
        "--kubelet-authorization-mode",
        choices=auth.AUTHORIZATION_MODES,
        default=None,
        help="Webhook: SubjectAccessReview on nodes/<subresource>; default NEBULA['KUBELET_AUTHORIZATION_MODE']",
    )
    parser.add_argument(
        "--stream-creation-timeout",
        type=float,
        metavar="SECONDS",
        help="how long an exec, attach or port-forward may take to open its streams, as the kubelet's (default 30)",
    )
    parser.add_argument(
        "--streaming-connection-idle-timeout",
        type=float,
        metavar="SECONDS",
        help="close an exec, attach or port-forward connection idle this long, as the kubelet's (default 14400)",
    )


def auth_options(options: dict[str, Any]) -> manager_config.KubeletAuthOptions:
    """The flags over NEBULA settings (by default: anonymous requests refused, tokens
    reviewed, access reviewed with Webhook), reviews asked of `options['kubeconfig']`."""
    conf = settings.NEBULA

    def pick(flag: str, key: str) -> Any:
        return conf[key] if options.get(flag) is None else options[flag]

    return manager_config.KubeletAuthOptions(
        anonymous=bool(pick("kubelet_anonymous_auth", "KUBELET_ANONYMOUS_AUTH")),
        token_auth=bool(pick("kubelet_token_auth", "KUBELET_TOKEN_AUTH")),
        authorization=str(pick("kubelet_authorization_mode", "KUBELET_AUTHORIZATION_MODE")),
        kubeconfig=options.get("kubeconfig"),
    )
