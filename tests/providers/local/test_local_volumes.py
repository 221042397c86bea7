"""Volumes of a local instance, with real processes: each volume materialised in the instance
folder, each container's mount paths under the instance's root, paths in the command rewritten
at path boundaries, and Secret contents nowhere but their files."""

from __future__ import annotations

import os
import stat

import pytest

from providers.base import ClaimName, InstanceId, InstanceState, LogOptions, PodSpec, ProvisionRequest
from providers.errors import InvalidRequest
from providers.local import LocalProvider, volumes
from providers.shape import ContainerSpec, Mount, Volume, VolumeFile
from tests.support.factories import make_pod_spec
from tests.support.polling import read_to_end, wait_for

CLAIM = ClaimName("ns-pod-abcdefghij")
SECRET_BYTES = b"hunter2-volume-s3cr3t"
CONFIG = Volume(
    "cfg", "configMap", (VolumeFile("app.conf", b"color=blue\n"), VolumeFile("nested/extra", b"x\n", 0o600))
)
SECRET = Volume("creds", "secret", (VolumeFile("password", SECRET_BYTES, 0o400),))
SCRATCH = Volume("scratch", "emptyDir")


def pod_of(*apps: ContainerSpec) -> PodSpec:
    return make_pod_spec(container=apps[0].name, args=apps[0].args, containers=apps, restart_policy="Never")


def start(provider: LocalProvider, pod: PodSpec, *volumes_: Volume) -> InstanceId:
    return provider.provision(pod, ProvisionRequest(CLAIM, volumes=volumes_)).instance_id


def output(provider: LocalProvider, instance_id: InstanceId, container: str = "") -> bytes:
    wait_for(
        lambda: (i := provider.get(instance_id)) is not None
        and i.state in (InstanceState.SUCCEEDED, InstanceState.FAILED)
    )
    return read_to_end(provider.logs(instance_id, LogOptions(container=container)))


def test_volumes_appear_at_their_mount_paths_with_their_files_and_modes(provider: LocalProvider) -> None:
    mounts = (Mount("cfg", "/etc/app"), Mount("creds", "/var/run/creds", read_only=True))
    script = "cat /etc/app/app.conf /etc/app/nested/extra; stat -c %a /etc/app/app.conf /var/run/creds/password"
    instance_id = start(provider, pod_of(ContainerSpec("main", args=(script,), mounts=mounts)), CONFIG, SECRET)
    assert output(provider, instance_id) == b"color=blue\nx\n644\n400\n"
    root = provider.root / CLAIM / "root"
    assert (root / "etc/app/app.conf").read_bytes() == b"color=blue\n"
    assert stat.S_IMODE((root / "etc/app/nested/extra").stat().st_mode) == 0o600
    assert stat.S_IMODE((provider.root / CLAIM / "volumes" / "creds" / "password").stat().st_mode) == 0o400


def test_an_empty_dir_is_shared_by_the_containers_that_mount_it(provider: LocalProvider) -> None:
    writer = ContainerSpec("writer", args=("echo hi > /data/note",), mounts=(Mount("scratch", "/data"),))
    reader = ContainerSpec(
        "reader", args=("while [ ! -f /shared/note ]; do sleep 0.05; done; cat /shared/note",),
        mounts=(Mount("scratch", "/shared"),),
    )  # fmt: skip
    instance_id = start(provider, pod_of(writer, reader), SCRATCH)
    assert output(provider, instance_id, "reader") == b"hi\n"
    assert (provider.root / CLAIM / "volumes" / "scratch" / "note").read_bytes() == b"hi\n"


def test_an_exec_into_a_container_sees_its_mount_paths(provider: LocalProvider) -> None:
    """`kubectl exec -c` and exec probes name the container's paths: the command is rewritten too."""
    main = ContainerSpec("main", args=("echo hi > /data/note; sleep 30",), mounts=(Mount("scratch", "/data"),))
    instance_id = start(provider, pod_of(main), SCRATCH)
    wait_for(lambda: (provider.root / CLAIM / "volumes" / "scratch" / "note").exists(), what="the note")
    # The workload can write before its supervisor records the run; exec needs the record.
    wait_for(lambda: provider.get(instance_id).state is InstanceState.RUNNING, what="running")  # type: ignore[union-attr]
    process = provider.exec(instance_id, ["cat", "/data/note"], tty=False, stdin=False, container="main")
    try:
        assert read_to_end(process, 10, read=process.read_stdout) == b"hi\n"
        assert process.wait(10) == 0
    finally:
        process.close()


def test_a_sub_path_mounts_one_file_or_folder_of_a_volume(provider: LocalProvider) -> None:
    mounts = (Mount("cfg", "/etc/app.conf", sub_path="app.conf"), Mount("scratch", "/work", sub_path="made/here"))
    script = "cat /etc/app.conf; touch /work/file; ls /work"
    instance_id = start(provider, pod_of(ContainerSpec("main", args=(script,), mounts=mounts)), CONFIG, SCRATCH)
    assert output(provider, instance_id) == b"color=blue\nfile\n"
    assert (provider.root / CLAIM / "volumes" / "scratch" / "made" / "here" / "file").exists()


