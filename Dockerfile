# One image for all of Orbit: every service, the `orbit` command line and the
# example worker. The command picks what a container runs:
#
#   docker run IMAGE migrate
#   docker run IMAGE service decider            (gateway, dispatcher, timer, …)
#   docker run IMAGE worker examples.workers:worker
#
# Settings come from ORBIT_* environment variables (docs/operations.md); the
# image holds no credentials. compose.yaml runs the whole stack.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    ORBIT_HTTP_HOST=0.0.0.0

RUN groupadd --system --gid 10001 orbit \
    && useradd --system --uid 10001 --gid orbit --home-dir /app --no-create-home \
       --shell /usr/sbin/nologin orbit

WORKDIR /app

# The pinned dependencies first, in their own layer: it is rebuilt only when
# the lock changes, not on every change of Orbit's code.
COPY requirements.lock ./
RUN pip install -r requirements.lock

# Orbit's three distributions (the pure core, the SDK, the server), without
# resolving anything again: the lock is the whole set.
COPY libs ./libs
COPY services ./services
RUN pip install --no-deps ./libs/orbit_model ./libs/orbit_sdk ./services

# The examples stay a plain directory under /app (the working directory):
# `orbit worker examples.workers:worker` imports from it, and a client can
# deploy its workflows.
COPY examples ./examples

USER orbit
EXPOSE 8080
ENTRYPOINT ["orbit"]
CMD ["--help"]
