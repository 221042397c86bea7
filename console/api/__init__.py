"""The REST API (`/api/...`): read-only views of the manager's memory through
`console.runtime`, and one operator action (DELETE of a blocklist entry, staff only).
Modules: `serializers` (shapes), `views` (viewsets), `spend` (the spend report), `pagination`, `urls`.
Tests: tests/console/api/test_api.py.
"""
