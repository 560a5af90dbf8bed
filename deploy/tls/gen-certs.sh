#!/usr/bin/env bash
# Creates a private CA and the certificates rankscope needs, with openssl:
#   ca.pem / ca-key.pem               the CA (keep ca-key.pem offline)
#   collector.pem / collector-key.pem the collector's server certificate
#   <agent>.pem / <agent>-key.pem     a client certificate per agent (mutual TLS)
#
# Usage: deploy/tls/gen-certs.sh OUT_DIR [--collector-name NAME]... [--agent NAME]...
#   --collector-name  a DNS name or IP address agents use to reach the collector
#                     (repeatable; localhost and 127.0.0.1 are always included)
#   --agent           an agent certificate to issue (repeatable; default: agent)
# An existing CA in OUT_DIR is reused, so the command also issues new certificates
# (rotation) that running agents and collectors accept without a restart.
# docs/deployment.md explains each step; testkit/tests/tls.rs runs this script.
set -euo pipefail

out=${1:?usage: gen-certs.sh OUT_DIR [--collector-name NAME]... [--agent NAME]...}
shift
names=(localhost 127.0.0.1)
agents=()
while [ $# -gt 0 ]; do
    case "$1" in
        --collector-name) names+=("${2:?--collector-name needs a value}"); shift 2 ;;
        --agent) agents+=("${2:?--agent needs a value}"); shift 2 ;;
        *) echo "gen-certs.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ ${#agents[@]} -gt 0 ] || agents=(agent)
command -v openssl >/dev/null || { echo "gen-certs.sh: openssl not found (apt-get install -y openssl)" >&2; exit 1; }
mkdir -p "$out"
cd "$out"
umask 077

# 1. The CA: a self-signed certificate allowed to sign others (P-256 ECDSA).
if [ ! -f ca.pem ]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout ca-key.pem -out ca.pem -days 3650 -subj "/CN=rankscope CA" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi

# issue NAME SUBJECT_CN EXTENSIONS: key + CSR, signed by the CA.
issue() {
    local name=$1 cn=$2 ext=$3
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout "$name-key.pem.tmp" -out "$name.csr" -subj "/CN=$cn" 2>/dev/null
    printf '%b' "$ext" > "$name.ext"
    openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial \
        -days 825 -extfile "$name.ext" -out "$name.pem.tmp" 2>/dev/null
    # Key first, then certificate, each replaced atomically: a reloader that
    # reads between the two renames sees a mismatch, reports it, and picks the
    # pair up on its next check.
    mv "$name-key.pem.tmp" "$name-key.pem"
    mv "$name.pem.tmp" "$name.pem"
    rm -f "$name.csr" "$name.ext"
}

# 2. The collector: a server certificate naming every address agents dial.
san=""
for n in "${names[@]}"; do
    if [[ $n =~ ^[0-9.]+$ || $n == *:* ]]; then san+="IP:$n,"; else san+="DNS:$n,"; fi
done
issue collector rankscope-collector \
    "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=${san%,}\n"

# 3. Agents: client certificates (only needed when the collector sets tls_ca_path).
for a in "${agents[@]}"; do
    issue "$a" "$a" \
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\nsubjectAltName=DNS:$a\n"
done
chmod 644 ./*.pem
chmod 600 ./*-key.pem
echo "certificates in $out: ca.pem, collector.pem, ${agents[*]/%/.pem}"
