# syntax=docker/dockerfile:1
#
# The azure-scheduled-events-exporter image: the se-exporter command, non-root, state in a volume.
#
#   docker build -t azure-scheduled-events-exporter .
#   docker run --rm -p 10160:10160 azure-scheduled-events-exporter demo
#
# The version label is passed in by the release workflow from se_exporter.__version__ (the one place
# the version is written): --build-arg VERSION=<version>. A local build without it is labelled "dev".
#
# Stage 1 builds wheels (the project, and its dependencies at uv.lock's versions and hashes); stage 2 installs them offline
# from a bind mount, so neither the source tree nor the wheels end up in a layer of the final image.

ARG PYTHON_IMAGE=python:3.12-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder

ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

WORKDIR /src
COPY pyproject.toml uv.lock README.md LICENSE ./
COPY .ci/uv.txt ./.ci/uv.txt
COPY se_exporter ./se_exporter
# The versions and hashes of uv.lock, nothing resolved here: uv (itself installed by its hashes) writes the
# lock's runtime set out with every file's hash, and pip fetches only files with those hashes. The image
# carries the [grpc] extra, so OTEL_EXPORTER_OTLP_PROTOCOL=grpc works in it (grpc costs memory only when chosen).
# The project's wheel is built by the lock's setuptools (the group "build", by its hashes), not by whatever
# version build isolation would fetch.
RUN pip install --require-hashes --no-deps -r .ci/uv.txt \
    && uv export --frozen --no-dev --extra grpc --no-emit-project --format requirements-txt --output-file /tmp/locked.txt \
    && uv export --frozen --only-group build --no-emit-project --format requirements-txt --output-file /tmp/build.txt \
    && pip wheel --require-hashes --no-deps --wheel-dir /wheels -r /tmp/locked.txt \
    && pip install --require-hashes --no-deps -r /tmp/build.txt \
    && pip wheel --no-build-isolation --no-deps --wheel-dir /wheels .


FROM ${PYTHON_IMAGE}

ARG PYTHON_IMAGE
ARG VERSION=dev
ARG REVISION=unknown
ARG CREATED=unknown
ARG SOURCE=""

LABEL org.opencontainers.image.title="azure-scheduled-events-exporter" \
      org.opencontainers.image.description="Prometheus exporter and OTLP shipper for Azure Scheduled Events" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    SE_EXPORTER_STATE_FILE=/var/lib/se-exporter/state.db

# Fixed, non-root uid/gid (10160, like the port) so Kubernetes' runAsNonRoot can verify it and
# host directories can be prepared with a known owner.
RUN groupadd --system --gid 10160 se-exporter \
    && useradd --system --uid 10160 --gid 10160 --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin se-exporter \
    && install -d -o 10160 -g 10160 -m 0750 /var/lib/se-exporter

# tini is PID 1: it reaps what a hook's or an action's children leave behind (orphans are re-parented to
# PID 1, and a Python process as PID 1 would leave them zombies against the pod's pid limit) and passes
# SIGTERM on to the exporter. Reaping inside the exporter would race subprocess's own waits for the exit
# codes of its hooks.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install --yes --no-install-recommends tini \
    && rm -rf /var/lib/apt/lists/*

# Offline install of the project's wheel; its dependencies come from the same wheel directory (the lock's).
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels "$(ls /wheels/azure_scheduled_events_exporter-*.whl)[grpc]"

# --state.file lives here; a named volume inherits the directory's 10160 ownership.
VOLUME ["/var/lib/se-exporter"]

USER 10160:10160
EXPOSE 10160

# No curl in the image. The probe finds the port and the scheme as the exporter does: from the flags on
# the entrypoint's command line (--web.listen-address, --web.config.file), else their SE_EXPORTER_*
# variables, else :10160; it bypasses any HTTP(S)_PROXY. Exit 0 healthy, 1 not.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-m", "se_exporter.web.healthcheck"]

ENTRYPOINT ["/usr/bin/tini", "--", "se-exporter"]
