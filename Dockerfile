# The one image for every part: `foresight train`, `foresight serve`, `foresight warmpool run`.
# (No container engine runs on the development machines; build this where one does.)
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY foresight ./foresight
COPY forecaster ./forecaster
COPY adapter ./adapter
COPY warmpool ./warmpool
COPY replay ./replay
RUN pip install --no-cache-dir --index-url https://download.pytorch.org/whl/cpu torch==2.13.0 \
 && pip install --no-cache-dir '.[ray]'
USER 65532:65532
ENTRYPOINT ["foresight"]
