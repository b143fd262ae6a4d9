# Docker for scripts/test: docker_ensure makes sure a Docker daemon answers,
# starting dockerd in the background when we are root and none runs (after
# installing Debian's docker.io when dockerd is missing and apt-get is there); docker_stop stops only a daemon docker_ensure started.
# docker_ensure returns non-zero, with the reason in $docker_reason, when
# no daemon can be had (no docker, not root, or dockerd does not start, as
# in containers without the privileges it needs).

_docker_pid=""
docker_reason=""

docker_ensure() {
  if ! command -v docker >/dev/null 2>&1; then
    docker_reason="the docker command is not installed"
    return 1
  fi
  docker info >/dev/null 2>&1 && return 0
  if ! command -v dockerd >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    # Debian's docker.io brings dockerd (a docker command may be there without it).
    echo "== installing dockerd (apt-get install docker.io)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends docker.io >/dev/null 2>&1 ||
      { apt-get update -qq && apt-get install -y -qq --no-install-recommends docker.io >/dev/null; } ||
      echo "apt-get install docker.io failed" >&2
  fi
  if ! command -v dockerd >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
    docker_reason="no Docker daemon runs and dockerd cannot be started here (not installed, or not root)"
    return 1
  fi
  echo "== starting dockerd"
  local log
  log=$(mktemp)
  dockerd >"$log" 2>&1 &
  _docker_pid=$!
  local _
  for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && return 0
    kill -0 "$_docker_pid" 2>/dev/null || break
    sleep 0.5
  done
  docker_reason="dockerd did not start: $(tail -n 1 "$log")"
  docker_stop
  return 1
}

docker_stop() {
  [ -n "$_docker_pid" ] || return 0
  kill "$_docker_pid" 2>/dev/null || true
  wait "$_docker_pid" 2>/dev/null || true
  _docker_pid=""
}
