#!/usr/bin/env bash
# A RabbitMQ cluster of three nodes on this machine, to try Orbit on a cluster.
#
#   ops/rabbitmq/cluster.sh start          start the nodes and join them into one cluster
#   ops/rabbitmq/cluster.sh url            the ORBIT_AMQP_URL that lists them
#   ops/rabbitmq/cluster.sh status         the cluster as node 1 (or the first one up) sees it
#   ops/rabbitmq/cluster.sh ctl N ARGS...  rabbitmqctl ARGS against node N
#   ops/rabbitmq/cluster.sh stop [N]       stop every node (or node N), keeping the data
#   ops/rabbitmq/cluster.sh kill N         SIGKILL node N, as a crash would
#   ops/rabbitmq/cluster.sh start N        start node N again; it rejoins the cluster
#   ops/rabbitmq/cluster.sh destroy        kill every node and delete the directory
#
# Each node has its own name (NAME-N@localhost), AMQP port, Erlang distribution
# port and data directory, and they share an Erlang cookie of their own, kept in
# the cluster's directory (HOME is pointed there for every RabbitMQ command):
# nothing here can reach, or join, another node of this user, whose cookie is in
# ~/.erlang.cookie. The nodes read no system configuration (/etc/rabbitmq).
#
# Settings (environment):
#   ORBIT_CLUSTER_DIR              everything of the cluster (default: $TMPDIR/orbit-rabbitmq-cluster)
#   ORBIT_CLUSTER_NAME             the nodes are NAME-1@localhost, ... (default: orbit-cluster)
#   ORBIT_CLUSTER_NODES            how many (default: 3)
#   ORBIT_CLUSTER_PORT             AMQP port of node 1; node N listens on PORT+N-1 (default: 5681)
#   ORBIT_CLUSTER_DIST_PORT        distribution port of node 1, likewise (default: 25681)
#   ORBIT_CLUSTER_MANAGEMENT_PORT  when set, the management plugin listens on PORT+N-1
#   RABBITMQ_SCRIPTS               where rabbitmq-server and rabbitmqctl are (default:
#                                  beside the rabbitmqctl on PATH, past a packaging wrapper)
#
# Give every command the same settings. The nodes listen on 127.0.0.1 only (AMQP,
# Erlang distribution, management), and log in as guest/guest. A port in use
# stops a node from starting, with a message that says which.
set -euo pipefail

DIR=${ORBIT_CLUSTER_DIR:-${TMPDIR:-/tmp}/orbit-rabbitmq-cluster}
NAME=${ORBIT_CLUSTER_NAME:-orbit-cluster}
NODES=${ORBIT_CLUSTER_NODES:-3}
PORT=${ORBIT_CLUSTER_PORT:-5681}
DIST_PORT=${ORBIT_CLUSTER_DIST_PORT:-25681}
MANAGEMENT_PORT=${ORBIT_CLUSTER_MANAGEMENT_PORT:-}
WAIT_SECONDS=90

die() { echo "cluster.sh: $*" >&2; exit 1; }
say() { echo "cluster.sh: $*" >&2; }

scripts() {
  if [[ -n ${RABBITMQ_SCRIPTS:-} ]]; then
    echo "$RABBITMQ_SCRIPTS"
    return
  fi
  local ctl
  ctl=$(command -v rabbitmqctl) || die "rabbitmqctl is not on PATH (or set RABBITMQ_SCRIPTS)"
  # Debian's /usr/sbin/rabbitmqctl is a wrapper that runs as the user rabbitmq;
  # its target directory holds the real scripts, which run as whoever calls them.
  dirname "$(readlink -f "$ctl")"
}
BIN=$(scripts)
[[ -x $BIN/rabbitmq-server && -x $BIN/rabbitmqctl ]] || die "no rabbitmq-server in $BIN"

node_name() { echo "$NAME-$1@localhost"; }
node_dir() { echo "$DIR/node-$1"; }
node_port() { echo $((PORT + $1 - 1)); }

check_node() {
  [[ $1 =~ ^[0-9]+$ ]] && (($1 >= 1 && $1 <= NODES)) || die "no node '$1' (1 to $NODES)"
}

