# Throwaway message brokers for the relay's tests and the cluster test: a
# RabbitMQ node and a NATS server with JetStream, each in a directory of its
# own, on loopback ports of its own. scripts/lib.sh sources it (and its
# ensure_packages calls ensure_broker_packages):
#
#   source scripts/lib.sh
#   start_rabbitmq /tmp/t/rmq 25700          # node pgqtest25700@localhost
#   start_nats /tmp/t/nats 25710             # JetStream on, monitoring on 25711
#   kill9_rabbitmq /tmp/t/rmq; restart_rabbitmq /tmp/t/rmq
#   pause_nats /tmp/t/nats; sleep 10; resume_nats /tmp/t/nats
#   stop_rabbitmq /tmp/t/rmq; stop_nats /tmp/t/nats
#   test/relay/make_certs.sh /tmp/t/certs    # a CA, server and client certificates
#   start_rabbitmq_tls /tmp/t/rmqs 25760 25768 /tmp/t/certs   # amqps:// on 25768
#   start_nats_tls /tmp/t/natss 25770 /tmp/t/certs            # tls:// on 25770
#
# Like lib.sh it never touches a system broker: no service is started by the
# install, no system epmd (4369), AMQP (5672) or NATS (4222) port is used, and
# no file under /etc/rabbitmq or /var/lib/rabbitmq is read. Both brokers run as
# the unprivileged $PGQ_BROKER_USER (default: lib.sh's postgres user; see
# below), in a new session whose leader's PID is recorded in the directory, so
# every stop, kill and check goes by PID, never by name.
#
# Ports. A RabbitMQ node at AMQP port P takes P..P+7: P+1 its private epmd
# (ERL_EPMD_PORT; the Erlang port mapper every node and CLI call on this
# machine would otherwise share on 4369), P+2 its distribution port, P+3..P+7
# the distribution ports of its CLI calls (rabbitmqctl, rabbitmq-diagnostics).
# All on 127.0.0.1. A NATS server at port P takes P and P+1 (monitoring).
#
# Files in a RabbitMQ DIR: rabbitmq.conf, enabled_plugins ("[]."), rabbitmq.env
# (the environment every call for this node runs with), home/.erlang.cookie,
# mnesia/ (the node's data: queues and persistent messages survive a restart),
# log/ (rabbit's log, console.log with its stdout and stderr, epmd.log),
# rabbitmq.pid (the beam.smp's PID) and epmd.pid. In a NATS DIR: nats.conf,
# jetstream/ (the store), nats.log, nats.pid. (Each FILE.pid has a
# FILE.pid.start beside it; read PIDs with rmq_pid DIR and nats_pid DIR.)
#
# A three-node cluster on this machine: the nodes must find each other through
# one epmd and share one cookie, so start them with the same RMQ_EPMD_PORT and
# RMQ_COOKIE (the first start_rabbitmq starts that epmd and owns it: stop that
# node last), AMQP ports 10 apart, then
# `rmq_cli DIR rabbitmqctl stop_app; ... join_cluster NODE1; ... start_app`.
#
# Time, on a two-CPU machine busy with other tests: a RabbitMQ node boots in
# about 7 s (start_rabbitmq waits up to RMQ_START_TIMEOUT, 90 s), stops in
# 2 s, and every CLI call costs an Erlang VM start (about 0.5 s); NATS is up
# in well under a second. test/brokers/smoke.sh takes about 25 s.
#
# Signals: a broker's parent is the runuser that started it (when the caller
# is root), which stays in the caller's process group and passes SIGTERM and
# SIGINT on: a test interrupted, or killed by timeout(1), takes its brokers
# with it. Only a SIGKILL of the test leaves them running (the next start on
# those ports then fails, saying which process holds them).

