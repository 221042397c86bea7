"""Ephemeral containers (`kubectl debug`): their lifecycle, and their attach and log streams.
Tests: tests/vnode/test_ephemeral.py
"""
