#!/usr/bin/env bash
# Prepares a machine for rabbitry's development and tests. Safe to run again: every step checks
# first and does nothing when its result is already there, so a second run takes seconds.
#
#   - A Docker engine answers: nothing container-related is done; tests use the official
#     rabbitmq:4.0-management image (testcontainers pulls it).
#   - No Docker engine (Debian, root): installs podman + runc, writes a containers.conf for them,
#     keeps `podman system service` running on a Docker-compatible socket, and builds three
#     RabbitMQ test images from Debian packages (no container registry needed): RabbitMQ 4.0 from
#     Debian trixie, the one the tests use, RabbitMQ 3.10 from bookworm, the oldest release
#     rabbitry supports, and RabbitMQ 4.3 from forky (Debian testing), the newest, for the
#     compatibility runs of scripts/test.sh.
#   - Always: the virtualenv .venv with `pip install -c constraints.txt -e '.[dev,spark-local]'`, a Java runtime for
#     Spark when none is there, the AsyncAPI 3.0 JSON Schema the tests validate against
#     (scripts/asyncapi_schema.py: the @asyncapi/specs package of the npm registry, pinned), the
#     public definitions files of the definitions corpus test (scripts/definitions_corpus.py:
#     kolla-ansible's and vantage6's releases on PyPI, pinned), and .rabbitry/env.sh with the
#     environment the tests need (scripts/test.sh sources it; so can you).
#
# Settings (environment): PYTHON (interpreter for the venv, default python3),
# RABBITRY_RUN_DIR (podman socket, config and log; default /run/rabbitry),
# RABBITRY_TEST_IMAGE (image the tests run; default depends on the engine, see above).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUN_DIR=${RABBITRY_RUN_DIR:-/run/rabbitry}
SOCKET=$RUN_DIR/podman.sock
CONTAINERS_CONF_FILE=$RUN_DIR/containers.conf
SERVICE_LOG=$RUN_DIR/podman-service.log
SERVICE_PID=$RUN_DIR/podman-service.pid
IMAGE_DIR=$ROOT/rabbitry/testing/image
# Debian suite:RabbitMQ version of each local image; the first is the default test image.
LOCAL_IMAGES=(trixie:4.0 bookworm:3.10 forky:4.3)
DOCKER_IMAGE=rabbitmq:4.0-management
DOCKER_COMPAT_IMAGE=rabbitmq:3.10-management
DOCKER_NEWEST_IMAGE=rabbitmq:4.3-management
VENV=$ROOT/.venv
STATE_DIR=$ROOT/.rabbitry
ENV_FILE=$STATE_DIR/env.sh
PYTHON=${PYTHON:-python3}

log() { printf 'setup: %s\n' "$*" >&2; }
die() {
    printf 'setup: error: %s\n' "$*" >&2
    exit 1
}