# Debian packages the brokers need (librabbitmq-dev and libnats-dev: the
# relay's client libraries, rabbitmq-c with publisher confirms and cnats with
# JetStream; openssl: the TLS tests make their certificates with it).
PGQ_BROKER_PACKAGES=(rabbitmq-server nats-server librabbitmq-dev libnats-dev openssl)

# The OS user the brokers run as. lib.sh's postgres user: it is there already
# (postgresql-common creates it), it is unprivileged, and the tests already
# run as root next to it. Not the packages' own rabbitmq or nats users: their
# homes belong to the system services (the system node's cookie is in
# /var/lib/rabbitmq), which we never touch.
PGQ_BROKER_USER="${PGQ_BROKER_USER:-$PGQ_OS_USER}"

RMQ_BIN=/usr/lib/rabbitmq/bin     # Debian's /usr/sbin wrappers refuse any user but root and rabbitmq
RMQ_START_TIMEOUT="${RMQ_START_TIMEOUT:-90}"   # seconds a RabbitMQ boot may take
RMQ_STOP_TIMEOUT="${RMQ_STOP_TIMEOUT:-60}"
NATS_START_TIMEOUT="${NATS_START_TIMEOUT:-30}"

# Ports of a system broker: refused, whatever a caller passes.
_BRK_SYSTEM_PORTS=" 4369 5671 5672 15672 25672 35672 4222 6222 8222 "

# The marker of a policy-rc.d we put there ourselves (see ensure_broker_packages).
_BRK_POLICY_MARK="pgq_cpp ensure_broker_packages"

# From the root directory, as every call as another user (lib.sh's as_user).
as_broker() { as_user "$PGQ_BROKER_USER" "$@"; }

# ---------------------------------------------------------------- packages

# PIDs of system broker daemons (run by the packages' users, or root) and of
# listeners on the system brokers' ports: taken before and after an install,
# so that whatever the install started is known. Not $PGQ_BROKER_USER's:
# a test's own brokers may start meanwhile.
_brk_system_daemons() {
  {
    ps -e -o pid=,user=,comm= | awk '$2 ~ /^(rabbitmq|epmd|nats|root)$/ && $3 ~ /^(beam.smp|epmd|nats-server)$/ { print $1 }'
    ss -Htlnp 2>/dev/null | awk '$4 ~ /:(4369|5672|25672|4222)$/' | grep -o 'pid=[0-9]*' | cut -d= -f2
  } | sort -un || true
}

# Installs the broker packages that are missing, as ensure_packages does.
# Installing rabbitmq-server runs `invoke-rc.d rabbitmq-server start` from its
# postinst (a system node on 5672 and a system epmd on 4369); erlang-base and
# nats-server start epmd.service/nats-server.service where systemd runs. A
# policy-rc.d that exits 101 makes invoke-rc.d and deb-systemd-invoke refuse
# every start. An existing policy-rc.d is kept as it is; ours is removed
# afterwards, also when the install fails, and one left behind by an
# interrupted earlier run is recognised by its marker and removed too.
ensure_broker_packages() {
  local missing=() pkg
  # Ours, left behind by an interrupted run: it would keep every service on
  # the machine from starting.
  if [[ $(id -u) -eq 0 ]] && grep -qs "$_BRK_POLICY_MARK" /usr/sbin/policy-rc.d; then rm -f /usr/sbin/policy-rc.d; fi
  for pkg in "${PGQ_BROKER_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  if ((${#missing[@]} == 0)); then return 0; fi
  if [[ $(id -u) -ne 0 ]]; then
    echo "missing packages: ${missing[*]} (run as root, or install them first)" >&2
    exit 1
  fi
  say "installing ${missing[*]} (no system broker is started)"
  local policy=/usr/sbin/policy-rc.d ours=0 rc=0 before after pid
  if [[ ! -e $policy ]] || grep -q "$_BRK_POLICY_MARK" "$policy"; then
    printf '#!/bin/sh\n# %s: no service starts during the install.\nexit 101\n' "$_BRK_POLICY_MARK" >"$policy"
    chmod 755 "$policy"
    ours=1
  fi
  before="$(_brk_system_daemons)"
  (
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
  ) || rc=$?
  if ((ours)); then rm -f "$policy"; fi
  # Belt and braces: a daemon that appeared during the install was started by
  # it (policy-rc.d not honoured somewhere); stop it by its PID.
  after="$(_brk_system_daemons)"
  for pid in $(comm -13 <(echo "$before") <(echo "$after")); do
    echo "warning: the install started $(ps -o user=,args= -p "$pid" 2>/dev/null) (pid $pid); stopping it" >&2
    kill -TERM "$pid" 2>/dev/null || true
  done
  if ((rc != 0)); then
    echo "installing ${missing[*]} failed (apt-get exit $rc)" >&2
    exit 1
  fi
}

