# Starts and stops the servers the integration tests need. Sourced by
# scripts/test; each service has its own file beside this one.
#
# After services_start the environment carries:
#   BATCHER_AZURITE_URL  blob endpoint of a running Azurite (…/devstoreaccount1)
#   BATCHER_AZURITE_BIN  the azurite-blob executable, for tests that start their own
#   BATCHER_REDIS_ADDR   host:port of a running Redis
#   BATCHER_REDIS_SERVER the redis-server executable, for tests that start their own

_services_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
_services_stops=()

services_start() {
  local f
  for f in "$_services_dir"/svc-*.sh; do
    [ -e "$f" ] || continue
    # shellcheck disable=SC1090
    source "$f"
  done
  declare -F azurite_start >/dev/null && { azurite_start; _services_stops+=(azurite_stop); }
  declare -F redis_start >/dev/null && { redis_start; _services_stops+=(redis_stop); }
  return 0
}

services_stop() {
  local s
  for s in "${_services_stops[@]}"; do "$s" || true; done
}

# free_port prints a TCP port on 127.0.0.1 that nothing listens on.
free_port() {
  python3 - <<'PY' 2>/dev/null || echo $((20000 + RANDOM % 20000))
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
PY
}

# wait_port HOST PORT SECONDS waits until something accepts on HOST:PORT.
wait_port() {
  local host=$1 port=$2 secs=$3 i
  for ((i = 0; i < secs * 10; i++)); do
    if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  return 1
}
