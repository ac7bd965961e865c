# syntax=docker/dockerfile:1
# Production image of the MetaService server: `docker compose up` (see docker-compose.yml) or
#   docker build -t metaservice . && docker run -e METASERVICE_DATABASE_URL=postgresql://… -p 8080:8080 metaservice
# Only the server's runtime dependencies are installed: the `server` extra, no `dev`, `spark` or table-format extras.

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY metaservice ./metaservice
COPY migrations ./migrations
COPY spark_client ./spark_client
RUN pip install --upgrade pip && pip install '.[server]'

FROM python:3.11-slim
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    METASERVICE_PORT=8080 \
    METASERVICE_AUTH_ENABLED=true \
    METASERVICE_LOG_JSON=true
RUN groupadd --system --gid 10001 metaservice \
 && useradd --system --uid 10001 --gid metaservice --create-home --home-dir /home/metaservice \
            --shell /usr/sbin/nologin metaservice
# The Alembic scripts are inside the installed package, as `metaservice.migrations` (setup.py).
COPY --from=build /opt/venv /opt/venv
USER metaservice
WORKDIR /home/metaservice
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('METASERVICE_PORT', '8080'), timeout=4)"]
# `serve` applies the migrations, then serves. Off loopback it requires bearer tokens (METASERVICE_AUTH_ENABLED
# above); create the first one with `docker compose exec metaservice metaservice token create admin --role admin`.
CMD ["metaservice", "serve", "--host", "0.0.0.0"]
