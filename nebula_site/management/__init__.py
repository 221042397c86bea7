"""Django management commands: `runvnode`, `devcluster`, `fakecloud`.

Tests: tests/nebula_site/test_make_run.py.
"""
