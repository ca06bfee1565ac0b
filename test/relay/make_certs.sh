#!/usr/bin/env bash
# make_certs.sh DIR: the certificates of the relay's TLS tests (issue 31),
# made with Debian's openssl, valid for 2 days:
#   ca.pem, ca.key            a test CA
#   server.pem, server.key    the brokers' certificate, signed by ca.pem, for
#                             the host name localhost only (SAN DNS:localhost):
#                             a client that connects to 127.0.0.1 and checks
#                             host names must refuse it
#   client.pem, client.key    a client certificate (CN pgq-relay), signed by ca.pem
#   other_ca.pem, other_ca.key
#                             an unrelated CA: trusting it instead of ca.pem
#                             must refuse the brokers' certificate
# Keys are EC P-256 (fast to make), unencrypted, readable by their owner and
# the group only; the caller chowns DIR for the broker user.
set -euo pipefail
dir="$1"
mkdir -p "$dir"
cd "$dir"
ssl() { timeout 60 openssl "$@" 2>/dev/null; }
key() { ssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; chmod 640 "$1"; }

# ca NAME CN: a self-signed CA.
ca() {
  key "$1.key"
  ssl req -x509 -new -key "$1.key" -sha256 -days 2 -subj "/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$1.pem"
}

# leaf NAME CN EXTENSIONS: a certificate signed by ca.pem.
leaf() {
  key "$1.key"
  ssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
  printf '%s\n' "$3" >"$1.ext"
  ssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -sha256 -days 2 \
    -extfile "$1.ext" -out "$1.pem"
  rm -f "$1.csr" "$1.ext"
}

ca ca "pgq_cpp test CA"
ca other_ca "pgq_cpp unrelated CA"
leaf server localhost "subjectAltName=DNS:localhost
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth"
leaf client pgq-relay "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
chmod 644 ./*.pem
