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
# Stage 1 exports the lock's run-time requirements (versions and hashes) and builds the project's wheel;
# stage 2 installs those requirements, each file by its hash, then the wheel, offline. The layers follow
# what changes: a change to the sources rebuilds and reinstalls only the project's wheel, the dependencies'
# layer stays cached until uv.lock changes. Every file stage 2 takes from stage 1 comes by COPY, which every
# builder (BuildKit, buildah, podman) keys its cache on: buildah leaves a RUN --mount's source out of it,
# and took a stale install from its cache that way.

ARG PYTHON_IMAGE=python:3.12-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder

ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

WORKDIR /src
COPY pyproject.toml uv.lock ./
COPY .ci/uv.txt ./.ci/uv.txt
# The versions and hashes of uv.lock, nothing resolved here: uv (itself installed by its hashes) writes the
# lock's runtime set out with every file's hash. The image carries the [grpc] extra, so
# OTEL_EXPORTER_OTLP_PROTOCOL=grpc works in it (grpc costs memory only when chosen). The project's wheel is
# built by the lock's setuptools (the group "build", by its hashes), not by whatever version build isolation
# would fetch.
RUN pip install --require-hashes --no-deps -r .ci/uv.txt \
    && mkdir /requirements \
    && uv export --frozen --no-dev --extra grpc --no-emit-project --format requirements-txt --output-file /requirements/locked.txt \
    && uv export --frozen --only-group build --no-emit-project --format requirements-txt --output-file /tmp/build.txt \
    && pip install --require-hashes --no-deps -r /tmp/build.txt
COPY README.md LICENSE ./
COPY se_exporter ./se_exporter
RUN pip wheel --no-build-isolation --no-deps --wheel-dir /wheels .


FROM ${PYTHON_IMAGE}

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
# codes of its hooks. apt's lists and caches go in the same layer: the official images' apt configuration
# keeps no caches, but another Debian base keeps 77 MB of them (/var/cache/apt/*.bin).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install --yes --no-install-recommends tini \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/*

# The dependencies from the package index, each file checked against the lock's hash (this layer changes
# only with uv.lock), then the project's wheel, offline and without resolving anything. The list stays in
# the image: it says what was installed, with the hashes. The wheel (about 270 kB) stays in a layer below
# the install.
COPY --from=builder /requirements/locked.txt /usr/local/share/se-exporter/requirements.txt
RUN pip install --require-hashes --no-deps -r /usr/local/share/se-exporter/requirements.txt
COPY --from=builder /wheels/ /tmp/wheels/
RUN pip install --no-index --no-deps /tmp/wheels/azure_scheduled_events_exporter-*.whl \
    && rm -rf /tmp/wheels

# The labels last: a release's VERSION, REVISION and CREATED change no layer above them.
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
