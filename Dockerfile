# Two images from one file:
#   --target app   foresight serve / operator / warmpool / up: no torch, no Prophet
#   (default)      the trainer: app + the `models` extra (torch, Prophet) and Ray
# BASE: any Debian-like image with python3 >= 3.11 and its venv module. `docker build .` uses
# python:3.11-slim; tests/cluster/build_images.sh builds one from Debian packages (no registry there).
ARG BASE=python:3.11-slim
FROM ${BASE} AS app
# pip's cache stays out of the image; tests/cluster/build_images.sh mounts one at PIP_CACHE_MOUNT,
# and the host's CA bundle at PIP_CA_MOUNT (where PyPI is reached through a TLS proxy).
ARG PIP_CACHE_MOUNT=
ARG PIP_CA_MOUNT=
ENV PATH=/opt/foresight/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY requirements/app.txt ./requirements/app.txt
COPY foresight ./foresight
COPY core ./core
COPY forecaster ./forecaster
COPY adapter ./adapter
COPY warmpool ./warmpool
COPY replay ./replay
COPY kubeoperator ./kubeoperator
# A venv: Debian's python refuses system-wide pip installs (PEP 668). The dependencies at the
# versions and hashes of the lock (requirements/app.txt: an image built tomorrow runs what was
# tested today), then the project without resolving again. Not editable, so the image runs the
# installed package; the check fails the build if a part is missing.
RUN c="--no-cache-dir"; [ -z "$PIP_CACHE_MOUNT" ] || c="--cache-dir=$PIP_CACHE_MOUNT"; \
    [ -z "$PIP_CA_MOUNT" ] || export PIP_CERT="$PIP_CA_MOUNT"; \
    python3 -m venv /opt/foresight \
 && pip install --disable-pip-version-check $c --require-hashes -r requirements/app.txt \
 && pip install --disable-pip-version-check $c --no-deps . \
 && rm -rf /app/build \
 && foresight --help >/dev/null \
 && ! python3 -c "import torch" 2>/dev/null
USER 65532:65532
ENTRYPOINT ["foresight"]

FROM app AS trainer
USER 0
ARG PIP_CACHE_MOUNT=
ARG PIP_CA_MOUNT=
# The CPU wheel of torch (the PyPI one is a CUDA build of about 3 GB); tests/cluster/build_images.sh points this at
# PyPI where only the package registries are reachable.
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
RUN c="--no-cache-dir"; [ -z "$PIP_CACHE_MOUNT" ] || c="--cache-dir=$PIP_CACHE_MOUNT"; \
    [ -z "$PIP_CA_MOUNT" ] || export PIP_CERT="$PIP_CA_MOUNT"; \
    pip install --disable-pip-version-check $c --index-url "$TORCH_INDEX" torch==2.13.0 \
 && pip install --disable-pip-version-check $c '.[models,ray]' \
 && rm -rf /app/build \
 && python3 -c "import torch, prophet"
USER 65532:65532
