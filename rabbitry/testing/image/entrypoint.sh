#!/bin/sh
# Entrypoint of the RabbitMQ test image built by scripts/setup.sh (Debian's rabbitmq-server).
# It speaks the same environment as the official rabbitmq image, so tests need not know which
# image they run on:
#   RABBITMQ_DEFAULT_USER / RABBITMQ_DEFAULT_PASS / RABBITMQ_DEFAULT_VHOST  (guest/guest, /)
#   RABBITMQ_ERLANG_COOKIE   written to the cookie file (nodes of one cluster need the same one)
#   RABBITMQ_NODENAME        read by rabbitmq-server itself (default rabbit@<hostname>)
#   RABBITMQ_NODE_PORT       read by rabbitmq-server itself (default 5672)
#   RABBITMQ_ENABLED_PLUGINS / RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS  read by rabbitmq-server itself
#                            (rabbitry.testing sets them: the stream plugin and its advertised port)
# and one of its own:
#   RABBITRY_EXTRA_CONFIG    lines appended to rabbitmq.conf (cluster formation and the like)
set -eu

user="${RABBITMQ_DEFAULT_USER:-guest}"
pass="${RABBITMQ_DEFAULT_PASS:-guest}"
vhost="${RABBITMQ_DEFAULT_VHOST:-/}"
data=/var/lib/rabbitmq
logs=/var/log/rabbitmq
conf=/etc/rabbitmq

mkdir -p "$data" "$logs" "$conf"

# Connections arrive from the bridge gateway, not from loopback: guest must be allowed remotely.
{
    echo "loopback_users = none"
    echo "default_user = $user"
    echo "default_pass = $pass"
    echo "default_vhost = $vhost"
    echo "management.tcp.port = 15672"
    if [ -n "${RABBITRY_EXTRA_CONFIG:-}" ]; then
        printf '%s\n' "$RABBITRY_EXTRA_CONFIG"
    fi
} > "$conf/rabbitmq.conf"

echo "[rabbitmq_management,rabbitmq_federation,rabbitmq_federation_management,rabbitmq_shovel,rabbitmq_shovel_management,rabbitmq_consistent_hash_exchange,rabbitmq_sharding,rabbitmq_prometheus,rabbitmq_stream]." \
    > "$conf/enabled_plugins"

if [ -n "${RABBITMQ_ERLANG_COOKIE:-}" ]; then
    printf '%s' "$RABBITMQ_ERLANG_COOKIE" > "$data/.erlang.cookie"
    chmod 400 "$data/.erlang.cookie"
    # The server would also read the variable itself, with a deprecation warning: the file is enough.
    unset RABBITMQ_ERLANG_COOKIE
fi

chown -R rabbitmq:rabbitmq "$data" "$logs" "$conf"

export HOME="$data"
# Logs go to stdout, so `podman logs` / `docker logs` show why a node did not start.
export RABBITMQ_LOGS=-

server=/usr/lib/rabbitmq/bin/rabbitmq-server
# Drop root when the engine lets us (some user-namespace setups do not); root works as well,
# HOME and the cookie are the same either way.
if setpriv --reuid=rabbitmq --regid=rabbitmq --init-groups true 2>/dev/null; then
    exec setpriv --reuid=rabbitmq --regid=rabbitmq --init-groups "$server" "$@"
fi
echo "entrypoint: cannot switch to the rabbitmq user, running as root" >&2
exec "$server" "$@"
