#!/usr/bin/env bash
# Runs compose/docker-compose.yml for real on this machine, with no registry of
# images and no network but loopback, for `make compose-test` (compose/deploy_test.go):
#
#   stack.sh up        install what is missing, start a private dockerd, build the
#                      images, start the stack and wait until every service is healthy
#   stack.sh down      stop the stack, delete its volumes and every image it built,
#                      stop the private dockerd; the cached base image and BuildKit's
#                      cache (layers, Go build cache) stay in $CACHE for the next run
#   stack.sh purge     down, then delete $CACHE: the next up starts cold
#   stack.sh compose … docker compose with the deployment's files and the test override
#   stack.sh docker …  the docker CLI, talking to the private dockerd
#   stack.sh dockerd   only start the private dockerd (to look around)
#
# What it sets up, and why:
# - Debian's docker.io and debootstrap (apt-get, when missing); the compose plugin is
#   built from its Go module (github.com/docker/compose/v5 at $COMPOSE_VERSION).
# - A dockerd of its own (own data root, exec root and socket) with no bridge, no
#   iptables, no forwarding and no masquerading: every container runs with host
#   networking, on loopback ports that compose/docker-compose.test.yml gives them.
# - A Debian bookworm minbase made by debootstrap, imported as the base image and kept
#   in $CACHE (the first run's slow step; later runs reuse it).
# - Stand-ins for postgres:17, redis:7 and haproxy:3.0-alpine built from that base
#   (compose/test/<name>/), tagged with the names the compose file uses, keeping the
#   contract it relies on: POSTGRES_* variables, the data volumes, the health-check
#   commands, the haproxy.cfg path.
# - A Go build image (compose/test/golang/) from the host's Go toolchain with a file
#   GOPROXY holding exactly the modules go.mod needs: containers get no TLS to the
#   module proxy. The repository's own Dockerfile builds taskforge:local from it.
#
# Every step prints "stack: step NAME took N.Ns"; the test reads those lines.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CACHE=${TASKFORGE_COMPOSE_CACHE:-/var/cache/taskforge-compose}
RUN=${TASKFORGE_COMPOSE_RUN:-/run/taskforge-compose}
COMPOSE_VERSION=v5.6.0
COMPOSE_BIN=$CACHE/docker-compose-$COMPOSE_VERSION
BASE_IMAGE=taskforge-compose/debian:bookworm
GO_IMAGE=taskforge-compose/golang:local
STANDINS=(postgres:17 redis:7 haproxy:3.0-alpine)
# Debian's docker CLI: it builds with the daemon's BuildKit without a buildx plugin.
DOCKER_CLI=${TASKFORGE_COMPOSE_DOCKER:-/usr/bin/docker}
export DOCKER_HOST=unix://$RUN/docker.sock DOCKER_BUILDKIT=1
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin

log() { printf 'stack: %s\n' "$*" >&2; }
trap 'log "failed: line $LINENO: $BASH_COMMAND"' ERR

# step NAME CMD... runs CMD and logs how long it took.
step() {
	local name=$1 t0=$EPOCHREALTIME
	shift
	"$@"
	log "step $name took $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')s"
}

docker() { "$DOCKER_CLI" "$@"; }

compose() {
	# An empty env file: a developer's compose/.env must not change the test's stack.
	: >"$RUN/empty.env"
	"$COMPOSE_BIN" --env-file "$RUN/empty.env" --project-directory "$ROOT/compose" \
		-f "$ROOT/compose/docker-compose.yml" -f "$ROOT/compose/docker-compose.test.yml" "$@"
}

