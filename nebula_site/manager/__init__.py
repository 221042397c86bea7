"""The one composition root: the only code that constructs Nebula's pieces and connects them.

- `config`: `ManagerConfig` (built once by `manage.py runvnode`, frozen) and `RunnerOptions`;
- `main`: `main(config, stop)`: start-up, the one leading loop (`lead`), the one ordered stop;
- `startup`: the steps before the loop; `listeners`: the kubelet, console and metrics listeners;
- `leading`: `Leading` (placement, Runners, the console's runtime and mirror) and
  `build_runner`, the one place a `vnode.runner.Runner` is constructed (tests and benches too);
- `sources`: the static and the shared runner sources; `shutdown`: the ordered stop.
Never parses flags or reads settings. Tests: tests/nebula_site/test_manager.py.
"""