# ---------------------------------------------------------------- helpers

# PID runs (a zombie does not: one whose parent died waits for PID 1 to reap it).
_brk_alive() {
  [[ -n ${1:-} ]] || return 1
  local stat
  stat="$(ps -o stat= -p "$1" 2>/dev/null)" || return 1
  [[ -n $stat && $stat != Z* ]]
}

# _brk_pid PIDFILE: the PID recorded there while that process exists (its
# start time, recorded beside it in PIDFILE.start, tells it from a later
# process that got the same PID: we never signal a stranger).
_brk_pid() {
  local pid
  pid="$(cat "$1" 2>/dev/null)" || return 0
  [[ $pid =~ ^[0-9]+$ && $(_brk_starttime "$pid") == "$(cat "$1.start" 2>/dev/null)" ]] && echo "$pid"
  return 0
}

# The start time of PID in clock ticks since boot (/proc/PID/stat field 22).
_brk_starttime() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | awk '{ print $20 }'; }

# PID and its descendants (beam.smp's erl_child_setup, inet_gethost and disk
# monitor run in sessions of their own, so the tree is what finds them).
_brk_tree_pids() {
  ps -e -o pid=,ppid= | awk -v root="$1" '
    { parent[$1] = $2 }
    END {
      for (p in parent) {
        q = p
        for (i = 0; i < 64 && q != "" && q != 0; i++) { if (q == root) { print p; break } q = parent[q] }
      }
    }'
}

# The PIDs listening on 127.0.0.1:PORT (or any address), if any.
_brk_listener_pids() { ss -Htlnp "sport = :$1" 2>/dev/null | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u || true; }

_brk_port_free() { [[ -z $(ss -Htln "sport = :$1" 2>/dev/null) ]]; }

# _brk_check_ports PORT...: each is a number, none is a system broker's, and
# (unless BRK_ONLY_SYSTEM=1) nothing listens on it.
_brk_check_ports() {
  local port
  for port in "$@"; do
    if ! [[ $port =~ ^[0-9]+$ ]] || ((port < 1024 || port > 65535)); then
      echo "bad port '$port'" >&2; return 1
    fi
    if [[ $_BRK_SYSTEM_PORTS == *" $port "* ]]; then
      echo "port $port belongs to a system broker; pick ports of our own" >&2; return 1
    fi
    if [[ ${BRK_ONLY_SYSTEM:-0} != 1 ]] && ! _brk_port_free "$port"; then
      echo "port $port is in use: $(ss -Htlnp "sport = :$port" | head -n 1)" >&2; return 1
    fi
  done
}

