# Gatehouse: one image for every role (web, worker, beat, migrate, fakebank);
# docker-compose.yml picks the command. Default: the web server (daphne).
FROM python:3.11-slim

# PYTHONPATH: the source tree in /app wins over the installed copy, so
# BASE_DIR is /app and templates/, static/ and demo/langgraph.json are found.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONPATH=/app \
    DJANGO_SETTINGS_MODULE=console.settings \
    GATEHOUSE_VAR_DIR=/app/var

WORKDIR /app

RUN groupadd --system --gid 10001 gatehouse \
 && useradd --system --uid 10001 --gid gatehouse --home-dir /app --shell /usr/sbin/nologin gatehouse

COPY . .
# The versions CI tests with (constraints.txt); the installed copy brings the
# dependencies and console scripts (daphne, celery).
RUN pip install -c constraints.txt . \
 && rm -rf build *.egg-info \
 && mkdir -p /app/var \
 && chown -R gatehouse:gatehouse /app/var

USER gatehouse

# Static files are collected into the image (STATIC_ROOT = /app/var/staticfiles).
# The key is a build-time dummy: settings refuse to load without one, and
# nothing signed at build time survives into a container.
RUN SECRET_KEY=collectstatic-build-only-not-a-secret python manage.py collectstatic --noinput -v 0

EXPOSE 8000
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "console.asgi:application"]
