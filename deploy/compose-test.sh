#!/usr/bin/env bash
# Prepares a Docker engine for `make compose-test`, then runs the command given
# (the Makefile passes the go test of e2e/composeup) with the variables it reads:
#
#   1. the engine: starts dockerd when it is installed but not running; fails with
#      the install command when there is none;
#   2. the compose tool: `docker compose` (v2), built from its Go module
#      (COMPOSE_VERSION) into Docker's plugin directory when it is missing;
#   3. the base images: for every *_IMAGE variable that is not set, a stand-in
#      built here from Debian's packages (deploy/standins/), once: an image is
#      rebuilt only when its Dockerfile or files change. With all of them set,
#      for example to the official images on a machine that can pull them,
#      nothing is built and debootstrap is not needed;
#   4. a compose project name and published ports that collide neither with a
#      developer's own PostgreSQL (5432), RabbitMQ (5672) and shop (8081 and up),
#      nor with `make up`'s project.
set -euo pipefail
shopt -s inherit_errexit # a failed build inside $(standin ...) stops the script
cd "$(dirname "$0")/.."

COMPOSE_VERSION=${COMPOSE_VERSION:-v2.40.3}
say() { echo "compose-test: $*"; }
die() { echo "compose-test: $*" >&2; exit 1; }

# 1. The engine.
if ! docker info >/dev/null 2>&1; then
  command -v dockerd >/dev/null 2>&1 ||
    die "no Docker engine: install one (Debian: apt-get install -y docker.io), or start yours"
  say "starting dockerd (log: /var/log/shop-dockerd.log)"
  setsid dockerd >/var/log/shop-dockerd.log 2>&1 </dev/null &
  for ((i = 0; i < 60; i++)); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  docker info >/dev/null 2>&1 || { tail -20 /var/log/shop-dockerd.log >&2; die "dockerd did not answer within 60s"; }
fi

