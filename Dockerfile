# syntax=docker/dockerfile:1
# gangsched: `docker build -t gangsched:dev .` (or `make image`).
#
# Stage 1 builds wheels of gangsched and all its dependencies; stage 2 installs them from
# a bind mount (no wheel lands in a layer) and removes pip, setuptools and wheel: the
# final image has the interpreter, the site-packages and nothing to build or install with.
# cel_expr_python/ext (35 of its 49 MB: CEL extensions gangsched does not load) is removed.
# It runs as 65532:65532 and writes nothing outside /tmp (readOnlyRootFilesystem: mount an
# emptyDir at /tmp, as manifests/deployment.yaml does).

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip wheel --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
# The repository URL; `make image` passes `git remote get-url origin`.
ARG SOURCE_URL=""
LABEL org.opencontainers.image.title="gangsched" \
      org.opencontainers.image.description="A Kubernetes secondary scheduler for AI/HPC gangs: all-or-nothing, topology-aware placement, bound through the Binding API." \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
# pip compiles the .pyc files at install time, so nothing is written at run time.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 pip install --no-index --find-links=/wheels /wheels/gangsched-*.whl \
    && rm -rf "$(python -c 'import cel_expr_python; print(list(cel_expr_python.__path__)[0])')/ext" \
    && pip uninstall --yes setuptools wheel pip \
    && groupadd --system --gid 65532 gangsched \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin gangsched \
    && gangsched --version
USER 65532:65532
WORKDIR /tmp
EXPOSE 8080
ENTRYPOINT ["gangsched", "run"]
