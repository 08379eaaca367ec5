# Slim, non-root image; `dispatcher run` is PID 1 (exec form) so SIGTERM
# reaches it directly and it drains within the grace period.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DISPATCHER_HOME=/var/lib/dispatcher

WORKDIR /app
COPY pyproject.toml README.md ./
COPY dispatcher ./dispatcher
COPY schema ./schema
RUN pip install --no-cache-dir . \
    && useradd --system --uid 10001 --home-dir /var/lib/dispatcher --create-home dispatcher \
    && rm -rf /app/dispatcher /app/schema

USER 10001
EXPOSE 8080
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)" || exit 1

ENTRYPOINT ["dispatcher", "run"]
CMD ["--http", "0.0.0.0:8080"]
