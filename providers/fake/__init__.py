"""The `fake` provider: an in-memory cloud with scripted faults, for tests, demos and benchmarks.

scenario  offerings, region groups, timings, scripted logs and exec answers (YAML or dict)
faults    refuse / outage / slow / hide (standing) and lose / exit (one-shot); Controls, the
          named control calls (refuse, exit, exit_container, put_file, ...) over inject
records   one instance and its lifecycle (exit, restart, terminate, retention) from the clock
workload  its containers: init containers in order, sidecars, app containers, their exits
ownership which instances a call may see (the owner's; control calls: any)
catalog   which offering takes a new instance, or the refusal that applies
cloud     FakeCloud: the state and the rules, thread-safe, clock injected
calllog   what the cloud was asked and answered
logs      scripted log lines and the LogStream over them
process   scripted exec (echo, cat, test -e, sh -c 'exit N', stty size, ...)
registry  the process-wide registry of in-process clouds by name
wire      the JSON form of seam values and errors
server    the HTTP service (`manage.py fakecloud serve`), state file in `state`
client    its HTTP client
provider  FakeProvider, in-process or over HTTP
command   what `manage.py fakecloud` does

Never imports Django, vnode, placement or another provider.
Tests: tests/providers/fake/test_fake_provider.py.
"""

from providers.fake.provider import FakeProvider

__all__ = ["FakeProvider"]
