"""Test infrastructure only: a faithful fake of Modal's API server for the real `modal` SDK.

`start_fake_modal()` serves, on 127.0.0.1, the SDK's own gRPC services (grpclib, built on
`modal_proto.api_grpc.ModalClientBase` and `task_command_router_grpc.TaskCommandRouterBase`)
so `modal.Client(fake.url, api_pb2.CLIENT_TYPE_CLIENT, (fake.token_id, fake.token_secret))`
or `MODAL_SERVER_URL=fake.url` + `Client.from_credentials` talks to it unchanged. Images are
recorded (tag, whether a registry secret was given), never pulled: a sandbox's command runs
as a real local process on this machine. State is in memory; the server runs its own asyncio
loop in a background thread.

The SDK must use V1 sandboxes (`MODAL_SANDBOX_V2=0` in the environment): SDK 1.6.4 defaults
to V2 (`SandboxCreateV2`, ...), which this fake does not serve and which refuses `gpu=`.

Methods served (all others answer UNIMPLEMENTED) and the fields honoured:
- ClientHello; AuthTokenGet (an unsigned JWT with `exp`).
- AppGetOrCreate: app_name, environment_name, object_creation_type.
- SecretGetOrCreate: env_dict (ephemeral secrets; named ones answer NOT_FOUND).
- ImageGetOrCreate: image.dockerfile_commands' FROM tag, image_registry_config.secret_id
  (recorded as a bool); ImageJoinStreaming answers success at once.
- SandboxCreate: app_id, tags, definition.entrypoint_args, secret_ids (env), resources
  (milli_cpu, memory_mb, gpu_config.gpu_type/count), scheduler_placement.regions,
  timeout_secs, block_network (legacy) or network_access.network_access_type BLOCKED (SDK
  1.6.4's way), network_access.allowed_cidrs and allowed_domains (`outbound_domain_allowlist`).
- SandboxWait (timeout; SUCCESS for 0, FAILURE otherwise, TERMINATED, TIMEOUT, and for a
  sandbox `FakeModal.preempt` ended INTERNAL_FAILURE with an exception naming the task's
  TaskTerminationReason, e.g. `TASK_TERMINATION_REASON_WORKER_PREEMPTED`),
  SandboxGetTaskId, SandboxList (app_id, tags, include_finished, before_timestamp),
  SandboxTagsSet/Get, SandboxTerminate, SandboxStdinWrite (input, eof),
  SandboxGetLogs (file_descriptor, last_entry_id, timeout, eof), SandboxCreateConnectToken
  (port; a random token and an unreachable URL), TaskGetCommandRouterAccess (a JWT and the
  router URL, plain http on 127.0.0.1, which the SDK allows for a localhost server URL).
- AppFetchLogs, AppCountLogs (`Sandbox.logs.fetch`/`tail`): app_id, task_id, sandbox_id, source,
  search_text, since, until, limit, bucket_secs; entries are the sandboxes' output lines.
- Command router: TaskExecStart (command_args, pty_info with winsz rows/cols, env, secret_ids,
  secret_sources, timeout_secs; runs in the sandbox's folder),
  TaskExecStdinWrite (offset, data, eof), TaskExecStdioRead (offset, fd), TaskExecPoll,
  TaskExecWait (the exit code, or the `signal` that killed it: the SDK reads 128 + N).
Processes as a container's: the sandbox's command and every exec see `MODAL_TASK_ID` (the
task's id, as Modal sets it); a signal sent from an exec to the command (what
`ModalProvider.stop_container` does) ends the sandbox with 128 + N (143, 137) as its
exitcode; when the command ends, its process group and the sandbox's execs are killed.
There is no resource-usage RPC for sandboxes in SDK 1.6.4's api_pb2.
Tests: tests/providers/modal/test_modal_fake_lifecycle.py,
tests/providers/modal/test_modal_fake_exec.py::test_a_signal_from_an_exec_ends_the_sandbox_as_the_kernel_says_and_its_execs_with_it
"""

from providers.modal.fake.fake import FakeModal, start_fake_modal

__all__ = ["FakeModal", "start_fake_modal"]