# 2. The compose tool.
if ! docker compose version >/dev/null 2>&1; then
  plugins=/usr/local/lib/docker/cli-plugins
  [ -w "$(dirname "$plugins")" ] || plugins=$HOME/.docker/cli-plugins
  say "building docker compose $COMPOSE_VERSION into $plugins (once)"
  src=$(go mod download -json "github.com/docker/compose/v2@$COMPOSE_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -d "$src" ] || die "could not download github.com/docker/compose/v2@$COMPOSE_VERSION"
  mkdir -p "$plugins"
  # Built in its own module (its go.mod has replace directives `go install` refuses).
  (cd "$src" && GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION" \
    -o "$plugins/docker-compose" ./cmd)
  docker compose version >/dev/null || die "docker compose $COMPOSE_VERSION does not run"
fi
say "$(docker compose version)"

# 3. The base images.
base=shop-standin/debian:bookworm
base_recipe="debootstrap --variant=minbase --include=ca-certificates bookworm"

# label prints the shop.standin label of image, empty when there is no such image.
label() { docker image inspect -f '{{index .Config.Labels "shop.standin"}}' "$1" 2>/dev/null || true; }

base_image() {
  local sum
  sum=$(echo "$base_recipe" | sha256sum | cut -c1-16)
  [ "$(label "$base")" = "$sum" ] && return
  command -v debootstrap >/dev/null 2>&1 ||
    die "the stand-in images are built with debootstrap: install it (Debian: apt-get install -y debootstrap), or set POSTGRES_IMAGE, RABBITMQ_IMAGE, PROMETHEUS_IMAGE, GO_IMAGE and RUNTIME_IMAGE"
  # Debian's mirror as apt is configured to reach it.
  local mirror
  # (grep fails on a missing file, which is no error here: either list may be absent.)
  mirror=$({ grep -hsoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list || true; } |
    head -1 | awk '{print $2}')
  mirror=${mirror:-http://deb.debian.org/debian}
  local root
  root=$(mktemp -d)
  say "building $base with debootstrap from $mirror (once)"
  $base_recipe "$root" "$mirror" >"$root.log" 2>&1 ||
    { tail -20 "$root.log" >&2; rm -rf "$root" "$root.log"; die "debootstrap failed"; }
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | docker import -c "LABEL shop.standin=$sum" -c 'CMD ["bash"]' - "$base" >/dev/null
  rm -rf "$root" "$root.log"
}

# standin NAME TAG CONTEXT: builds shop-standin/NAME:TAG from deploy/standins/NAME
# unless an image with the same inputs exists; prints the image's name.
standin() {
  local name=$1 tag=$2 context=$3 dir=deploy/standins/$1 image=shop-standin/$1:$2 sum
  sum=$({
    cat "$dir"/*
    cat "$context"/ca/* 2>/dev/null || true
    docker image inspect -f '{{.Id}}' "$base"
    if [ "$name" = golang ]; then go version; fi
  } | sha256sum | cut -c1-16)
  if [ "$(label "$image")" != "$sum" ]; then
    say "building $image" >&2
    # The classic builder: the stand-ins need no BuildKit, and the CLI may lack buildx.
    DOCKER_BUILDKIT=0 docker build -q --label "shop.standin=$sum" --build-arg "BASE_IMAGE=$base" -f "$dir/Dockerfile" -t "$image" "$context" >/dev/null
  fi
  echo "$image"
}

skip=()
if [ -z "${POSTGRES_IMAGE:-}" ] || [ -z "${RABBITMQ_IMAGE:-}" ] || [ -z "${PROMETHEUS_IMAGE:-}" ] ||
  [ -z "${GO_IMAGE:-}" ] || [ -z "${RUNTIME_IMAGE:-}" ]; then
  base_image
fi
[ -n "${POSTGRES_IMAGE:-}" ] || POSTGRES_IMAGE=$(standin postgres 15 deploy/standins/postgres)
[ -n "${RABBITMQ_IMAGE:-}" ] || RABBITMQ_IMAGE=$(standin rabbitmq 3.10-management deploy/standins/rabbitmq)
[ -n "${PROMETHEUS_IMAGE:-}" ] || PROMETHEUS_IMAGE=$(standin prometheus 2.42 deploy/standins/prometheus)
if [ -z "${GO_IMAGE:-}" ]; then
  # The Go stand-in's context: this machine's Go and the certificate authorities
  # it adds to Debian's (hard links where /tmp shares GOROOT's file system).
  goctx=$(mktemp -d)
  trap 'rm -rf "$goctx"' EXIT
  mkdir "$goctx/ca"
  cp -al "$(go env GOROOT)" "$goctx/go" 2>/dev/null || cp -a "$(go env GOROOT)" "$goctx/go"
  cp /usr/local/share/ca-certificates/*.crt "$goctx/ca/" 2>/dev/null || true
  GO_IMAGE=$(standin golang "$(go env GOVERSION | sed 's/^go//')" "$goctx")
fi
[ -n "${RUNTIME_IMAGE:-}" ] || RUNTIME_IMAGE=$(standin static nonroot deploy/standins/static)
# Jaeger and Grafana are not packaged by Debian: without an image for them, the
# test starts every other service, and the processes export no spans.
[ -n "${JAEGER_IMAGE:-}" ] || { skip+=(jaeger); export OTEL_EXPORTER_OTLP_ENDPOINT=; }
[ -n "${GRAFANA_IMAGE:-}" ] || skip+=(grafana)
export POSTGRES_IMAGE RABBITMQ_IMAGE PROMETHEUS_IMAGE GO_IMAGE RUNTIME_IMAGE
export COMPOSE_TEST_SKIP="${skip[*]}"
say "images: $POSTGRES_IMAGE $RABBITMQ_IMAGE $PROMETHEUS_IMAGE $GO_IMAGE $RUNTIME_IMAGE; not started: ${skip[*]:-none}"

# 4. The project and its ports.
export COMPOSE_PROJECT_NAME=shop-compose-test SHOP_IMAGE=shop:compose-test
# Every port variable of docker-compose.yml 20000 above its default (ORDER_PORT=28081,
# every service's, relay's and the auditor's alike), then the servers' and tools' own.
while read -r var port; do
  export "$var=$((port + 20000))"
done < <(grep -oE '\$\{[A-Z0-9_]+_PORT:-[0-9]+\}' docker-compose.yml | sed -E 's/^\$\{(.*):-(.*)\}$/\1 \2/' | sort -u)
export POSTGRES_PORT=28432 RABBITMQ_PORT=28672 RABBITMQ_UI_PORT=28673 \
  PROMETHEUS_PORT=28090 GRAFANA_PORT=28030 JAEGER_UI_PORT=28686 JAEGER_OTLP_PORT=28318
# The test places a few dozen orders: the auditor may call an event unaccounted
# 5 s after it is published (no retries happen here), and checks every second.
export AUDIT_GRACE=5s AUDIT_INTERVAL=1s
"$@"
