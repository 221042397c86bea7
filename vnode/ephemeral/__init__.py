"""Ephemeral containers (`kubectl debug`): their lifecycle, their attach and log streams, and
the process's one budget for the output they keep (I7).
Tests: tests/vnode/test_ephemeral.py, tests/vnode/test_ephemeral_budget.py
"""
