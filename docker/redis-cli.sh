#!/bin/sh
# redis-cli as /usr/local/bin/redis-cli in the redis-lock image: it logs in with
# the container's REDIS_PASSWORD, so `docker exec <container> redis-cli …` and
# the health check work on a server with a password. An explicit -a, --pass,
# --user or REDISCLI_AUTH wins, as with the real redis-cli.
if [ -n "${REDIS_PASSWORD:-}" ] && [ -z "${REDISCLI_AUTH:-}" ]; then
  REDISCLI_AUTH=$REDIS_PASSWORD
  export REDISCLI_AUTH
fi
exec /usr/bin/redis-cli "$@"
