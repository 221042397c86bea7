"""The phases of a Pod's life that the Handler runs: provision, status sync, teardown,
lifecycle, give-up, serving, inventory. Never imports the runner, the handler or the controllers.
Tests: tests/vnode/test_controllers.py
"""
