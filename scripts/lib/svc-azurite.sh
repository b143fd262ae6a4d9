# Azurite, the Azure Storage emulator, for the AzureSharedResource integration
# tests. Sourced by services.sh (which defines free_port and wait_port). The
# emulator version is pinned in tools/azurite/package-lock.json; it listens on
# 127.0.0.1 only, keeps everything in memory and sends no telemetry.
#
# azurite_start exports:
#   BATCHER_AZURITE_URL  http://127.0.0.1:PORT/devstoreaccount1
#   BATCHER_AZURITE_BIN  absolute path of the azurite-blob executable

_azurite_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
_azurite_pid=""
_azurite_dir=""

azurite_start() {
  local tools="$_azurite_root/tools/azurite" bin port
  bin="$tools/node_modules/.bin/azurite-blob"
  if [ ! -x "$bin" ]; then
    echo "== installing azurite (npm ci in tools/azurite)"
    (cd "$tools" && npm ci --no-audit --no-fund) || {
      echo "azurite: npm ci failed in $tools" >&2
      return 1
    }
  fi
  _azurite_dir="$(mktemp -d "${TMPDIR:-/tmp}/batcher-azurite.XXXXXX")"
  port="$(free_port)"
  # It runs from a scratch directory so that nothing it writes lands in the
  # tree (--location cannot be combined with --inMemoryPersistence), and
  # --skipApiVersionCheck lets an SDK newer than the emulator talk to it.
  (cd "$_azurite_dir" && exec "$bin" --blobHost 127.0.0.1 --blobPort "$port" \
    --inMemoryPersistence --disableTelemetry --skipApiVersionCheck --loose) \
    >"$_azurite_dir/azurite.log" 2>&1 &
  _azurite_pid=$!
  if ! _azurite_wait "$port" 60; then
    echo "azurite: did not start on 127.0.0.1:$port; its log:" >&2
    cat "$_azurite_dir/azurite.log" >&2 || true
    azurite_stop
    return 1
  fi
  export BATCHER_AZURITE_URL="http://127.0.0.1:$port/devstoreaccount1"
  export BATCHER_AZURITE_BIN="$bin"
  echo "== azurite $("$bin" --version 2>/dev/null) on 127.0.0.1:$port (pid $_azurite_pid)"
}

# _azurite_wait PORT SECONDS waits for the port while the process lives, so a
# crash at start-up fails at once instead of after the whole timeout.
_azurite_wait() {
  local i
  for ((i = 0; i < $2; i++)); do
    kill -0 "$_azurite_pid" 2>/dev/null || return 1
    wait_port 127.0.0.1 "$1" 1 && return 0
  done
  return 1
}

azurite_stop() {
  if [ -n "$_azurite_pid" ]; then
    kill "$_azurite_pid" 2>/dev/null || true
    wait "$_azurite_pid" 2>/dev/null || true
    _azurite_pid=""
  fi
  if [ -n "$_azurite_dir" ]; then
    rm -rf "$_azurite_dir"
    _azurite_dir=""
  fi
  return 0
}
