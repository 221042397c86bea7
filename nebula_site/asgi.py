"""ASGI entry point for the console listener: Django's application behind the standby's forwarder.

The process wiring (`nebula_site.manager`) hands `application` to
`vnode.kubelet.server.Listeners`, which serves it on the console listener only (I5); the
kubelet listener has its own app. Static files are served here on every replica; everything
else goes through `console.forward.Forwarder`, which relays it to the leader while this
replica stands by (docs/console.md, "Every replica answers").
Tests: tests/vnode/kubelet/test_runvnode_listeners.py, tests/console/test_forward.py.
"""

from __future__ import annotations

import os

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

from console.forward import Forwarder

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nebula_site.settings")
# The admin's CSS and JavaScript come from the app's static folders, served by this process
# (DEBUG on or off): the console has no web server in front of it.
application = ASGIStaticFilesHandler(Forwarder(get_asgi_application()))
