"""One container of a local instance, found by its name, for logs, exec, attach, restart and stop.

Called by `LocalProvider`; reads the instance's records and the container's liveness only. An
empty name is the first app container (a single-container Pod's only one); a name the Pod does
not have is NotFound naming it.
Tests: tests/providers/local/test_local_containers.py.
"""

from __future__ import annotations

from providers.errors import NotFound
from providers.local import folder, pod, sequence
from providers.local.reader import FolderReader
from providers.shape import ContainerFacts, ContainerState


def find(instance: FolderReader, name: str) -> tuple[sequence.Entry, FolderReader]:
    """The container `name` (empty: the first app container) and a reader of its folder."""
    entries = instance.containers()
    if not name:
        entry = next((each for each in entries if each.kind == sequence.APP), entries[0])
    elif len(entries) == 1 and not entries[0].name:
        entry = entries[0]  # a folder made before containers were named: its one container
    else:
        found = [each for each in entries if each.name == name]
        if not found:
            raise NotFound(f"instance {instance.instance_id} has no container {name!r}")
        entry = found[0]
    return entry, instance.container(entry)


def facts(instance: FolderReader, entry: sequence.Entry, container: FolderReader) -> ContainerFacts:
    """The container's facts now; NotFound once the instance is gone."""
    observation = container.observe()
    if observation is None:
        raise NotFound(f"no local instance {instance.instance_id}")
    may_start = sequence.may_start(instance.containers(), entry.name)
    return pod.container_facts(pod.Seen(entry.name, entry.kind, observation, may_start))


def running(instance: FolderReader, name: str) -> tuple[sequence.Entry, FolderReader]:
    """The container `name` if it runs; NotFound (with its state) otherwise."""
    entry, container = find(instance, name)
    if instance.record_of_instance(folder.TERMINATE_FILE) is not None:
        raise NotFound(f"instance {instance.instance_id} is not running (terminating)")
    state = facts(instance, entry, container).state
    if state is not ContainerState.RUNNING:
        raise NotFound(f"container {entry.name!r} of instance {instance.instance_id} is not running ({state.value})")
    return entry, container


def label(entry: sequence.Entry, instance_id: str) -> str:
    """How an error names the container: `container 'x' of instance <id>`."""
    return f"container {entry.name!r} of instance {instance_id}" if entry.name else f"instance {instance_id}"
