# Nebula's manager: `python manage.py runvnode` as a non-root user (docs/deploy.md).
#   docker build -t nebula:dev .
# Kubernetes probes /healthz and /readyz on the console port, so there is no HEALTHCHECK.
# The build context is an allowlist (.dockerignore): the runtime packages and manage.py.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# -- build: the virtualenv, from wheels only (every pinned requirement ships one, so no
#    compiler is needed here either), and the application's bytecode --------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# The image serves every provider: the core and each cloud SDK's extra (pyproject.toml).
COPY requirements.txt requirements-aws.txt requirements-modal.txt requirements-runpod.txt /tmp/
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --only-binary=:all: --requirement /tmp/requirements.txt \
      --requirement /tmp/requirements-aws.txt --requirement /tmp/requirements-modal.txt \
      --requirement /tmp/requirements-runpod.txt
COPY . /app
RUN /opt/venv/bin/python -m compileall -q /app

# -- runtime: the same slim base, the virtualenv and the application, nothing else ------------
FROM ${PYTHON_IMAGE}
RUN groupadd --system --gid 10001 nebula \
 && useradd --system --uid 10001 --gid nebula --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin nebula
COPY --from=build /opt/venv /opt/venv
COPY --from=build /app /app
# The root filesystem is read-only in deploy/: bytecode is compiled above, state goes to the
# emptyDir the Deployment mounts at /app/.nebula.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /app
USER 10001:10001
EXPOSE 10250 8443 9090
ENTRYPOINT ["python", "manage.py", "runvnode"]
