"""What a Pod reads from the cluster: env, volumes, image pull secrets and the reader of
Secrets and ConfigMaps. Reads only; never writes to the API.
Tests: tests/vnode/test_env.py
"""
