"""The pure Pod model: the tracked record and its map, runs, status, container status, probe
state and spec, the decisions and the assessment. Imports no other part of vnode and does no I/O.
Tests: tests/vnode/test_status.py
"""