# The environment of every RabbitMQ command of node N (the server and the CLI tools).
with_node() {
  local n=$1 dir
  shift
  dir=$(node_dir "$n")
  env HOME="$DIR/home" \
    RABBITMQ_NODENAME="$(node_name "$n")" \
    RABBITMQ_NODE_PORT="$(node_port "$n")" \
    RABBITMQ_DIST_PORT=$((DIST_PORT + n - 1)) \
    RABBITMQ_MNESIA_BASE="$dir/mnesia" \
    RABBITMQ_LOG_BASE="$dir/log" \
    RABBITMQ_CONFIG_FILE="$dir/rabbitmq.conf" \
    RABBITMQ_ADVANCED_CONFIG_FILE="$dir/advanced.config" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins" \
    RABBITMQ_CONF_ENV_FILE="$dir/rabbitmq-env.conf" \
    RABBITMQ_PID_FILE="$dir/rabbitmq.pid" \
    ERL_EPMD_ADDRESS=127.0.0.1 \
    "$@"
}

ctl() {
  local n=$1
  shift
  with_node "$n" "$BIN/rabbitmqctl" -n "$(node_name "$n")" "$@"
}

node_pid() {
  local file
  file="$(node_dir "$1")/rabbitmq.pid"
  [[ -s $file ]] && cat "$file"
}

# Whether process PID is alive (a zombie, killed but not yet reaped, is not).
alive() {
  local state
  state=$(ps -o stat= -p "$1" 2>/dev/null) && [[ $state != Z* ]]
}

running() {
  local pid
  pid=$(node_pid "$1") && alive "$pid"
}

