#!/usr/bin/env bash
# Installs what building and testing sandboxd needs on a Debian machine of
# the supported kind, and only what is missing. Safe to run repeatedly.
set -euo pipefail

need_apt=()
have() { command -v "$1" >/dev/null 2>&1; }

if ! have go && [ -x /usr/local/go/bin/go ]; then
  echo "install-deps: Go is at /usr/local/go/bin; add it to PATH" >&2
  exit 1
fi
if ! have go; then
  echo "install-deps: Go (see go.mod for the version) is required and not installed" >&2
  exit 1
fi
# The race detector needs cgo and a C compiler.
have gcc || need_apt+=(gcc libc6-dev)
have git || need_apt+=(git)
have curl || need_apt+=(curl)
# The docs' walk-throughs read ids out of responses with jq.
have jq || need_apt+=(jq)
# Sandboxes run under containerd + runc; images are built with mmdebstrap.
have containerd || need_apt+=(containerd)
have runc || need_apt+=(runc)
have mmdebstrap || need_apt+=(mmdebstrap)
# Each site gets a network namespace on a CNI bridge, an nftables egress
# policy, and a disk of its own (an ext4 image on a loop device).
[ -x /usr/lib/cni/bridge ] || need_apt+=(containernetworking-plugins)
have nft || need_apt+=(nftables)
have ip || need_apt+=(iproute2)
have mkfs.ext4 || need_apt+=(e2fsprogs)
# The sites' disks lie in an XFS image (reflinks) where checkpoints and
# forks clone them.
have mkfs.xfs || need_apt+=(xfsprogs)
# Nodes may run sites under gVisor (--runtime gvisor); a test does.
have runsc || need_apt+=(runsc)
# The hostile-tenant test finds a process's sockets; pgrep finds sandboxes.
have pgrep || need_apt+=(procps)
# A test points a PHP version at an image in a local registry.
[ -x /usr/bin/docker-registry ] || need_apt+=(docker-registry)
# End-to-end tests open magic-login links in a real browser.
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
# sandboxctl's progress bar and tables are tested in a real terminal.
have tmux || need_apt+=(tmux)
# sandboxctl sites db --shell runs the MariaDB client.
have mariadb || need_apt+=(mariadb-client)
# Tests deliver invitation email to a real SMTP server.
/usr/bin/python3 -c 'import aiosmtpd' 2>/dev/null || need_apt+=(python3-aiosmtpd)
# The URL rewriter's tests have real PHP unserialize() what it rewrote.
have php || need_apt+=(php-cli)
# Custom domains get certificates from Pebble (the ACME test CA) in tests;
# Git deploy and SSH access are tested with Debian's OpenSSH server.
have pebble || need_apt+=(pebble)
[ -x /usr/sbin/sshd ] || need_apt+=(openssh-server)
have ssh || need_apt+=(openssh-client)
have sftp || need_apt+=(openssh-client)
# go test ./deploy checks the alert rules and dashboard queries with
# promtool, and the systemd units with systemd-analyze.
have promtool || need_apt+=(prometheus)
have systemd-analyze || need_apt+=(systemd)
# Node and npm install Prism, the third-party OpenAPI validator the tests
# run the API through.
have node || need_apt+=(nodejs)
have npm || need_apt+=(npm)

if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing ${need_apt[*]}; run as root or install them" >&2
    exit 1
  fi
  echo "install-deps: installing ${need_apt[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # Packages that ship a service (openssh-server) must not start it here:
  # tests run their own. policy-rc.d says so to invoke-rc.d, and is put
  # back as it was.
  policy=/usr/sbin/policy-rc.d
  saved=""
  if [ -e "$policy" ]; then saved=$(mktemp); cp -p "$policy" "$saved"; fi
  printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod 755 "$policy"
  status=0
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null || status=$?
  if [ -n "$saved" ]; then mv "$saved" "$policy"; else rm -f "$policy"; fi
  [ "$status" -eq 0 ] || exit "$status"
fi

# Stoplight Prism, pinned, in the user's cache (not system-wide); its
# analytics post-install is off.
PRISM_VERSION=5.16.0
prism_dir="${XDG_CACHE_HOME:-$HOME/.cache}/sandboxd/prism"
if [ "$("$prism_dir/node_modules/.bin/prism" --version 2>/dev/null)" != "$PRISM_VERSION" ]; then
  echo "install-deps: installing Prism $PRISM_VERSION into $prism_dir" >&2
  mkdir -p "$prism_dir"
  SCARF_ANALYTICS=false npm install --prefix "$prism_dir" --no-audit --no-fund --loglevel=error \
    "@stoplight/prism-cli@$PRISM_VERSION" >/dev/null
fi

# The MCP TypeScript SDK, pinned: a client that is not ours runs the
# agent loop against the MCP endpoint (e2e), under the machine's Node.
MCP_SDK_VERSION=1.32.2
mcp_dir="${XDG_CACHE_HOME:-$HOME/.cache}/sandboxd/mcp-sdk-$MCP_SDK_VERSION"
if [ ! -f "$mcp_dir/node_modules/@modelcontextprotocol/sdk/package.json" ]; then
  echo "install-deps: installing @modelcontextprotocol/sdk $MCP_SDK_VERSION into $mcp_dir" >&2
  mkdir -p "$mcp_dir"
  npm install --prefix "$mcp_dir" --no-audit --no-fund --loglevel=error "@modelcontextprotocol/sdk@$MCP_SDK_VERSION" >/dev/null
fi

# VersityGW, pinned: an S3-compatible server over a directory, for the
# tests of direct (multipart) import uploads. Built from the Go module
# proxy into the user's cache.
VERSITYGW_VERSION=v1.8.0
vgw_dir="${XDG_CACHE_HOME:-$HOME/.cache}/sandboxd/versitygw-$VERSITYGW_VERSION"
if [ ! -x "$vgw_dir/versitygw" ]; then
  echo "install-deps: building VersityGW $VERSITYGW_VERSION into $vgw_dir" >&2
  mkdir -p "$vgw_dir"
  GOFLAGS=-mod=mod GOBIN="$vgw_dir" go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
fi
