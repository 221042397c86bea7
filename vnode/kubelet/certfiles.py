"""`CertificateFiles`: the kubelet serving certificate from PEM files, reloaded on change.

`Listeners` loads the pair at start (a bad or mismatched pair stops start-up with the
file's name) and starts the watch; the watch thread looks at both files on a bounded
schedule (`interval`) and swaps the pair of the running `ServerTLS` when they change. A
half-written or mismatched new pair is logged and the old one kept; the next change is
tried again. Never logs key material, only paths and certificate fingerprints.
Tests: tests/vnode/kubelet/test_kubelet_certs.py.
"""

from __future__ import annotations

import logging
import os
import threading

from vnode.kubelet import certs

logger = logging.getLogger(__name__)

DEFAULT_INTERVAL = 10.0  # seconds between looks at the files; a reload costs two stats when nothing changed

Signature = tuple[tuple[int, int, int] | None, ...]


def _signature(*paths: str) -> Signature:
    """What tells a changed file: inode (a rename into place), size and mtime (an in-place write)."""
    result: list[tuple[int, int, int] | None] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            result.append(None)
        else:
            result.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(result)


class CertificateFiles:
    """A serving pair read from `cert_path` and `key_path`. `load()` once, then `watch(tls)`;
    `stop()` ends the watch thread."""

    def __init__(self, cert_path: str, key_path: str, *, interval: float = DEFAULT_INTERVAL) -> None:
        if interval <= 0:
            raise ValueError("the certificate reload interval must be positive")
        self.cert_path = cert_path
        self.key_path = key_path
        self.interval = interval
        self._seen: Signature = ()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def load(self) -> certs.KeyPair:
        """The pair as the files hold it now. Raises ValueError naming the file at fault."""
        seen = _signature(self.cert_path, self.key_path)
        pair = certs.load_pair(self.cert_path, self.key_path)
        self._seen = seen
        return pair

    def watch(self, tls: certs.ServerTLS) -> None:
        """Start the thread that swaps `tls`'s pair when the files change."""
        self._thread = threading.Thread(target=self._run, args=(tls,), name="kubelet-cert-files", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def check(self, tls: certs.ServerTLS) -> bool:
        """One look: reload when the files changed since the last look. True when `tls` now
        serves a new pair."""
        seen = _signature(self.cert_path, self.key_path)
        if seen == self._seen:
            return False
        self._seen = seen  # a broken pair is tried again only when the files change again
        try:
            pair = certs.load_pair(self.cert_path, self.key_path)
            tls.replace(pair)
        except ValueError as exc:
            logger.warning(
                "kubelet serving certificate: the new files are not a valid pair; still serving %s: %s",
                certs.fingerprint(tls.pair.cert_pem)[:16],
                exc,
            )
            return False
        logger.info(
            "kubelet serving certificate reloaded from %s: now serving %s (new connections)",
            self.cert_path,
            certs.fingerprint(pair.cert_pem)[:16],
        )
        return True

    def _run(self, tls: certs.ServerTLS) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.check(tls)
            except Exception:  # the watch must outlive one bad look; the next one retries
                logger.exception("kubelet serving certificate: checking %s failed", self.cert_path)
