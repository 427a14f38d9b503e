#!/bin/sh
# The image's HEALTHCHECK: healthy when the server (or Sentinel) answers PONG on
# its Unix socket. A server loading its AOF or RDB answers LOADING, and one
# without the right password NOAUTH: both count as unhealthy.
reply=$(timeout 2 redis-cli -s /run/redis-lock/redis.sock PING 2>&1)
[ "$reply" = PONG ] && exit 0
echo "redis-lock health check: ${reply:-no answer}"
exit 1
