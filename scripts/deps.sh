#!/usr/bin/env bash
# Installs, when missing, what the given make goals need, at pinned
# versions; prints nothing when everything is there. The Makefile calls it
# once per `make` with the goals on the command line, so one `apt-get
# update` serves them all. Goals that need nothing are ignored.
#
#   test           MinIO, helm, promtool, kcat, the Python Kafka clients
#   run            MinIO (`strata dev` tiers to it)
#   lint, verify   staticcheck; verify also protoc
#   proto          protoc
#   minio, minio-static, tools (staticcheck), images: one tool each
#   deps           all of the above but the static MinIO
#
# Go tools: `go install` into $(go env GOPATH)/bin (no root needed; MinIO
# builds from source, about 5 minutes once). Debian packages: apt-get, when
# this user may (root, or passwordless sudo). Otherwise it prints the
# command to run and goes on: the tests that need those tools skip and name
# the command, unless CI demands them (STRATA_REQUIRE_PROMTOOL, _KCAT,
# _PYKAFKA, _HELM set to 1).
set -euo pipefail
cd "$(dirname "$0")/.."

# The MinIO server the object-store tests run as a child process (never
# linked: its licence is AGPL).
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
HELM_VERSION=v3.22.0
STATICCHECK_VERSION=v0.8.2
PROTOC_VERSION="libprotoc 3.21.12" # Debian 12's protobuf-compiler

gopath=$(go env GOPATH)
gopath=${gopath%%:*} # go install writes to the first entry
gobin=$gopath/bin

want_minio= want_minio_static= want_helm= want_staticcheck=
want_protoc= want_promtool= want_kcat= want_pykafka=
for goal in "$@"; do
  case $goal in
    test) want_minio=1 want_helm=1 want_promtool=1 want_kcat=1 want_pykafka=1 ;;
    run | minio | chaos | soak) want_minio=1 ;;
    lint | tools) want_staticcheck=1 ;;
    verify) want_staticcheck=1 want_protoc=1 ;;
    proto) want_protoc=1 ;;
    minio-static | images | image-minio) want_minio_static=1 ;;
    deps) want_minio=1 want_helm=1 want_promtool=1 want_kcat=1 want_pykafka=1 want_staticcheck=1 want_protoc=1 ;;
  esac
done

# go_built BIN MODULE VERSION: BIN exists and was built from MODULE at
# VERSION (a `go install`ed binary's own -version may not say, e.g. helm
# reports only "v3.22").
go_built() {
  [ -x "$1" ] && go version -m "$1" 2>/dev/null |
    grep -q "^[[:space:]]*mod[[:space:]]*$2[[:space:]]*$3[[:space:]]"
}

go_install() { # GOBIN PACKAGE@VERSION [env...]
  local dir=$1 pkg=$2
  shift 2
  echo "deps: go install $pkg"
  env "$@" GOBIN="$dir" GOFLAGS=-mod=mod go install "$pkg"
}

# Debian packages: collected first, installed by one apt-get call.
apt_packages=()
if [ -n "$want_protoc" ] && ! command -v protoc >/dev/null; then
  apt_packages+=(protobuf-compiler) # a protoc of another version: scripts/genproto.sh says so
fi
if [ -n "$want_promtool" ] && ! command -v promtool >/dev/null; then
  apt_packages+=(prometheus)
fi
if [ -n "$want_kcat" ] && ! command -v kcat >/dev/null; then
  apt_packages+=(kcat)
fi
# py_imports MODULE: a python3 imports it, the one on PATH or Debian's
# (where apt-get installs modules; internal/testtool looks at both).
py_imports() {
  local py
  for py in python3 /usr/bin/python3; do
    "$py" -c "import $1" 2>/dev/null && return 0
  done
  return 1
}
if [ -n "$want_pykafka" ]; then
  py_imports confluent_kafka || apt_packages+=(python3-confluent-kafka)
  py_imports kafka || apt_packages+=(python3-kafka)
fi

if [ ${#apt_packages[@]} -gt 0 ]; then
  sudo= # empty: root
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo=sudo; else sudo=none; fi
  fi
  if ! command -v apt-get >/dev/null; then
    echo "deps: not installed (no apt-get here): ${apt_packages[*]}; install them with your package manager; the tests that need them skip" >&2
  elif [ "$sudo" = none ]; then
    echo "deps: not installed (needs root or passwordless sudo): ${apt_packages[*]}; run:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${apt_packages[*]}" >&2
    echo "deps: until then the tests that need them skip" >&2
  else
    echo "deps: apt-get install ${apt_packages[*]}"
    # apt's chatter is shown only when it fails.
    if ! out=$($sudo apt-get update -qq 2>&1 &&
      $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${apt_packages[@]}" 2>&1); then
      echo "$out" >&2
      exit 1
    fi
  fi
fi

if [ -n "$want_protoc" ] && command -v protoc >/dev/null && [ "$(protoc --version)" != "$PROTOC_VERSION" ]; then
  echo "deps: protoc is $(protoc --version), make proto and make verify need $PROTOC_VERSION" >&2
fi
if [ -n "$want_staticcheck" ] && ! go_built "$gobin/staticcheck" honnef.co/go/tools "$STATICCHECK_VERSION"; then
  go_install "$gobin" "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi
if [ -n "$want_helm" ] && ! go_built "$gobin/helm" helm.sh/helm/v3 "$HELM_VERSION"; then
  go_install "$gobin" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
fi
# internal/miniotest and `strata dev` look for $(go env GOPATH)/bin/minio;
# STRATA_MINIO_BIN names another one instead.
if [ -n "$want_minio" ] && [ -z "${STRATA_MINIO_BIN:-}" ] &&
  ! go_built "$gobin/minio" github.com/minio/minio "$MINIO_VERSION"; then
  echo "deps: building MinIO $MINIO_VERSION (about 5 minutes, once)"
  go_install "$gobin" "github.com/minio/minio@$MINIO_VERSION"
fi
# The strata-minio image's MinIO, without cgo (an image FROM scratch has no
# libc), in its own directory (the Makefile's MINIO_STATIC_DIR).
if [ -n "$want_minio_static" ] && ! go_built "$gopath/minio-static/minio" github.com/minio/minio "$MINIO_VERSION"; then
  echo "deps: building the static MinIO $MINIO_VERSION (about 5 minutes, once)"
  go_install "$gopath/minio-static" "github.com/minio/minio@$MINIO_VERSION" CGO_ENABLED=0
fi
