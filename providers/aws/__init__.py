"""The AWS EC2 provider: one instance per Pod, launched from user-data, watched by tags.

provider   `AwsProvider`: the seam (provision, list, get, terminate, offerings, logs, exec)
inventory  this owner's instances only (owner-tag filters, describe, claim lookup, list)
launch     instance types, tags, ClientToken and RunInstances parameters for one launch
exits      the exit code from the console marker, read once per finished instance
ec2        boto3 clients and the one translation of botocore errors (boto3 lives here and in sqs)
sqs        the interruption queue's SQS client (errors translated by ec2's translation)
notices    EC2's interruption notices read from the queue: the provider's NoticeSource
catalog    the shipped instance-type catalog (catalog.csv) and the choice of types
userdata   the boot script that runs the container; keys  ed25519 connect, host, operator keys
workload   the boot script's run of init, sidecar and app containers; mounts  volumes on the VM
containers roster tags and console markers to per-container facts
status     EC2 facts to `Instance`, tags; classify  refusal -> block scope
logs       serial-console logs; remote  SSH targets and the exec command; options  settings

Imports boto3 lazily (only `ec2` and `sqs` do); imports `providers.ssh` but no other provider. Without
boto3 or asyncssh (the `aws` extra) importing the package raises `providers.extras.MissingExtraError`.
Tests: tests/providers/aws/test_aws.py.
"""

from providers import extras

extras.require("boto3", "botocore", "asyncssh", extra="aws")  # before anything that imports the SDK

from providers.aws.provider import AwsProvider  # noqa: E402

__all__ = ["AwsProvider"]
