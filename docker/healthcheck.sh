#!/bin/sh
# The image's HEALTHCHECK: healthy when the server (or Sentinel) answers PONG on
# its Unix socket. A server loading its AOF or RDB answers LOADING, and one
# without the right password NOAUTH: both count as unhealthy. The client is
# the image's redis-cli or valkey-cli (docker/cli.sh), which logs in with
# REDIS_PASSWORD.
reply=$(timeout 2 "${REDIS_LOCK_SERVER:-redis}-cli" -s /run/redis-lock/redis.sock PING 2>&1)
[ "$reply" = PONG ] && exit 0
echo "redis-lock health check: ${reply:-no answer}"
exit 1
