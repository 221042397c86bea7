"""A container of a rendered Pod template, run on this machine the way the kubelet runs it on
the `Dockerfile`'s image: the same argv, environment, working directory and mounts.

- argv: the container's `command`/`args` over the image's ENTRYPOINT/CMD (Kubernetes' rules),
  `$(VAR)` expanded from the container's environment;
- environment: the image's ENV, then the kubelet's Service variables
  (`KUBERNETES_SERVICE_HOST/PORT`), then `envFrom`, then `env` (later wins); `fieldRef`s
  from the Pod's facts, `secretKeyRef`/`configMapKeyRef`/`envFrom` from the Secrets and
  ConfigMaps the caller read from the API server (a missing one fails, unless optional);
- volumes: emptyDirs are folders shared by the Pod's containers, Secret and ConfigMap volumes
  folders of their keys' files, and the ServiceAccount token at its usual path;
- its filesystem: a private mount namespace (`unshare -m`) in which the image's own files (the
  repository at WORKDIR, the virtualenv where the image has it) and every volume are bound at
  their paths, read-only where the image's root is read-only (`/` included:
  `readOnlyRootFilesystem`), inside the Pod's network (tests/support/servers/netns.py).
The process runs as root here (the interpreter lives under /root on this machine); the
image's user is not applied. The mount points are made on this machine's own filesystem
first (empty folders such as /app and /etc/nebula/tls stay behind; the binds over them are
private to the container). Used by tests/support/rigs/install.py; nothing here is a test.
"""

from __future__ import annotations

import base64
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.deploy.image import ImageConfig
from tests.support.servers.netns import PodNetwork

Obj = dict[str, Any]
SERVICE_ACCOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass
class PodFacts:
    """What the kubelet knows of the Pod and reads from the API server for it."""

    name: str
    namespace: str
    pod_ip: str
    secrets: dict[str, dict[str, bytes]]  # name -> key -> value (decoded)
    config_maps: dict[str, dict[str, str]]
    service_env: dict[str, str]  # KUBERNETES_SERVICE_HOST/PORT
    service_account: dict[str, bytes]  # token, ca.crt, namespace
    volumes_root: Path
    uid: str = "3f1c2a9e-5b7d-4e8f-9a0b-1c2d3e4f5a6b"  # the Pod's metadata.uid
    _made: dict[str, Path] = field(default_factory=dict)

    def field_value(self, path: str) -> str:
        values = {
            "metadata.name": self.name,
            "metadata.namespace": self.namespace,
            "metadata.uid": self.uid,
            "status.podIP": self.pod_ip,
            "status.podIPs": self.pod_ip,
        }
        assert path in values, f"fieldRef {path!r} is not one this harness knows"
        return values[path]


def _expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: a known name is replaced, `$$` is `$`, the rest stays."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", lambda m: "$" if m.group(0) == "$$" else
                  env.get(m.group(1), m.group(0)), text)  # fmt: skip


def _key(source: Mapping[str, Mapping[str, Any]], ref: Mapping[str, Any], what: str) -> str | None:
    data = source.get(ref["name"])
    if data is None or ref["key"] not in data:
        if ref.get("optional"):
            return None
        raise AssertionError(f"CreateContainerConfigError: {what} {ref['name']!r} (key {ref['key']!r}) not found")
    value = data[ref["key"]]
    return value.decode() if isinstance(value, bytes) else str(value)


def container_env(container: Obj, image: ImageConfig, facts: PodFacts) -> dict[str, str]:
    """The container's environment as its process gets it."""
    env = {**image.env, **facts.service_env}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        ref = source.get("configMapRef") or source.get("secretRef")
        store: Mapping[str, Mapping[str, Any]] = facts.config_maps if "configMapRef" in source else facts.secrets
        data = store.get(ref["name"])
        if data is None:
            assert ref.get("optional"), f"CreateContainerConfigError: envFrom {ref['name']!r} not found"
            continue
        env.update({prefix + k: v.decode() if isinstance(v, bytes) else str(v) for k, v in data.items()})
    for item in container.get("env") or []:
        source = item.get("valueFrom")
        value: str | None
        if source is None:
            value = _expand(item.get("value", ""), env)
        elif "fieldRef" in source:
            value = facts.field_value(source["fieldRef"]["fieldPath"])
        elif "secretKeyRef" in source:
            value = _key(facts.secrets, source["secretKeyRef"], "secret")
        elif "configMapKeyRef" in source:
            value = _key(facts.config_maps, source["configMapKeyRef"], "configmap")
        else:
            raise AssertionError(f"env {item['name']}: {sorted(source)} is not supported by this harness")
        if value is not None:
            env[item["name"]] = value
    return env


def container_argv(container: Obj, image: ImageConfig, env: Mapping[str, str]) -> list[str]:
    """`command` replaces the ENTRYPOINT (and drops CMD); `args` replaces CMD."""
    command = container.get("command")
    args = container.get("args")
    if command:
        argv = [*command, *(args or [])]
    else:
        argv = [*image.entrypoint, *(args if args is not None else image.cmd)]
    assert argv, f"container {container['name']}: no command and no ENTRYPOINT"
    return [_expand(word, env) for word in argv]


