"""What the tests of deploy/ share: rendered manifests, the documented steps, RBAC
and schema checks, the image's config and a container run as the kubelet runs it.
"""
