#!/usr/bin/env bash
# Writes a throwaway CA, a server certificate for 127.0.0.1/localhost and a client certificate
# into DIR (used by the kubeproxy-http tests, benchmark and README start command).
set -euo pipefail
dir=${1:?usage: gen_certs.sh DIR}
mkdir -p "$dir"
cd "$dir"
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 \
  -subj "/CN=konn-test-ca" >/dev/null 2>&1
openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr \
  -subj "/CN=kube-apiserver" >/dev/null 2>&1
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default\n' > server.ext
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt \
  -days 2 -extfile server.ext >/dev/null 2>&1
openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr \
  -subj "/CN=alice/O=system:masters" >/dev/null 2>&1
printf 'extendedKeyUsage=clientAuth\n' > client.ext
openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out client.crt \
  -days 2 -extfile client.ext >/dev/null 2>&1
rm -f ./*.csr ./*.ext ca.srl
