# Two entry points: `make run` (Nebula on its embedded default) and `make test` (what CI runs).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TOOLS := .tools
KUBECTL_120 := $(TOOLS)/kubectl-1.20/usr/bin/kubectl
DEV_ADDR ?= 127.0.0.1:6443

.PHONY: run test bootstrap tools system-packages lint typecheck contracts pytest clean

$(VENV)/.installed: requirements.txt requirements-aws.txt requirements-modal.txt requirements-runpod.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $@

bootstrap: $(VENV)/.installed

# kubectl 1.20 (SPDY-only, the oldest client we support) from Debian's kubernetes-client.
# Extracted, not installed: the image's own kubectl package owns /usr/bin/kubectl.
$(KUBECTL_120):
	mkdir -p $(TOOLS)/deb
	cd $(TOOLS)/deb && (apt-get download kubernetes-client >/dev/null 2>&1 || \
		(apt-get update >/dev/null && apt-get download kubernetes-client))
	dpkg-deb -x $$(ls $(TOOLS)/deb/kubernetes-client_*.deb | head -n 1) $(TOOLS)/kubectl-1.20
	test -x $@

# Debian packages the tests drive for real: sshd (the SSH exec/logs tests start their own),
# Chromium and its driver (the console's browser tests), PostgreSQL (the console on
# DATABASE_URL; the test runs its own server from a throwaway folder), Prometheus (its
# promtool checks deploy/monitoring's rules and a scrape of the metrics listener).
SYSTEM_PACKAGES := openssh-server chromium chromium-driver postgresql prometheus
system-packages:
	@(command -v /usr/sbin/sshd && command -v chromium && command -v chromedriver && \
		command -v promtool && ls /usr/lib/postgresql/*/bin/postgres) >/dev/null 2>&1 || \
		(apt-get update >/dev/null && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(SYSTEM_PACKAGES) >/dev/null)

tools: $(KUBECTL_120) system-packages

lint: bootstrap
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: bootstrap
	$(VENV)/bin/mypy --strict kube providers devcluster vnode placement console
	$(VENV)/bin/mypy nebula_site

contracts: bootstrap
	$(VENV)/bin/lint-imports

pytest: bootstrap tools
	$(PY) -m pytest --durations=25

test: bootstrap tools lint typecheck contracts pytest

run: bootstrap
	$(PY) manage.py runvnode --dev-cluster --dev-cluster-addr $(DEV_ADDR) --provider local --demo

clean:
	rm -rf $(VENV) $(TOOLS) .nebula .pytest_cache .mypy_cache .ruff_cache