def volume_folders(pod_spec: Obj, facts: PodFacts) -> dict[str, tuple[Path, bool]]:
    """Each volume's folder (made once per Pod) and whether it is read-only by nature."""
    folders: dict[str, tuple[Path, bool]] = {}
    for volume in pod_spec.get("volumes") or []:
        name = volume["name"]
        folder = facts._made.get(name)
        if folder is None:
            folder = facts.volumes_root / name
            folder.mkdir(parents=True)
            if "secret" in volume:
                ref = volume["secret"]
                data = facts.secrets.get(ref["secretName"])
                assert data is not None or ref.get("optional"), f"FailedMount: secret {ref['secretName']!r} not found"
                _write_files(folder, data or {})
            elif "configMap" in volume:
                ref = volume["configMap"]
                found = facts.config_maps.get(ref["name"])
                assert found is not None or ref.get("optional"), f"FailedMount: configmap {ref['name']!r} not found"
                _write_files(folder, {k: v.encode() for k, v in (found or {}).items()})
            else:
                assert "emptyDir" in volume, f"volume {name}: only emptyDir, secret and configMap are supported"
            facts._made[name] = folder
        folders[name] = (folder, "emptyDir" not in volume)
    if pod_spec.get("automountServiceAccountToken"):
        folder = facts._made.get("kube-api-access")
        if folder is None:
            folder = facts.volumes_root / "kube-api-access"
            folder.mkdir(parents=True)
            _write_files(folder, facts.service_account)
            facts._made["kube-api-access"] = folder
        folders["kube-api-access"] = (folder, True)
    return folders


def _write_files(folder: Path, data: Mapping[str, bytes]) -> None:
    for key, value in data.items():
        (folder / key).write_bytes(value)
        (folder / key).chmod(0o644)  # a Secret volume's defaultMode


@dataclass
class Container:
    """A started container's process (its group is its own) and its log file."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout)

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM, as the kubelet sends it, then SIGKILL to the group after `grace`."""
        pid = self.process.pid
        if self.process.returncode is None:  # not reaped: its pid and group id are still ours
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            # Waited for without reaping (WNOWAIT): its zombie keeps the group id from being reused,
            # so the SIGKILL below reaches what is left of this group and never another's.
            while (
                time.monotonic() < deadline and os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
            ):
                time.sleep(0.05)
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait(10)


def run_container(
    pod_spec: Obj,
    container: Obj,
    *,
    image: ImageConfig,
    image_files: Mapping[str, Path],
    facts: PodFacts,
    network: PodNetwork,
    log: Path,
) -> Container:
    """Start `container` of `pod_spec`; `image_files` maps the image's paths (WORKDIR, its
    virtualenv) to this machine's folders that stand for them."""
    env = container_env(container, image, facts)
    argv = container_argv(container, image, env)
    folders = volume_folders(pod_spec, facts)
    mounts = [(str(path), target, True) for target, path in image_files.items()]
    for mount in container.get("volumeMounts") or []:
        folder, read_only = folders[mount["name"]]
        mounts.append((str(folder), mount["mountPath"], bool(mount.get("readOnly")) or read_only))
    if pod_spec.get("automountServiceAccountToken"):
        mounts.append((str(folders["kube-api-access"][0]), SERVICE_ACCOUNT_PATH, True))
    read_only_root = bool((container.get("securityContext") or {}).get("readOnlyRootFilesystem"))
    script = _mount_script(mounts, read_only_root=read_only_root)
    workdir = container.get("workingDir") or image.workdir
    exec_line = ["cd", workdir, "&&", "exec", "env", "-i", *(shlex.quote(f"{k}={v}") for k, v in env.items()),
                 *(shlex.quote(word) for word in argv)]  # fmt: skip
    with log.open("ab") as out:
        process = subprocess.Popen(
            network.argv(["unshare", "-m", "--propagation", "private", "--", "sh", "-c",
                          f"{script} && {' '.join(exec_line)}"]),
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    return Container(container["name"], process, log)


def _mount_script(mounts: list[tuple[str, str, bool]], *, read_only_root: bool) -> str:
    """Bind each source at its target, parents first; `/tmp` last (the sources may be under it);
    then read-only remounts (per mount: the machine's own mounts are untouched)."""
    ordered = sorted(mounts, key=lambda m: (m[1] == "/tmp", m[1].count("/"), m[1]))
    steps = []
    for source, target, _ in ordered:
        steps += [f"mkdir -p {shlex.quote(target)}", f"mount --bind {shlex.quote(source)} {shlex.quote(target)}"]
    if read_only_root:
        steps.append("mount -o remount,bind,ro /")
    steps += [f"mount -o remount,bind,ro {shlex.quote(t)}" for _, t, read_only in ordered if read_only]
    return " && ".join(steps)


def decoded(secret: Obj) -> dict[str, bytes]:
    """A Secret's `data` (base64), as its volume's files and env values carry it."""
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