def test_the_working_dir_under_a_mount_path_is_in_the_root_and_nebula_root_names_it(provider: LocalProvider) -> None:
    container = ContainerSpec("main", args=('pwd; echo "$NEBULA_ROOT"; cat app.conf',), working_dir="/etc/app",
                              mounts=(Mount("cfg", "/etc/app"),))  # fmt: skip
    instance_id = start(provider, pod_of(container), CONFIG)
    root = provider.root / CLAIM / "root"
    assert output(provider, instance_id) == f"{root}/etc/app\n{root}\ncolor=blue\n".encode()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/etc/cfg", "R/etc/cfg"),
        ("/etc/cfg/x", "R/etc/cfg/x"),
        ("cat /etc/cfg", "cat R/etc/cfg"),
        ("cat /etc/cfg/a /etc/cfg/b", "cat R/etc/cfg/a R/etc/cfg/b"),
        ("--config=/etc/cfg/app.conf", "--config=R/etc/cfg/app.conf"),
        ("'/etc/cfg'", "'R/etc/cfg'"),
        ("PATH=/bin:/etc/cfg:/usr", "PATH=/bin:R/etc/cfg:/usr"),
        ("/etc/cfgx", "/etc/cfgx"),
        ("/etc/cfg.d/x", "/etc/cfg.d/x"),
        ("/etc/cfg-old", "/etc/cfg-old"),
        ("/usr/etc/cfg", "/usr/etc/cfg"),
        ("etc/cfg", "etc/cfg"),
        ("/etc", "/etc"),
        ("/data", "R/data"),
        ("/data/etc/cfg", "R/data/etc/cfg"),
    ],
)
def test_a_mount_path_is_rewritten_into_the_root_only_at_path_boundaries(text: str, expected: str) -> None:
    assert volumes.rewrite(text, ["/etc/cfg", "/data"], "R") == expected


@pytest.mark.parametrize(
    ("apps", "message"),
    [
        ((ContainerSpec("a", args=("true",), mounts=(Mount("nope", "/x"),)),), "mounts volume 'nope'"),
        ((ContainerSpec("a", args=("true",), mounts=(Mount("cfg", "relative"),)),), "must be an absolute path"),
        ((ContainerSpec("a", args=("true",), mounts=(Mount("cfg", "/"),)),), "must be an absolute path below /"),
        ((ContainerSpec("a", args=("true",), mounts=(Mount("cfg", "/x", sub_path="../up"),)),), "without '..'"),
        (
            (
                ContainerSpec("a", args=("true",), mounts=(Mount("cfg", "/x"),)),
                ContainerSpec("b", args=("true",), mounts=(Mount("scratch", "/x"),)),
            ),
            "mount path '/x' is mounted from different volumes",
        ),
        (
            (ContainerSpec("a", args=("true",), mounts=(Mount("cfg", "/x"), Mount("scratch", "/x/y"))),),
            "'/x/y' lies inside mount path '/x'",
        ),
    ],
)
def test_mounts_one_root_cannot_hold_are_refused_by_name(
    provider: LocalProvider, apps: tuple[ContainerSpec, ...], message: str
) -> None:
    with pytest.raises(InvalidRequest, match=message):
        start(provider, pod_of(*apps), CONFIG, SCRATCH)
    assert provider.list() == [] and not (provider.root / CLAIM).exists()


def test_secret_contents_reach_no_repr_log_record_or_error(provider: LocalProvider) -> None:
    """I4: the Secret's bytes are in their file (0400, under a 0700 folder) and nowhere else."""
    request = ProvisionRequest(CLAIM, volumes=(SECRET,))
    assert SECRET_BYTES.decode() not in repr(request) and SECRET_BYTES.decode() not in repr(SECRET)
    bad = Volume("creds", "secret", (VolumeFile("../escape", SECRET_BYTES),))
    with pytest.raises(InvalidRequest) as refused:
        start(provider, pod_of(ContainerSpec("main", args=("true",), mounts=(Mount("creds", "/s"),))), bad)
    assert SECRET_BYTES.decode() not in str(refused.value)
    container = ContainerSpec("main", args=("test -r /s/password && echo readable",), mounts=(Mount("creds", "/s"),))
    instance_id = start(provider, pod_of(container), SECRET)
    assert output(provider, instance_id) == b"readable\n"
    path = provider.root / CLAIM
    assert stat.S_IMODE(path.stat().st_mode) == 0o700
    for each in path.rglob("*"):
        if each.is_file() and not each.is_symlink() and each != path / "volumes" / "creds" / "password":
            assert SECRET_BYTES not in each.read_bytes(), each
    assert os.readlink(path / "root" / "s") == "../volumes/creds"
