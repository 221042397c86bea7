"""The manager may open as many files as its limits allow: `manage.py runvnode` raises the
soft open-files limit to the hard one before anything starts, as every Go program (the
kubelet included) does since Go 1.19, and warns when that is below what the listener caps
can hold open (connections per listener, forwarded connections).
Never lowers a limit; a no-op where the platform has no `resource` module.
Tests: tests/nebula_site/test_openfiles.py.
"""

from __future__ import annotations

import logging

from vnode.kubelet.limits import Limits

logger = logging.getLogger(__name__)

SPARE = 1024  # files the manager needs besides its streams: Kubernetes watches, provider clients, logs


def needed(limits: Limits) -> int:
    """Descriptors the kubelet listener's caps allow at once, plus `SPARE`: its connections
    (unauthenticated and authenticated) and a socket per forwarded connection. A followed
    log holds a file only with the local provider (a development provider), so is not counted."""
    return limits.total + limits.authenticated_total + limits.forwards_total + SPARE


def raise_to_hard(limits: Limits) -> int | None:
    """Soft limit := hard limit; the limit now, or None where it cannot be read."""
    try:
        import resource
    except ImportError:  # not a POSIX platform
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            logger.warning("cannot raise the open-files limit from %d to %d: %s", soft, hard, exc)
    want = needed(limits)
    if soft != resource.RLIM_INFINITY and soft < want:
        logger.warning(
            "the open-files limit is %d, below the %d the listener caps can use (LISTENER_LIMITS total, "
            "authenticated_total, forwards_total + %d); past it new connections fail "
            "with EMFILE: raise the container's nofile limit or lower those caps",
            soft,
            want,
            SPARE,
        )
    return int(soft)
