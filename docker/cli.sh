#!/bin/sh
# The image's client, installed as /usr/local/bin/redis-cli in the Redis image
# and as /usr/local/bin/valkey-cli in the Valkey one, in front of the real one
# in /usr/bin: it logs in with the container's REDIS_PASSWORD, so
# `docker exec <container> redis-cli …` (valkey-cli …) and the health check
# work on a server with a password. An explicit -a, --pass, --user or
# REDISCLI_AUTH wins, as with the real client (valkey-cli 8 reads
# REDISCLI_AUTH too).
if [ -n "${REDIS_PASSWORD:-}" ] && [ -z "${REDISCLI_AUTH:-}" ]; then
  REDISCLI_AUTH=$REDIS_PASSWORD
  export REDISCLI_AUTH
fi
exec "/usr/bin/${REDIS_LOCK_SERVER:-redis}-cli" "$@"
