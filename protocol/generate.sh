#!/usr/bin/env bash
# Regenerates the Go code of protocol/*.proto with pinned generators.
# The output is committed, so building never needs this.
set -euo pipefail
cd "$(dirname "$0")/.."
PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_CONNECT_GO_VERSION=v1.21.1
TOOLS="$PWD/bin/tools"
mkdir -p "$TOOLS"
if ! command -v protoc >/dev/null; then
  echo "generate: installing protobuf-compiler" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends protobuf-compiler >/dev/null
fi
GOBIN="$TOOLS" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION"
GOBIN="$TOOLS" go install "connectrpc.com/connect/cmd/protoc-gen-connect-go@$PROTOC_GEN_CONNECT_GO_VERSION"
PATH="$TOOLS:$PATH" protoc -I protocol \
  --go_out=protocol --go_opt=paths=source_relative \
  --connect-go_out=protocol --connect-go_opt=paths=source_relative \
  $(cd protocol && find . -name "*.proto" | sed "s|^\./||" | sort)
