# gangsched: `make image` (hack/image.sh), or `docker build -t gangsched:dev .`
#
# Two bases, one recipe (PYTHON_IMAGE): python:3.11-slim by default, or, where no container
# registry is in reach, gangsched-base:bookworm, which `make image` builds from Debian
# bookworm packages (hack/image-base.sh: python3 3.11, python3-venv). Both are bookworm with
# Python 3.11; they differ in where Python lives and in having pip, so gangsched goes into a
# venv at /opt/venv on either.
#
# Stage 1 makes that venv (gangsched and its dependencies from PyPI, .pyc compiled), then
# removes pip, setuptools and wheel from it and cel_expr_python/ext (35 of its 49 MB: CEL
# extensions gangsched does not load). Stage 2 copies the venv alone: no wheel, compiler or
# pip (the base's own pip, python:3.11-slim has one, is uninstalled). It runs as 65532:65532
# and writes nothing outside /tmp (readOnlyRootFilesystem: mount an emptyDir at /tmp, as
# manifests/deployment.yaml does; `make image-test` runs it with --read-only).
# Nothing BuildKit-only (no RUN --mount, no syntax directive to pull): the classic builder
# of a docker without buildx builds it too.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
# PEM certificates trusted by pip in this stage only, for a TLS-intercepting proxy in front of
# PyPI (`make image` passes the host's /usr/local/share/ca-certificates). Never in the image.
ARG EXTRA_CA_CERTS=""
WORKDIR /src
# The dependencies first, from pyproject.toml alone: a layer rebuilt only when they change.
COPY pyproject.toml ./
RUN set -eu; \
    if [ -n "$EXTRA_CA_CERTS" ]; then \
        { cat /etc/ssl/certs/ca-certificates.crt; printf '%s\n' "$EXTRA_CA_CERTS"; } >/etc/pip-ca.pem; \
        printf '[global]\ncert = /etc/pip-ca.pem\n' >/etc/pip.conf; \
    fi; \
    python3 -m venv /opt/venv; \
    /opt/venv/bin/python -c 'import subprocess, sys, tomllib; \
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]; \
subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", *deps])'
COPY README.md ./
COPY operator ./operator
RUN set -eu; \
    /opt/venv/bin/pip install --quiet --no-deps .; \
    rm -rf "$(/opt/venv/bin/python -c 'import cel_expr_python; print(list(cel_expr_python.__path__)[0])')/ext"; \
    /opt/venv/bin/pip uninstall --yes --quiet pip setuptools wheel; \
    /opt/venv/bin/gangsched --version

FROM ${PYTHON_IMAGE}
ARG PYTHON_IMAGE
ARG VERSION=0.1.0
# The repository URL; `make image` passes `git remote get-url origin`.
ARG SOURCE_URL=""
LABEL org.opencontainers.image.title="gangsched" \
      org.opencontainers.image.description="A Kubernetes secondary scheduler for AI/HPC gangs: all-or-nothing, topology-aware placement, bound through the Binding API." \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
COPY --from=build /opt/venv /opt/venv
# Before the venv goes first on PATH: `python3` here is the base's.
RUN set -eu; \
    if python3 -m pip --version >/dev/null 2>&1; then \
        PIP_DISABLE_PIP_VERSION_CHECK=1 python3 -m pip uninstall --yes --quiet pip setuptools wheel; \
    fi; \
    rm -rf /usr/share/python-wheels; \
    groupadd --system --gid 65532 gangsched; \
    useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin gangsched; \
    /opt/venv/bin/gangsched --version
ENV PATH=/opt/venv/bin:$PATH
USER 65532:65532
WORKDIR /tmp
EXPOSE 8080 8081
ENTRYPOINT ["gangsched", "run"]
