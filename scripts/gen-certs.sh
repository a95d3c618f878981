#!/usr/bin/env bash
# Generates development certificates for konn into OUTDIR (default ./certs):
#   ca.crt/ca.key          self-signed CA
#   server.crt/server.key  proxy-server agent port and frontend (SANs localhost, 127.0.0.1, ::1)
#   client.crt/client.key  frontend mTLS client, CN kube-apiserver
#   agent.crt/agent.key    proxy-agent client, CN proxy-agent
# EC P-256 keys. Idempotent: a file pair that already exists is kept. Quiet unless openssl fails.
# For development and tests only: keys are written unencrypted.
set -euo pipefail

out="${1:-certs}"
days=3650
mkdir -p "$out"
cd "$out"

# Concurrent invocations into the same directory (several test processes) are serialised.
exec 9>".gen-certs.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi

umask 077
tmp="$(mktemp -d .gen-certs.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT

new_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }; }
run() { "$@" >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/out" "$tmp/err" >&2; exit 1; }; }

if [[ ! -s ca.crt || ! -s ca.key ]]; then
  new_key "$tmp/ca.key"
  run openssl req -x509 -new -key "$tmp/ca.key" -sha256 -days "$days" -subj "/CN=konn-dev-ca" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$tmp/ca.crt"
  mv "$tmp/ca.key" ca.key
  mv "$tmp/ca.crt" ca.crt
  # A new CA invalidates every leaf signed by an old one.
  rm -f server.crt server.key client.crt client.key agent.crt agent.key
fi

# leaf NAME CN EXTENDED_KEY_USAGE [SUBJECT_ALT_NAMES]
leaf() {
  local name="$1" cn="$2" eku="$3" san="${4:-}"
  [[ -s "$name.crt" && -s "$name.key" ]] && return 0
  new_key "$tmp/$name.key"
  run openssl req -new -key "$tmp/$name.key" -subj "/CN=$cn" -out "$tmp/$name.csr"
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature"
    echo "extendedKeyUsage=$eku"
    [[ -n "$san" ]] && echo "subjectAltName=$san"
  } >"$tmp/$name.ext"
  run openssl x509 -req -in "$tmp/$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
    -CAserial "$tmp/ca.srl" -days "$days" -sha256 -extfile "$tmp/$name.ext" -out "$tmp/$name.crt"
  mv "$tmp/$name.key" "$name.key"
  mv "$tmp/$name.crt" "$name.crt"
}

leaf server localhost serverAuth "DNS:localhost,IP:127.0.0.1,IP:::1"
leaf client kube-apiserver clientAuth
leaf agent proxy-agent clientAuth
chmod 644 ca.crt server.crt client.crt agent.crt