as_root() {
    if [[ $EUID -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        sudo "$@"
    else
        die "'$*' needs root (run as root, or install Docker, or set RABBITMQ_URL to a broker you run)"
    fi
}

# Answers when an engine speaking the Docker API listens on the unix socket $1 (GET /_ping).
socket_answers() {
    [[ -S $1 ]] || return 1
    "$PYTHON" - "$1" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
try:
    s.connect(sys.argv[1])
    s.sendall(b"GET /_ping HTTP/1.0\r\nHost: engine\r\n\r\n")
    head = s.recv(64)
except OSError:
    sys.exit(1)
sys.exit(0 if head.split(b" ")[1:2] == [b"200"] else 1)
PY
}

# A Docker engine, not our own podman socket: DOCKER_HOST pointing at that socket (left over from
# sourcing .rabbitry/env.sh) must not make us believe Docker is there and skip the podman upkeep.
docker_engine_answers() {
    local host=${DOCKER_HOST:-}
    if [[ $host == "unix://$SOCKET" ]]; then
        host=
    fi
    if command -v docker >/dev/null; then
        if [[ -n $host ]]; then
            DOCKER_HOST=$host timeout 20 docker info >/dev/null 2>&1
        else
            env -u DOCKER_HOST timeout 20 docker info >/dev/null 2>&1
        fi
    elif [[ -z $host ]]; then
        socket_answers /var/run/docker.sock
    else
        [[ $host == unix://* ]] && socket_answers "${host#unix://}"
    fi
}

apt_install() {
    # $@: packages; installs the missing ones only, and runs `apt-get update` only then.
    local missing=()
    local pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q '^install ok installed$' ||
            missing+=("$pkg")
    done
    ((${#missing[@]})) || return 0
    command -v apt-get >/dev/null || die "missing packages ${missing[*]} and no apt-get to install them"
    log "installing ${missing[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

debian_mirror() {
    local uri=
    if [[ -r /etc/apt/sources.list.d/debian.sources ]]; then
        # deb822: the URIs of the first stanza that is not the security archive.
        uri=$(awk '
            /^[[:space:]]*$/ { if (u != "" && s !~ /security/) { print u; exit } u = ""; s = "" }
            /^URIs:/ { u = $2 }
            /^Suites:/ { s = $0 }
            END { if (u != "" && s !~ /security/) print u }' /etc/apt/sources.list.d/debian.sources |
            head -n1)
    fi
    if [[ -z $uri && -r /etc/apt/sources.list ]]; then
        uri=$(awk '$1 == "deb" {
                for (i = 2; i <= NF; i++) if ($i ~ /^(https?|ftp):/) { print $i; exit }
            }' /etc/apt/sources.list | grep -v security | head -n1 || true)
    fi
    printf '%s\n' "${uri:-http://deb.debian.org/debian}"
}

write_containers_conf() {
    mkdir -p "$RUN_DIR"
    # crun fails on this kind of host (hybrid cgroups, RLIMIT_NOFILE not settable): use runc and
    # let containers inherit the limits instead of setting their own.
    local want
    want=$(printf '%s\n' '[containers]' 'default_ulimits = []' '' '[engine]' 'runtime = "runc"')
    if [[ ! -f $CONTAINERS_CONF_FILE || $(cat "$CONTAINERS_CONF_FILE") != "$want" ]]; then
        printf '%s\n' "$want" >"$CONTAINERS_CONF_FILE"
    fi
}

ensure_podman_service() {
    if socket_answers "$SOCKET"; then
        return 0
    fi
    if [[ -f $SERVICE_PID ]]; then
        # A service we started earlier that no longer answers: replace it.
        local pid
        pid=$(cat "$SERVICE_PID")
        if [[ $(ps -o comm= -p "$pid" 2>/dev/null || true) == podman ]]; then
            log "podman service $pid does not answer; restarting it"
            kill "$pid" 2>/dev/null || true
            sleep 1
        fi
    fi
    rm -f "$SOCKET"
    log "starting podman system service on unix://$SOCKET"
    # setsid + nohup: the service must outlive this script and the shell that ran it. It must
    # not inherit the setup lock (fd 9) either, or it would hold it for as long as it runs.
    setsid nohup podman system service --time=0 "unix://$SOCKET" \
        >>"$SERVICE_LOG" 2>&1 </dev/null 9>&- &
    echo $! >"$SERVICE_PID"
    local _
    for _ in $(seq 1 60); do
        socket_answers "$SOCKET" && return 0
        sleep 0.5
    done
    die "podman system service did not answer on $SOCKET within 30 s; see $SERVICE_LOG"
}

build_base_image() {
    # $1: Debian suite, $2: image name.
    local suite=$1 base=$2 mirror rootfs
    mirror=$(debian_mirror)
    rootfs=$(mktemp -d /var/tmp/rabbitry-rootfs.XXXXXX)
    # shellcheck disable=SC2064  # expand now: the trap must remove this very directory
    trap "remove_rootfs '$rootfs'" EXIT
    log "building $base: debootstrap $suite from $mirror (about a minute)"
    local started=$SECONDS
    # A debootstrap older than the suite has no script for it: testing is bootstrapped like sid.
    local script=()
    [[ -e /usr/share/debootstrap/scripts/$suite ]] || script=(/usr/share/debootstrap/scripts/sid)
    as_root debootstrap --variant=minbase --include=rabbitmq-server "$suite" "$rootfs" "$mirror" \
        "${script[@]}" >"$RUN_DIR/debootstrap-$suite.log" 2>&1 ||
        die "debootstrap failed; see $RUN_DIR/debootstrap-$suite.log"
    as_root rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    as_root tar -C "$rootfs" -c . | podman import --quiet - "$base" >/dev/null
    remove_rootfs "$rootfs"
    trap - EXIT
    log "built $base in $((SECONDS - started)) s"
}

remove_rootfs() {
    local rootfs=$1
    [[ -d $rootfs ]] || return 0
    # debootstrap mounts proc/sys inside the tree; never follow a mount while deleting.
    local mnt
    for mnt in $(awk -v r="$rootfs" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r); do
        as_root umount -l "$mnt" || true
    done
    as_root rm -rf --one-file-system "$rootfs"
}

# The recipe label tells a current image from one built by an older entrypoint or Containerfile.
image_recipe() {
    cat "$IMAGE_DIR/Containerfile" "$IMAGE_DIR/entrypoint.sh" | sha256sum | cut -c1-16
}

local_image() { printf 'localhost/rabbitry-rabbitmq:%s\n' "${1#*:}"; }

ensure_image() {
    # $1: suite:version from LOCAL_IMAGES.
    local suite=${1%%:*} image base recipe have
    image=$(local_image "$1")
    base=localhost/rabbitry-rabbitmq-base:$suite
    recipe=$(image_recipe)
    if podman image exists "$image"; then
        have=$(podman image inspect --format '{{index .Labels "rabbitry.recipe"}}' "$image")
        [[ $have == "$recipe" ]] && return 0
        log "$image is out of date (recipe $have, want $recipe)"
    fi
    podman image exists "$base" || build_base_image "$suite" "$base"
    log "building $image"
    podman build --quiet --pull=never --label "rabbitry.recipe=$recipe" \
        --build-arg "BASE=$base" -t "$image" -f "$IMAGE_DIR/Containerfile" \
        "$IMAGE_DIR" >/dev/null
}

setup_podman() {
    [[ -r /etc/debian_version && $EUID -eq 0 ]] ||
        die "no Docker engine answers, and setting up Podman needs Debian and root:" \
            "start Docker (or Podman's Docker-compatible service), or set RABBITMQ_URL"
    # netavark sets up the bridge network and port mappings with iptables, which podman only
    # recommends: without it every container start fails with "netavark: No such file or directory".
    apt_install podman runc netavark aardvark-dns conmon iptables debootstrap
    as_root mkdir -p "$RUN_DIR"
    write_containers_conf
    export CONTAINERS_CONF=$CONTAINERS_CONF_FILE
    ensure_podman_service
    local each
    for each in "${LOCAL_IMAGES[@]}"; do
        ensure_image "$each"
    done
}

ensure_venv() {
    "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
        die "$PYTHON is older than 3.11; set PYTHON to a newer interpreter"
    if ! "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
        # Debian splits venv/ensurepip out of python3.
        apt_install python3-venv
    fi
    if [[ ! -x $VENV/bin/python ]] || ! "$VENV/bin/python" -c 'import sys' 2>/dev/null; then
        log "creating $VENV"
        "$PYTHON" -m venv --clear "$VENV"
    fi
    local want have=
    want=$({
        cat "$ROOT/pyproject.toml" "$ROOT/constraints.txt"
        "$VENV/bin/python" -VV
        echo "$ROOT [dev,spark-local]"
    } | sha256sum | cut -c1-16)
    [[ -f $VENV/.rabbitry-installed ]] && have=$(cat "$VENV/.rabbitry-installed")
    if [[ $have == "$want" ]] && "$VENV/bin/python" -c 'import rabbitry, testcontainers, pyspark, pyarrow' 2>/dev/null; then
        return 0
    fi
    log "installing rabbitry[dev,spark-local] into $VENV"
    local started=$SECONDS
    "$VENV/bin/python" -m pip install -qq --disable-pip-version-check --upgrade pip
    "$VENV/bin/python" -m pip install -qq --disable-pip-version-check \
        -c "$ROOT/constraints.txt" -e "$ROOT[dev,spark-local]"
    echo "$want" >"$VENV/.rabbitry-installed"
    log "installed in $((SECONDS - started)) s"
}

write_env_file() {
    # $1: engine (docker|podman)
    mkdir -p "$STATE_DIR"
    local tmp
    tmp=$(mktemp "$STATE_DIR/env.sh.XXXXXX")
    {
        echo "# Written by scripts/setup.sh; sourced by scripts/test.sh. Values set before win."
        if [[ $1 == podman ]]; then
            echo "export DOCKER_HOST=\${DOCKER_HOST:-unix://$SOCKET}"
            echo "export CONTAINERS_CONF=\${CONTAINERS_CONF:-$CONTAINERS_CONF_FILE}"
            # The reaper image cannot be pulled here, and testcontainers (which believes it runs
            # inside a container) would otherwise look for a gateway address podman does not report.
            echo "export TESTCONTAINERS_RYUK_DISABLED=\${TESTCONTAINERS_RYUK_DISABLED:-true}"
            echo "export TESTCONTAINERS_CONNECTION_MODE=\${TESTCONTAINERS_CONNECTION_MODE:-docker_host}"
            echo "export RABBITRY_TEST_IMAGE=\${RABBITRY_TEST_IMAGE:-$(local_image "${LOCAL_IMAGES[0]}")}"
            echo "export RABBITRY_COMPAT_IMAGE=\${RABBITRY_COMPAT_IMAGE:-$(local_image "${LOCAL_IMAGES[1]}")}"
            echo "export RABBITRY_NEWEST_IMAGE=\${RABBITRY_NEWEST_IMAGE:-$(local_image "${LOCAL_IMAGES[2]}")}"
        else
            echo "export RABBITRY_TEST_IMAGE=\${RABBITRY_TEST_IMAGE:-$DOCKER_IMAGE}"
            echo "export RABBITRY_COMPAT_IMAGE=\${RABBITRY_COMPAT_IMAGE:-$DOCKER_COMPAT_IMAGE}"
            echo "export RABBITRY_NEWEST_IMAGE=\${RABBITRY_NEWEST_IMAGE:-$DOCKER_NEWEST_IMAGE}"
        fi
    } >"$tmp"
    mv "$tmp" "$ENV_FILE"
}

main() {
    local started=$SECONDS engine
    mkdir -p "$STATE_DIR"
    # One setup at a time on this machine: the podman service and the image are shared.
    exec 9>"${TMPDIR:-/tmp}/rabbitry-setup.lock"
    flock 9

    if docker_engine_answers; then
        engine=docker
        log "a Docker engine answers; using it"
    else
        engine=podman
        setup_podman
    fi
    # The Spark sink's tests run pyspark, which needs a Java runtime (17 is what Spark 4 supports).
    if ! command -v java >/dev/null && command -v apt-get >/dev/null; then
        apt_install openjdk-17-jre-headless
    fi
    # `rabbitry graph` renders with Graphviz.
    if ! command -v dot >/dev/null && command -v apt-get >/dev/null; then
        apt_install graphviz
    fi
    ensure_venv
    # The official AsyncAPI 3.0 JSON Schema `rabbitry asyncapi`'s tests validate against.
    "$VENV/bin/python" "$ROOT/scripts/asyncapi_schema.py" "$STATE_DIR/asyncapi" ||
        die "the AsyncAPI schema could not be installed (see above)"
    # The public definitions files the definitions corpus test takes both ways, made from the
    # releases that publish them (tests/data/definitions/PUBLIC.md).
    "$VENV/bin/python" "$ROOT/scripts/definitions_corpus.py" "$STATE_DIR/definitions-corpus" ||
        die "the public definitions corpus could not be installed (see above)"
    write_env_file "$engine"
    log "ready in $((SECONDS - started)) s (engine: $engine; environment: $ENV_FILE)"
}

main "$@"