install_packages() {
	local missing=()
	[[ -x /usr/sbin/dockerd && -x $DOCKER_CLI ]] || missing+=(docker.io)
	command -v debootstrap >/dev/null || missing+=(debootstrap)
	if ((${#missing[@]} > 0)); then
		log "installing ${missing[*]}"
		apt-get update -q
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
	fi
}

build_compose() {
	[[ -x $COMPOSE_BIN ]] && return 0
	# Built inside the module's own tree, so that its go.mod (replace and exclude
	# directives included) applies, as in its release build.
	local dir src
	# (From outside this module, whose go.mod and go.sum must not change.)
	dir=$(cd "$RUN" && go mod download -json "github.com/docker/compose/v5@$COMPOSE_VERSION" |
		sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
	src=$RUN/compose-src
	rm -rf "$src"
	cp -r "$dir" "$src"
	chmod -R u+w "$src"
	(cd "$src" && CGO_ENABLED=0 go build -trimpath \
		-ldflags "-s -w -X github.com/docker/compose/v5/internal.Version=$COMPOSE_VERSION" \
		-o "$COMPOSE_BIN.tmp" ./cmd)
	mv "$COMPOSE_BIN.tmp" "$COMPOSE_BIN"
	rm -rf "$src"
}

dockerd_running() { [[ -S $RUN/docker.sock ]] && docker version >/dev/null 2>&1; }

start_dockerd() {
	dockerd_running && return 0
	mkdir -p "$RUN" "$CACHE/docker"
	# No bridge and no iptables rules: containers share the host's network namespace
	# and listen on loopback only; nothing is forwarded or masqueraded.
	cat >"$RUN/daemon.json" <<-'JSON'
		{"bridge": "none", "iptables": false, "ip-forward": false, "ip-masq": false}
	JSON
	/usr/sbin/dockerd --config-file "$RUN/daemon.json" --data-root "$CACHE/docker" \
		--exec-root "$RUN/exec" --pidfile "$RUN/dockerd.pid" -H "$DOCKER_HOST" \
		>"$RUN/dockerd.log" 2>&1 &
	local i
	for ((i = 0; i < 600; i++)); do
		dockerd_running && return 0
		kill -0 $! 2>/dev/null || { tail -n 30 "$RUN/dockerd.log" >&2; return 1; }
		sleep 0.1
	done
	log "dockerd did not answer within 60 s"
	tail -n 30 "$RUN/dockerd.log" >&2
	return 1
}

stop_dockerd() {
	[[ -f $RUN/dockerd.pid ]] || return 0
	local pid i
	pid=$(cat "$RUN/dockerd.pid")
	kill "$pid" 2>/dev/null || true
	for ((i = 0; i < 300; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	log "dockerd $pid still runs after 30 s"
	return 1
}

debootstrap_base() {
	[[ -f $CACHE/bookworm-minbase.tar ]] && return 0
	local root=$CACHE/rootfs.tmp
	rm -rf "$root"
	debootstrap --variant=minbase bookworm "$root"
	# As Debian's own container images do: services do not start inside a build,
	# no recommends, no downloaded packages kept.
	printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
	chmod 755 "$root/usr/sbin/policy-rc.d"
	printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' >"$root/etc/apt/apt.conf.d/90container"
	rm -f "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*_Packages
	tar --numeric-owner -C "$root" -cf "$CACHE/bookworm-minbase.tar.tmp" .
	mv "$CACHE/bookworm-minbase.tar.tmp" "$CACHE/bookworm-minbase.tar"
	rm -rf "$root"
}

import_base() {
	docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 && return 0
	docker import -c 'CMD ["bash"]' -c 'ENV LANG=C.UTF-8' "$CACHE/bookworm-minbase.tar" "$BASE_IMAGE" >/dev/null
}

build_go_image() {
	local ctx=$RUN/golang-ctx goroot
	rm -rf "$ctx"
	mkdir -p "$ctx"
	cp "$ROOT/compose/test/golang/Dockerfile" "$ctx/"
	goroot=$(go env GOROOT)
	cp -al "$goroot" "$ctx/go" 2>/dev/null || cp -a "$goroot" "$ctx/go"
	# Exactly the modules the build needs, from the host's module cache first.
	(cd "$ROOT" && GOMODCACHE=$ctx/modcache \
		GOPROXY="file://$(go env GOMODCACHE)/cache/download,$(go env GOPROXY)" go mod download)
	mv "$ctx/modcache/cache/download" "$ctx/goproxy"
	chmod -R u+w "$ctx/modcache" && rm -rf "$ctx/modcache"
	docker build -q --network host --build-arg BASE_IMAGE="$BASE_IMAGE" -t "$GO_IMAGE" "$ctx" >/dev/null
	rm -rf "$ctx"
}

build_standin() {
	local image=$1
	docker build -q --network host --build-arg BASE_IMAGE="$BASE_IMAGE" -t "$image" \
		"$ROOT/compose/test/${image%%:*}" >/dev/null
}

build_taskforge() {
	docker build -q --network host --build-arg BUILD_IMAGE="$GO_IMAGE" \
		-t "taskforge:${TASKFORGE_TAG:-local}" -f "$ROOT/Dockerfile" "$ROOT" >/dev/null
}

# leftovers prints what the stack left in the daemon besides the base image.
leftovers() {
	docker ps -aq
	docker images --format '{{.Repository}}:{{.Tag}}' | grep -vx "$BASE_IMAGE" || true
	docker volume ls -q
	# The daemon's own networks (host, none) are not the stack's.
	docker network ls --format '{{.Name}}' | grep -vx -e host -e none -e bridge || true
}

up() {
	local t0=$EPOCHREALTIME
	mkdir -p "$RUN" "$CACHE"
	step install install_packages
	step compose-plugin build_compose
	step dockerd start_dockerd
	step debootstrap debootstrap_base
	step base-image import_base
	step go-image build_go_image
	local image
	for image in "${STANDINS[@]}"; do
		step "standin-${image%%:*}" build_standin "$image"
	done
	step taskforge-image build_taskforge
	step up-to-healthy compose up -d --no-build --wait --wait-timeout 300
	log "step up-total took $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')s"
	compose ps --format 'table {{.Service}}\t{{.Status}}' >&2
}

down() {
	[[ -d $CACHE/docker ]] || { log "nothing to take down"; return 0; }
	step dockerd start_dockerd
	if [[ -x $COMPOSE_BIN ]]; then
		step compose-down compose down --volumes --remove-orphans --rmi all --timeout 30
	fi
	local image
	for image in "$GO_IMAGE" "${STANDINS[@]}" "taskforge:${TASKFORGE_TAG:-local}"; do
		docker image rm -f "$image" >/dev/null 2>&1 || true
	done
	docker image prune -f >/dev/null
	local left mount
	left=$(leftovers)
	step dockerd-stop stop_dockerd
	# dockerd leaves the host's network namespace bind-mounted in its exec root.
	for mount in $(awk -v run="$RUN/" 'index($2, run) == 1 { print $2 }' /proc/mounts | sort -r); do
		umount "$mount"
	done
	rm -rf "$RUN"
	if [[ -n $left ]]; then
		log "left behind: $(echo $left)"
		return 1
	fi
	log "left behind: nothing but the cached base image $BASE_IMAGE and the build cache ($CACHE)"
}

purge() {
	down
	rm -rf "$CACHE"
	log "deleted $CACHE"
}

# Sourced (to call one step by hand), it only defines the steps.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	case ${1:-} in
	up) up ;;
	down) down ;;
	purge) purge ;;
	compose) shift && compose "$@" ;;
	docker) shift && docker "$@" ;;
	dockerd) mkdir -p "$RUN" && install_packages && start_dockerd ;;
	*)
		echo "usage: $0 up|down|purge|compose ARGS|docker ARGS|dockerd" >&2
		exit 2
		;;
	esac
fi
