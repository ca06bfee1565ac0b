# Shared by scripts/test.sh, scripts/demo.sh and bench/run.sh. Source it.
#
# Everything here is safe on a fresh Debian 12 machine: it installs what is
# missing (as root), never touches a system cluster, and runs PostgreSQL as the
# unprivileged `postgres` OS user on a socket directory and port of its own.

set -euo pipefail

PGQ_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PG_VERSION="${PG_VERSION:-15}"
# PG_BIN: another installation of PostgreSQL 15 (a private copy to test a
# second tree beside the installed one); Debian's by default.
# Absolute: as_pg runs its tools from /.
PG_BIN="$(realpath -ms -- "${PG_BIN:-/usr/lib/postgresql/${PG_VERSION}/bin}")"
export PG_CONFIG="${PG_BIN}/pg_config"

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

# Debian packages the project needs to build, test, demo and benchmark
# (libkrb5-dev: PostgreSQL's libpq/libpq-be.h includes gssapi/gssapi.h;
# chromium: the dashboard's browser tests drive it headless; spin: the
# model of the queues' claim protocol, test/model).
PGQ_PACKAGES=(
  "postgresql-${PG_VERSION}" "postgresql-server-dev-${PG_VERSION}" "postgresql-contrib"
  make g++ cmake clang-format libboost-dev googletest libgtest-dev
  python3 python3-psycopg libipc-run-perl util-linux tzdata libpq-dev libkrb5-dev gnuplot-nox python3-yaml
  chromium spin
)

# Also the brokers' packages (scripts/brokers.sh): the relay is built with
# their client libraries, and its tests run both brokers.
ensure_packages() {
  _ensure_base_packages
  ensure_broker_packages
}

_ensure_base_packages() {
  local missing=()
  for pkg in "${PGQ_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  # The Node client's tests: Node.js and npm, whichever packages brought them
  # (Debian's nodejs and npm, or a Node.js package that bundles npm).
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then missing+=(nodejs npm); fi
  if ((${#missing[@]} == 0)); then return 0; fi
  if [[ $(id -u) -ne 0 ]]; then
    echo "missing packages: ${missing[*]} (run as root, or install them first)" >&2
    exit 1
  fi
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # The postgresql-common package would create and start a system cluster on
  # 5432; we never use it, so ask it not to.
  mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/pgq-no-main.conf
  apt-get install -y -qq "${missing[@]}" >/dev/null
}

# Installs a Node package's locked npm dependencies (DIR/package-lock.json,
# devDependencies included: the dashboard's browser tests and the demo's
# screenshots use puppeteer-core) when they are missing or older than the
# lock file. npm ci leaves node_modules/.package-lock.json behind: without it
# nothing (or not npm) installed node_modules; older than package-lock.json,
# the lock changed since (npm ci starts by removing the old node_modules).
ensure_node_modules() {
  local dir="$1"
  if [[ ! -f $dir/node_modules/.package-lock.json || $dir/package-lock.json -nt $dir/node_modules/.package-lock.json ]]; then
    (cd "$dir" && npm ci --no-audit --no-fund --include=dev)
  fi
}

# Builds and installs the extension into the PostgreSQL installation.
build_and_install() {
  say "building pgq_cpp"
  make -C "$PGQ_ROOT" -s -j2 ${WERROR:+WERROR=$WERROR} >/dev/null
  # install(1) rewrites the file in place; a running cluster that mapped the
  # old library would then crash. Unlinking first keeps it on the old inode.
  rm -f "$("$PG_CONFIG" --pkglibdir)/pgq_cpp.so"
  make -C "$PGQ_ROOT" -s install >/dev/null
}

# What a benchmark measures: the tree as it is (built and installed; a no-op
# when up to date), or with NO_INSTALL=1 the pgq_cpp already installed.
bench_install() {
  ensure_packages
  if [[ ${NO_INSTALL:-0} == 1 ]]; then
    say "NO_INSTALL=1: measuring the pgq_cpp already installed (not building the tree)"
  else
    build_and_install
  fi
}

# The OS user that runs clusters: PostgreSQL refuses to run as root.
PGQ_OS_USER="${PGQ_OS_USER:-postgres}"

# as_user USER CMD...: runs CMD as USER, from the root directory. The one
# place that switches user (as_pg here and as_broker in brokers.sh call it;
# test/python/test_scripts.py checks that nothing else calls runuser). Not
# from the caller's working directory: a clone under /root or in a mktemp -d
# is a directory USER cannot read, and there PostgreSQL's tools say "could
# not change directory ... Permission denied" and Erlang's code server
# (rabbitmqctl) reports eacces for every module it looks up in ".". So hand
# CMD absolute paths only, of files USER may read (not the clone's: give
# them on stdin), and say where it runs when that matters (make -C DIR,
# env -C DIR).
as_user() {
  local user="$1"; shift
  if [[ $(id -un) == "$user" ]]; then
    (cd / && exec "$@")
  else
    (cd / && exec runuser -u "$user" -- "$@")
  fi
}

as_pg() { as_user "$PGQ_OS_USER" "$@"; }

# Settings every benchmark cluster shares: durable commits, and checkpoints
# kept out of the measured seconds. Each bench script adds its autovacuum
# choice and its own lines.
BENCH_DURABLE_CONF=(
  "fsync = on"
  "synchronous_commit = on"
  "full_page_writes = on"
  "shared_buffers = 1GB"
  "max_wal_size = 8GB"
  "checkpoint_timeout = 30min"
  "log_min_messages = warning"
)

# start_cluster DIR PORT [extra postgresql.conf lines...]
# Starts a throwaway cluster in DIR (data in DIR/data, socket in DIR). A
# relative DIR is the caller's (as_pg runs the tools from /).
start_cluster() {
  local dir port="$2"; dir="$(realpath -ms -- "$1")"; shift 2
  mkdir -p "$dir"
  chown "$PGQ_OS_USER" "$dir"
  as_pg "$PG_BIN/initdb" -D "$dir/data" -U postgres --auth=trust --no-sync >/dev/null
  {
    echo "port = $port"
    echo "listen_addresses = ''"
    echo "unix_socket_directories = '$dir'"
    echo "shared_preload_libraries = 'pgq_cpp'"
    echo "max_connections = 50"
    for line in "$@"; do echo "$line"; done
  } | as_pg tee -a "$dir/data/postgresql.conf" >/dev/null
  as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w start >/dev/null
}

stop_cluster() {
  local dir; dir="$(realpath -ms -- "$1")"
  [[ -d "$dir/data" ]] && as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
}

# install_build TREE: installs the built tree TREE (an A/B's builds, in
# turn): the library unlinked first (a running server keeps the old
# inode), and the other build's scripts too (a full install script one
# build has and the other has not would be picked by CREATE EXTENSION).
install_build() {
  rm -f "$("$PG_CONFIG" --pkglibdir)/pgq_cpp.so"
  rm -f "$("$PG_CONFIG" --sharedir)"/extension/pgq_cpp--*.sql
  make -C "$1" -s install >/dev/null
}

# The throwaway brokers of the relay's tests, and their packages.
source "$PGQ_ROOT/scripts/brokers.sh"