prepare() {
  mkdir -p "$DIR/home"
  chmod 700 "$DIR" "$DIR/home"
  touch "$DIR/.orbit-cluster" # what destroy looks for before it deletes anything
  local cookie="$DIR/home/.erlang.cookie"
  if [[ ! -s $cookie ]]; then
    # 48 letters from 24 random bytes (a cookie is letters; no pipe closed early)
    (umask 077 && od -An -N24 -tx1 /dev/urandom | tr -d ' \n' | tr '0-9a-f' 'A-P' >"$cookie")
    chmod 400 "$cookie"
  fi
  local n dir plugins
  for n in $(seq 1 "$NODES"); do
    dir=$(node_dir "$n")
    mkdir -p "$dir/mnesia" "$dir/log"
    {
      echo "listeners.tcp.default = 127.0.0.1:$(node_port "$n")"
      # On three nodes, the side of a network split with one node stops itself.
      echo "cluster_partition_handling = pause_minority"
      if [[ -n $MANAGEMENT_PORT ]]; then
        echo "management.tcp.ip = 127.0.0.1"
        echo "management.tcp.port = $((MANAGEMENT_PORT + n - 1))"
      fi
    } >"$dir/rabbitmq.conf"
    plugins="[]."
    [[ -n $MANAGEMENT_PORT ]] && plugins="[rabbitmq_management]."
    echo "$plugins" >"$dir/enabled_plugins"
    # Erlang distribution on the loopback too, for the nodes and for the CLI tools
    # (by default both listen on every interface).
    {
      echo "SERVER_ADDITIONAL_ERL_ARGS='-kernel inet_dist_use_interface {127,0,0,1}'"
      echo "CTL_ERL_ARGS='-kernel inet_dist_use_interface {127,0,0,1}'"
    } >"$dir/rabbitmq-env.conf"
  done
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Refuse to boot node N on a port something else listens on (it would not come up).
check_ports() {
  local n=$1 port ports=("$(node_port "$1")" $((DIST_PORT + $1 - 1)))
  [[ -n $MANAGEMENT_PORT ]] && ports+=($((MANAGEMENT_PORT + n - 1)))
  for port in "${ports[@]}"; do
    if port_open "$port"; then
      die "port $port of node $n is in use: choose others (ORBIT_CLUSTER_PORT, ORBIT_CLUSTER_DIST_PORT, ORBIT_CLUSTER_MANAGEMENT_PORT)"
    fi
  done
}

boot() {
  local n=$1
  if running "$n"; then
    say "node $n ($(node_name "$n")) is running already"
    return
  fi
  check_ports "$n"
  rm -f "$(node_dir "$n")/rabbitmq.pid"
  with_node "$n" "$BIN/rabbitmq-server" -detached
}

await_boot() {
  local n=$1
  ctl "$n" wait --timeout "$WAIT_SECONDS" "$(node_dir "$n")/rabbitmq.pid" >/dev/null ||
    die "node $n did not start; see $(node_dir "$n")/log"
}

# Node N joins node 1's cluster, unless it is in it already.
join() {
  local n=$1 first
  first=$(node_name 1)
  if ctl "$n" cluster_status --formatter json | grep -q "\"disk_nodes\":\[[^]]*\"$first\""; then
    return
  fi
  ctl "$n" stop_app >/dev/null
  ctl "$n" join_cluster "$first" >/dev/null
  ctl "$n" start_app >/dev/null
}

start_cluster() {
  prepare
  local n
  # Every node boots at once: after a stop, each waits for the others to come back.
  for n in $(seq 1 "$NODES"); do boot "$n"; done
  for n in $(seq 1 "$NODES"); do await_boot "$n"; done
  for n in $(seq 2 "$NODES"); do join "$n"; done
  ctl 1 await_online_nodes "$NODES" --timeout "$WAIT_SECONDS" >/dev/null
  say "$NODES nodes up and clustered, data in $DIR"
  url
}

start_node() {
  check_node "$1"
  [[ -d $(node_dir "$1") ]] || die "node $1 was never started: run 'start' first"
  boot "$1"
  await_boot "$1"
}

stop_node() {
  check_node "$1"
  running "$1" || return 0
  ctl "$1" shutdown >/dev/null
}

kill_pid() {
  kill -KILL "$1" 2>/dev/null || return 0
  local tries=0
  while alive "$1"; do
    ((++tries < 600)) || die "process $1 did not die"
    sleep 0.05
  done
}

kill_node() {
  check_node "$1"
  local pid
  pid=$(node_pid "$1") || return 0
  kill_pid "$pid"
}

# Every Erlang VM of this cluster, pid file or not (one killed while it started):
# each was started with HOME, hence "-home", in the cluster's directory.
cluster_vms() {
  local proc line
  for proc in /proc/[0-9]*; do
    line=$(tr '\0' ' ' 2>/dev/null <"$proc/cmdline") || continue
    [[ $line == *beam* && $line == *" -home $DIR/home "* ]] && echo "${proc#/proc/}"
  done
  return 0
}

each_node() {
  local action=$1 n pids=()
  for n in $(seq 1 "$NODES"); do
    "$action" "$n" &
    pids+=($!)
  done
  local failed=0
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  return $failed
}

url() {
  local n hosts=""
  for n in $(seq 1 "$NODES"); do hosts+="${hosts:+,}127.0.0.1:$(node_port "$n")"; done
  echo "amqp://guest:guest@$hosts/"
}

first_running() {
  local n
  for n in $(seq 1 "$NODES"); do
    if running "$n"; then
      echo "$n"
      return
    fi
  done
  die "no node is running"
}

command=${1:-}
case $command in
  start)
    if [[ $# -ge 2 ]]; then start_node "$2"; else start_cluster; fi
    ;;
  stop)
    if [[ $# -ge 2 ]]; then stop_node "$2"; else each_node stop_node; fi
    ;;
  kill)
    [[ $# -ge 2 ]] || die "kill which node?"
    kill_node "$2"
    ;;
  status)
    ctl "$(first_running)" cluster_status
    ;;
  ctl)
    [[ $# -ge 3 ]] || die "usage: cluster.sh ctl N ARGS..."
    check_node "$2"
    n=$2
    shift 2
    ctl "$n" "$@"
    ;;
  url)
    url
    ;;
  destroy)
    [[ -e $DIR/.orbit-cluster ]] || die "$DIR is not a cluster's directory: nothing deleted"
    each_node kill_node
    for pid in $(cluster_vms); do kill_pid "$pid"; done
    rm -rf "$DIR"
    ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
