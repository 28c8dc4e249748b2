# Gatehouse: one image for every role (web, worker, beat, migrate, fakebank);
# docker-compose.yml picks the command. Default: the web server (daphne, through console/serve.py).
FROM python:3.11-slim

# The source tree in /app is what runs (PYTHONPATH): BASE_DIR is /app and
# demo/langgraph.json is found beside the code.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONPATH=/app \
    DJANGO_SETTINGS_MODULE=console.settings \
    GATEHOUSE_VAR_DIR=/app/var \
    GATEHOUSE_LOG_FORMAT=json

WORKDIR /app

RUN groupadd --system --gid 10001 gatehouse \
 && useradd --system --uid 10001 --gid gatehouse --home-dir /app --shell /usr/sbin/nologin gatehouse

# Dependencies first, in their own layer: a change to the source reuses it. The
# dependency list is read from pyproject.toml (not the package itself, which comes
# with the source below); versions are the ones CI tests with (constraints.txt).
COPY pyproject.toml constraints.txt ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
      > /tmp/requirements.txt \
 && pip install -c constraints.txt -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt

COPY . .
# /app/var/beat: beat's schedule file, a volume in docker-compose.yml (a named volume takes this owner).
RUN mkdir -p /app/var/beat && chown -R gatehouse:gatehouse /app/var

USER gatehouse

# Static files are collected into the image (STATIC_ROOT = /app/var/staticfiles) with hashed
# names and compressed copies; WhiteNoise serves them. The key is a build-time dummy: settings
# refuse to load without one, and nothing signed at build time survives into a container.
# Without DATABASE_URL the settings are embedded mode's, which create empty SQLite files in the
# var dir: collected into a throwaway var dir, only the static files are moved into the image.
RUN GATEHOUSE_VAR_DIR=/tmp/build-var SECRET_KEY=collectstatic-build-only-not-a-secret GATEHOUSE_STATIC_MANIFEST=true \
    python manage.py collectstatic --noinput -v 0 \
 && mv /tmp/build-var/staticfiles /app/var/staticfiles \
 && rm -rf /tmp/build-var

EXPOSE 8000
# Liveness of the web role (compose overrides it per role: worker and beat run
# `manage.py health_check`). Readiness (/health/ready) is for load balancers.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health/live', timeout=4)"]
# daphne through console/serve.py: the same arguments, its access log in GATEHOUSE_LOG_FORMAT (JSON here).
CMD ["python", "-m", "console.serve", "-b", "0.0.0.0", "-p", "8000", "console.asgi:application"]