# _brk_wait SECONDS CMD...: runs CMD every 0.2 s until it succeeds; 1 on time-out.
_brk_wait() {
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

# _brk_launch PIDFILE LOG ENVFILE CMD...: starts CMD as the broker user in a
# new session, with nothing but ENVFILE's environment, stdout and stderr
# appended to LOG; PIDFILE gets the PID that CMD keeps (sh execs it, and the
# RabbitMQ and Erlang start scripts exec too). Waits for the PID file.
_brk_launch() {
  local pidfile="$1" log="$2" envfile="$3"; shift 3
  local env=()
  mapfile -t env <"$envfile" || return 1
  rm -f "$pidfile" "$pidfile.start"
  as_broker setsid sh -c 'echo $$ >"$0.tmp" && mv "$0.tmp" "$0" && exec "$@"' "$pidfile" \
    env -i "${env[@]}" "$@" </dev/null >>"$log" 2>&1 &
  # Out of the caller's job table: a test's bare `wait` must not wait for a
  # broker. The caller's shell still reaps it (or runuser, its parent, does).
  disown $!
  _brk_wait 10 test -s "$pidfile" || { echo "$* did not start (see $log)" >&2; return 1; }
  _brk_starttime "$(cat "$pidfile")" >"$pidfile.start"
}

# _brk_end PID SECONDS: waits until PID is gone, SIGKILLs it after SECONDS,
# then SIGKILLs what is left of its helpers (they normally exit with it).
_brk_end() {
  local pid="$1" seconds="$2" p tree
  tree="$(_brk_tree_pids "$pid")"
  if _brk_alive "$pid"; then
    kill -CONT "$pid" 2>/dev/null || true
    _brk_wait "$seconds" eval "! _brk_alive $pid" || kill -KILL "$pid" 2>/dev/null || true
    _brk_wait 10 eval "! _brk_alive $pid" || true
  fi
  sleep 0.2
  for p in $tree; do
    if _brk_alive "$p"; then kill -KILL "$p" 2>/dev/null || true; fi
  done
}

# _brk_boot_failed WHAT SECONDS PID LOG...: says so with the end of its logs
# and ends what was started (PID may be empty).
_brk_boot_failed() {
  local what="$1" seconds="$2" pid="$3"; shift 3
  echo "$what did not start within ${seconds}s; the end of its logs:" >&2
  tail -n 20 "$@" >&2 2>/dev/null || true
  if [[ -n $pid ]]; then _brk_end "$pid" 0; fi
}

# GET http://127.0.0.1:PORT/PATH with bash alone; prints the body, fails on a
# status other than 200 or after BRK_HTTP_TIMEOUT seconds (default 10).
brk_http_get() {
  timeout "${BRK_HTTP_TIMEOUT:-10}" bash -c '
    exec 3<>"/dev/tcp/127.0.0.1/$0" || exit 1
    printf "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" "$1" >&3
    IFS= read -r status <&3
    [[ $status == *" 200 "* ]] || exit 1
    while IFS= read -r line <&3 && [[ $line != $'"'"'\r'"'"' ]]; do :; done
    cat <&3' "$1" "$2"
}

# ---------------------------------------------------------------- RabbitMQ

# rmq_cli DIR TOOL ARGS...: runs a RabbitMQ CLI tool (rabbitmqctl,
# rabbitmq-diagnostics, rabbitmq-queues, rabbitmq-plugins) against DIR's node,
# killed after RMQ_CLI_TIMEOUT seconds (default 120).
rmq_cli() {
  local dir="$1" tool="$2"; shift 2
  local env=()
  mapfile -t env <"$dir/rabbitmq.env"
  as_broker timeout "${RMQ_CLI_TIMEOUT:-120}" env -i "${env[@]}" "$RMQ_BIN/$tool" -n "$(rmq_node "$dir")" "$@"
}

rmq_node() { _rmq_var "$1" RABBITMQ_NODENAME; }
rmq_port() { _rmq_var "$1" PGQ_AMQP_PORT; }
rmq_pid() { _brk_pid "$1/rabbitmq.pid"; }

# start_rabbitmq DIR AMQP_PORT [NODENAME [extra rabbitmq.conf lines...]]
# A RabbitMQ node with everything in DIR, listening on 127.0.0.1:AMQP_PORT;
# user guest/guest (RabbitMQ lets guest in from loopback only, which is where
# we are). NODENAME defaults to pgqtestAMQP_PORT@localhost. RMQ_EPMD_PORT,
# RMQ_DIST_PORT and RMQ_COOKIE override the defaults (P+1, P+2, a random
# cookie kept in DIR). restart_rabbitmq reuses what start_rabbitmq wrote.
# Every function here returns non-zero on failure, also where `set -e` does
# not apply (in an `if`, or behind `||`).
start_rabbitmq() {
  local dir="$1" port="$2" node="${3:-pgqtest$2@localhost}"
  shift 2; (($# > 0)) && shift
  local epmd_port="${RMQ_EPMD_PORT:-$((port + 1))}" dist_port="${RMQ_DIST_PORT:-$((port + 2))}"
  BRK_ONLY_SYSTEM=1 _brk_check_ports "$port" "$epmd_port" "$dist_port" $((port + 3)) $((port + 7)) || return 1
  mkdir -p "$dir/home" "$dir/mnesia" "$dir/log" || return 1
  if [[ ! -f $dir/home/.erlang.cookie ]]; then
    (umask 077; printf '%s' "${RMQ_COOKIE:-$(head -c 30 /dev/urandom | base64 | tr -dc A-Za-z0-9)}" >"$dir/home/.erlang.cookie") || return 1
  fi
  {
    echo "listeners.tcp.default = 127.0.0.1:$port"
    echo "log.file.level = info"
    echo "log.console = false"
    for line in "$@"; do echo "$line"; done
  } >"$dir/rabbitmq.conf"
  echo "[]." >"$dir/enabled_plugins"
  # RABBITMQ_CONF_ENV_FILE: an empty one of ours instead of the system's
  # /etc/rabbitmq/rabbitmq-env.conf. RUNNING_UNDER_SYSTEMD makes
  # rabbitmq-server exec the VM instead of waiting on it, so the PID we
  # record is the beam.smp's. -start_epmd false: the node uses our epmd or
  # fails, it never starts an epmd of its own behind our back.
  : >"$dir/rabbitmq-env.conf"
  cat >"$dir/rabbitmq.env" <<EOF
PATH=/usr/sbin:/usr/bin:/sbin:/bin
LANG=C.UTF-8
LC_ALL=C.UTF-8
HOME=$dir/home
PGQ_AMQP_PORT=$port
RABBITMQ_NODENAME=$node
RABBITMQ_USE_LONGNAME=false
RABBITMQ_CONF_ENV_FILE=$dir/rabbitmq-env.conf
RABBITMQ_CONFIG_FILE=$dir/rabbitmq.conf
RABBITMQ_ADVANCED_CONFIG_FILE=$dir/advanced.config
RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins
RABBITMQ_MNESIA_BASE=$dir/mnesia
RABBITMQ_LOG_BASE=$dir/log
RABBITMQ_PID_FILE=$dir/mnesia/node.pid
RABBITMQ_DIST_PORT=$dist_port
RABBITMQ_CTL_DIST_PORT_MIN=$((port + 3))
RABBITMQ_CTL_DIST_PORT_MAX=$((port + 7))
RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-start_epmd false -kernel inet_dist_use_interface {127,0,0,1}
RABBITMQ_CTL_ERL_ARGS=-start_epmd false -kernel inet_dist_use_interface {127,0,0,1}
ERL_EPMD_PORT=$epmd_port
ERL_EPMD_ADDRESS=127.0.0.1
RUNNING_UNDER_SYSTEMD=true
EOF
  chown -R "$PGQ_BROKER_USER" "$dir" || return 1
  _rmq_launch "$dir"
}

# Starts DIR's epmd unless it is up (ours from an earlier start, or a
# cluster's shared one that another node's DIR owns), then the node, and
# waits until the node has booted and listens. On failure nothing it started
# is left running.
_rmq_launch() {
  local dir="$1" epmd_port dist_port port node pid own_epmd=0
  epmd_port="$(_rmq_var "$dir" ERL_EPMD_PORT)" dist_port="$(_rmq_var "$dir" RABBITMQ_DIST_PORT)"
  port="$(rmq_port "$dir")" node="$(rmq_node "$dir")"
  if _brk_alive "$(rmq_pid "$dir")"; then echo "$node is running already" >&2; return 1; fi
  _brk_check_ports "$port" "$dist_port" || return 1
  if _brk_alive "$(_brk_pid "$dir/epmd.pid")"; then
    :
  elif ! _brk_port_free "$epmd_port"; then
    # Someone else's: a cluster's shared epmd is fine, anything else is not.
    if ! epmd -port "$epmd_port" -names >/dev/null 2>&1; then _brk_check_ports "$epmd_port"; return 1; fi
  else
    _brk_check_ports "$epmd_port" || return 1
    own_epmd=1
    if ! _brk_launch "$dir/epmd.pid" "$dir/log/epmd.log" "$dir/rabbitmq.env" epmd -port "$epmd_port" -address 127.0.0.1 ||
      ! _brk_wait 10 eval "! _brk_port_free $epmd_port"; then
      echo "epmd on $epmd_port did not start (see $dir/log/epmd.log)" >&2
      _rmq_stop_epmd "$dir"
      return 1
    fi
  fi
  # The AMQP listener opens at the end of the boot; then one CLI call
  # confirms that the node says so itself.
  if ! _brk_launch "$dir/rabbitmq.pid" "$dir/log/console.log" "$dir/rabbitmq.env" "$RMQ_BIN/rabbitmq-server" ||
    ! pid="$(rmq_pid "$dir")" ||
    ! _brk_wait "$RMQ_START_TIMEOUT" eval "! _brk_alive $pid || ! _brk_port_free $port" ||
    ! _brk_alive "$pid" ||
    ! rmq_cli "$dir" rabbitmqctl -q await_startup --timeout 30 >/dev/null 2>&1; then
    _brk_boot_failed "RabbitMQ $node" "$RMQ_START_TIMEOUT" "${pid:-}" "$dir/log/console.log" "$dir/log/$node.log"
    if ((own_epmd)); then _rmq_stop_epmd "$dir"; fi
    return 1
  fi
}

_rmq_var() { sed -n "s/^$2=//p" "$1/rabbitmq.env"; }

# DIR's epmd, if DIR started one (a cluster's other nodes use the first
# node's), and an epmd that a CLI call may have started on its port
# (daemonised, so not in our record: it is ours as well).
_rmq_stop_epmd() {
  local dir="$1" epmd_pid p
  [[ -f $dir/epmd.pid ]] || return 0
  epmd_pid="$(_brk_pid "$dir/epmd.pid")"
  if _brk_alive "$epmd_pid"; then
    kill -TERM "$epmd_pid" 2>/dev/null || true
    _brk_end "$epmd_pid" 10
  fi
  for p in $(_brk_listener_pids "$(_rmq_var "$dir" ERL_EPMD_PORT)"); do
    if [[ $(ps -o comm= -p "$p") == epmd ]]; then kill -TERM "$p" 2>/dev/null || true; fi
  done
}

# start_rabbitmq_tls DIR AMQP_PORT TLS_PORT CERTDIR [optional|required]
# start_rabbitmq's node with a TLS listener (amqps://) on 127.0.0.1:TLS_PORT
# besides its plain one on AMQP_PORT (the tests' consumers use that one).
# CERTDIR is test/relay/make_certs.sh's: the node presents server.pem and
# checks a client's certificate against ca.pem; "required" (the default)
# refuses a client without one (fail_if_no_peer_cert), "optional" lets it in.
# The files are copied to DIR/tls, readable by the broker user.
start_rabbitmq_tls() {
  local dir="$1" port="$2" tls_port="$3" certs="$4" peer="${5:-required}"
  BRK_ONLY_SYSTEM=1 _brk_check_ports "$tls_port" || return 1
  _brk_copy_certs "$certs" "$dir/tls" || return 1
  start_rabbitmq "$dir" "$port" "pgqtest$port@localhost" \
    "listeners.ssl.default = 127.0.0.1:$tls_port" \
    "ssl_options.cacertfile = $dir/tls/ca.pem" \
    "ssl_options.certfile = $dir/tls/server.pem" \
    "ssl_options.keyfile = $dir/tls/server.key" \
    "ssl_options.verify = verify_peer" \
    "ssl_options.fail_if_no_peer_cert = $([[ $peer == required ]] && echo true || echo false)" ||
    return 1
  # The TLS listener opens with the plain one; said so, or the boot failed.
  if ! _brk_wait 30 eval "! _brk_port_free $tls_port"; then
    echo "RabbitMQ in $dir: no TLS listener on $tls_port (see $dir/log)" >&2
    stop_rabbitmq "$dir"
    return 1
  fi
}

# _brk_copy_certs CERTDIR DIR: the CA, server certificate and key, readable
# by the broker user only.
_brk_copy_certs() {
  mkdir -p "$2" || return 1
  cp "$1/ca.pem" "$1/server.pem" "$1/server.key" "$2/" || return 1
  chmod 700 "$2" && chmod 600 "$2"/* && chown -R "$PGQ_BROKER_USER" "$2"
}

# stop_rabbitmq DIR: stops the node (rabbitmqctl stop, bounded; then SIGTERM,
# then SIGKILL) and DIR's epmd; removes nothing.
stop_rabbitmq() {
  local dir="$1" pid
  [[ -f $dir/rabbitmq.env ]] || return 0
  pid="$(rmq_pid "$dir")"
  if _brk_alive "$pid"; then
    kill -CONT "$pid" 2>/dev/null || true
    if ! RMQ_CLI_TIMEOUT="$RMQ_STOP_TIMEOUT" rmq_cli "$dir" rabbitmqctl -q stop >/dev/null 2>&1; then
      kill -TERM "$pid" 2>/dev/null || true
    fi
    _brk_end "$pid" 30
  elif [[ -n $pid ]]; then
    _brk_end "$pid" 0
  fi
  _rmq_stop_epmd "$dir"
}

# kill9_rabbitmq DIR: SIGKILL to the node and its helper processes (a crash);
# its epmd stays up, as a machine's epmd would.
kill9_rabbitmq() {
  local pid p
  pid="$(rmq_pid "$1")"
  _brk_alive "$pid" || { echo "RabbitMQ in $1 is not running" >&2; return 1; }
  local tree
  tree="$(_brk_tree_pids "$pid")"
  for p in $tree; do kill -KILL "$p" 2>/dev/null || true; done
  # Every process of the tree, not only the node: a child killed with it may
  # still be exiting a moment later (seen: a shell of the node's, running
  # until its exit, then a zombie).
  local all_gone="true"
  for p in $tree; do all_gone+=" && ! _brk_alive $p"; done
  _brk_wait 10 eval "$all_gone"
}

# restart_rabbitmq DIR: starts DIR's node again with its data (after a
# kill9_rabbitmq or a stop_rabbitmq; a running node is stopped first).
restart_rabbitmq() {
  _brk_alive "$(rmq_pid "$1")" && stop_rabbitmq "$1"
  _rmq_launch "$1"
}

# pause_rabbitmq DIR / resume_rabbitmq DIR: SIGSTOP / SIGCONT to the beam.smp
# (its sockets stay open, nothing answers: a hung broker).
pause_rabbitmq() { kill -STOP "$(rmq_pid "$1")"; }
resume_rabbitmq() { kill -CONT "$(rmq_pid "$1")"; }

# ---------------------------------------------------------------- NATS

nats_port() { sed -n 's/^listen: 127.0.0.1://p' "$1/nats.conf"; }
nats_pid() { _brk_pid "$1/nats.pid"; }

# start_nats DIR PORT [extra nats.conf lines...]
# nats-server with JetStream (store in DIR/jetstream) on 127.0.0.1:PORT, its
# monitoring endpoint on 127.0.0.1:PORT+1 (/healthz, /jsz, /varz).
start_nats() {
  local dir="$1" port="$2"; shift 2
  BRK_ONLY_SYSTEM=1 _brk_check_ports "$port" $((port + 1)) || return 1
  mkdir -p "$dir" || return 1
  {
    echo "server_name: pgqtest$port"
    echo "listen: 127.0.0.1:$port"
    echo "http: 127.0.0.1:$((port + 1))"
    echo "jetstream { store_dir: \"$dir\", max_memory_store: 256MB, max_file_store: 2GB }"
    echo "log_file: \"$dir/nats.log\""
    for line in "$@"; do echo "$line"; done
  } >"$dir/nats.conf"
  printf 'PATH=/usr/sbin:/usr/bin:/sbin:/bin\nHOME=%s\n' "$dir" >"$dir/nats.env"
  chown -R "$PGQ_BROKER_USER" "$dir" || return 1
  _nats_launch "$dir"
}

_nats_launch() {
  local dir="$1" port pid
  port="$(nats_port "$dir")"
  if _brk_alive "$(nats_pid "$dir")"; then echo "NATS in $dir is running already" >&2; return 1; fi
  _brk_check_ports "$port" $((port + 1)) || return 1
  if ! _brk_launch "$dir/nats.pid" "$dir/console.log" "$dir/nats.env" nats-server -c "$dir/nats.conf" ||
    ! pid="$(nats_pid "$dir")" ||
    ! _brk_wait "$NATS_START_TIMEOUT" eval "! _brk_alive $pid || brk_http_get $((port + 1)) '/healthz?js-enabled-only=true' >/dev/null 2>&1" ||
    ! _brk_alive "$pid"; then
    _brk_boot_failed "NATS in $dir" "$NATS_START_TIMEOUT" "${pid:-}" "$dir/console.log" "$dir/nats.log"
    return 1
  fi
}

# start_nats_tls DIR PORT CERTDIR [optional|required]
# start_nats's server, its client port speaking TLS only (tls:// URLs;
# the monitoring port stays plain HTTP): it presents CERTDIR's server.pem;
# "required" (the default) makes it check a client's certificate against
# ca.pem and refuse a client without one (verify: true).
start_nats_tls() {
  local dir="$1" port="$2" certs="$3" peer="${4:-required}"
  _brk_copy_certs "$certs" "$dir/tls" || return 1
  start_nats "$dir" "$port" \
    "tls { cert_file: \"$dir/tls/server.pem\", key_file: \"$dir/tls/server.key\"," \
    "      ca_file: \"$dir/tls/ca.pem\", verify: $([[ $peer == required ]] && echo true || echo false), timeout: 5 }"
}

# stop_nats DIR: SIGTERM (nats-server shuts down cleanly), SIGKILL after 30 s.
stop_nats() {
  local pid
  pid="$(nats_pid "$1")"
  [[ -n $pid ]] || return 0
  kill -CONT "$pid" 2>/dev/null || true
  kill -TERM "$pid" 2>/dev/null || true
  _brk_end "$pid" 30
}

kill9_nats() {
  local pid
  pid="$(nats_pid "$1")"
  _brk_alive "$pid" || { echo "NATS in $1 is not running" >&2; return 1; }
  kill -KILL "$pid"
  _brk_wait 10 eval "! _brk_alive $pid"
}

restart_nats() {
  _brk_alive "$(nats_pid "$1")" && stop_nats "$1"
  _nats_launch "$1"
}

pause_nats() { kill -STOP "$(nats_pid "$1")"; }
resume_nats() { kill -CONT "$(nats_pid "$1")"; }
