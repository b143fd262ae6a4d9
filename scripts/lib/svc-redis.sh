# Redis, for the redislease integration tests. Sourced by services.sh (which
# defines free_port and wait_port).
#
# redis_start uses, in order: the server in BATCHER_REDIS_ADDR if it answers
# PING, one on 127.0.0.1:6379 if it answers, or a redis-server it starts on a
# free port (installing Debian's redis-server first when it is missing and we
# are root). redis_stop stops only a server that redis_start started.
#
# redis_start exports:
#   BATCHER_REDIS_ADDR    host:port of a Redis that answers PING
#   BATCHER_REDIS_SERVER  absolute path of redis-server, for the fault tests
#                         that start and kill servers of their own

_redis_pid=""
_redis_dir=""

# redis_ping HOST PORT succeeds when a Redis there answers PING with PONG. It
# falls back to a raw RESP exchange over bash's /dev/tcp without redis-cli.
redis_ping() {
  local host=$1 port=$2
  if command -v redis-cli >/dev/null 2>&1; then
    [ "$(timeout 3 redis-cli -h "$host" -p "$port" ping 2>/dev/null)" = "PONG" ]
    return
  fi
  timeout 3 bash -c '
    exec 3<>"/dev/tcp/$0/$1" || exit 1
    printf "PING\r\n" >&3
    IFS= read -r line <&3 || exit 1
    [[ $line == +PONG* ]]' "$host" "$port" 2>/dev/null
}

# redis_ensure_server sets BATCHER_REDIS_SERVER, installing redis-server with
# apt-get when it is missing and we may.
redis_ensure_server() {
  if ! command -v redis-server >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "== installing redis-server (apt-get)"
      DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null ||
        echo "redis: apt-get install redis-server failed" >&2
    else
      echo "redis: redis-server is not installed and we cannot install it (not root or no apt-get)" >&2
    fi
  fi
  if command -v redis-server >/dev/null 2>&1; then
    BATCHER_REDIS_SERVER="$(command -v redis-server)"
    export BATCHER_REDIS_SERVER
    return 0
  fi
  return 1
}

redis_start() {
  local addr port i
  # The fault tests start servers of their own, so the binary is needed even
  # when a running server is reused.
  redis_ensure_server || true

  if [ -n "${BATCHER_REDIS_ADDR:-}" ]; then
    if redis_ping "${BATCHER_REDIS_ADDR%:*}" "${BATCHER_REDIS_ADDR##*:}"; then
      echo "== redis: using BATCHER_REDIS_ADDR=$BATCHER_REDIS_ADDR"
      return 0
    fi
    echo "redis: BATCHER_REDIS_ADDR=$BATCHER_REDIS_ADDR does not answer PING; looking elsewhere" >&2
  fi
  if redis_ping 127.0.0.1 6379; then
    export BATCHER_REDIS_ADDR="127.0.0.1:6379"
    echo "== redis: using the server on $BATCHER_REDIS_ADDR"
    return 0
  fi

  if [ -z "${BATCHER_REDIS_SERVER:-}" ]; then
    echo "redis: no server answers and there is no redis-server to start" >&2
    return 1
  fi
  _redis_dir="$(mktemp -d "${TMPDIR:-/tmp}/batcher-redis.XXXXXX")"
  port="$(free_port)"
  # It runs in a scratch directory without persistence, so nothing lands in
  # the tree and a restart always comes back empty.
  (cd "$_redis_dir" && exec "$BATCHER_REDIS_SERVER" --port "$port" --bind 127.0.0.1 \
    --save "" --appendonly no --daemonize no --dir "$_redis_dir") \
    >"$_redis_dir/redis.log" 2>&1 &
  _redis_pid=$!
  addr="127.0.0.1:$port"
  for ((i = 0; i < 100; i++)); do
    kill -0 "$_redis_pid" 2>/dev/null || break
    if wait_port 127.0.0.1 "$port" 1 && redis_ping 127.0.0.1 "$port"; then
      export BATCHER_REDIS_ADDR="$addr"
      echo "== redis: $("$BATCHER_REDIS_SERVER" --version | cut -d' ' -f3) started on $addr (pid $_redis_pid)"
      return 0
    fi
    sleep 0.1
  done
  echo "redis: redis-server did not start on $addr; its log:" >&2
  cat "$_redis_dir/redis.log" >&2 || true
  redis_stop
  return 1
}

redis_stop() {
  if [ -n "$_redis_pid" ]; then
    kill "$_redis_pid" 2>/dev/null || true
    wait "$_redis_pid" 2>/dev/null || true
    _redis_pid=""
  fi
  if [ -n "$_redis_dir" ]; then
    rm -rf "$_redis_dir"
    _redis_dir=""
  fi
  return 0
}
