# rabbitry in a container: `rabbitry reconcile` next to a RabbitMQ cluster (docs/operator.md).
#
#   docker build -t rabbitry .            (or podman build)
#   docker run --rm rabbitry --version
#
# BASE: any Debian-like image; python:3.11-slim by default. One without python3 and venv
# (a plain Debian) gets them from its apt sources. Behind a TLS-intercepting proxy, give its
# CA bundle to pip as a build secret: --secret id=pip-ca,src=/path/to/ca-bundle.crt
ARG BASE=python:3.11-slim
FROM ${BASE}

RUN if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then \
        apt-get update \
        && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && python3 -m venv /opt/rabbitry

COPY pyproject.toml README.md LICENSE /src/
COPY rabbitry /src/rabbitry
RUN --mount=type=secret,id=pip-ca \
    if [ -s /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi \
    && /opt/rabbitry/bin/pip install --no-cache-dir --disable-pip-version-check '/src[metrics]' \
    && rm -rf /src \
    && useradd --system --uid 10001 --no-create-home rabbitry

ENV PATH=/opt/rabbitry/bin:$PATH
USER 10001
# reconcile's /healthz, /readyz, /metrics and POST /reconcile
EXPOSE 8080
ENTRYPOINT ["rabbitry"]
CMD ["--help"]
