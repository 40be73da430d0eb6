#!/usr/bin/env bash
# A PostgreSQL for an Optuna search's study (docs/scaling.md, "Searches across machines"), as the tests
# start one: `scripts/postgres.sh up` prints its URL, `scripts/postgres.sh down` stops it. Debian's
# `postgresql` is installed if missing; the server runs as the `postgres` user from a fresh folder
# (POSTGRES_DIR, default /tmp/scratchgpt-postgres) on a free local port. Both are idempotent.
set -euo pipefail
DIR=${POSTGRES_DIR:-/tmp/scratchgpt-postgres}
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)

as_postgres() { if [ "$(id -un)" = postgres ]; then "$@"; else $SUDO runuser -u postgres -- "$@"; fi; }

bin_dir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }

running() { [ -f "$DIR/data/postmaster.pid" ] && kill -0 "$(head -1 "$DIR/data/postmaster.pid")" 2>/dev/null; }

up() {
  if running; then cat "$DIR/url"; return; fi
  if [ -z "$(bin_dir)" ]; then
    echo "installing Debian's postgresql" >&2
    export DEBIAN_FRONTEND=noninteractive  # no debconf question can wait for an answer
    $SUDO apt-get install -y postgresql >/dev/null || { $SUDO apt-get update >/dev/null && $SUDO apt-get install -y postgresql >/dev/null; }
  fi
  local bin port
  bin=$(bin_dir)
  rm -rf "$DIR" && mkdir -p "$DIR" && $SUDO chown postgres "$DIR"
  as_postgres "$bin/initdb" -D "$DIR/data" -U postgres -A trust >"$DIR/initdb.log"
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  # -w: returns once the server accepts connections; its PID is the first line of postmaster.pid
  as_postgres "$bin/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -o "-p $port -k $DIR -c listen_addresses=127.0.0.1" start >/dev/null
  as_postgres "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres scratchgpt
  echo "postgresql+psycopg://postgres@127.0.0.1:$port/scratchgpt" | tee "$DIR/url"
}

down() {
  if running; then
    local pid
    pid=$(head -1 "$DIR/data/postmaster.pid")
    kill -INT "$pid"  # PostgreSQL's fast shutdown
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -rf "$DIR"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
