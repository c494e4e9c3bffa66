#!/usr/bin/env bash
# A development certificate authority and tokens for a secured Dial
# deployment (TLS, client certificates, bearer tokens). For tests, trials
# and small private set-ups; a production deployment uses its own CA.
#
#   deploy/dev-ca.sh OUTDIR [--san IP_OR_DNS ...]
#
# Makes in OUTDIR (with the openssl CLI; EC P-256 keys, SHA-256):
#   ca.crt ca.key            the CA (10 years)
#   server.crt server.key    dial-scheduler's certificate (serverAuth), for
#                            localhost, 127.0.0.1, ::1 and every --san
#   worker.crt worker.key    a client certificate for dial-worker (clientAuth)
#   user.crt user.key        a client certificate for dialctl and programs
#   tokens/NAME.token        one random token (64 hex digits, no newline)
#                            each for admin, alice, bob (users), viewer and
#                            worker
#   auth-tokens              the scheduler's --auth-tokens file: one line
#                            "<role> <name> <sha256-hex of the token>" each
#
# Idempotent: a file already in OUTDIR is kept, only missing ones are made
# (so a second run changes nothing; delete server.* to reissue the server
# certificate with other --san names, or tokens/NAME.token and auth-tokens to
# rotate a token). Keys and tokens are readable by the owner only.
set -euo pipefail

usage() {
  echo "usage: $0 OUTDIR [--san IP_OR_DNS ...]" >&2
  exit 2
}

(($# >= 1)) || usage
out=$1
shift
sans=()
while (($#)); do
  case $1 in
    --san)
      (($# >= 2)) || usage
      sans+=("$2")
      shift 2
      ;;
    --san=*)
      sans+=("${1#--san=}")
      shift
      ;;
    *) usage ;;
  esac
done
command -v openssl >/dev/null || {
  echo "$0: needs the openssl command" >&2
  exit 1
}

umask 077
mkdir -p "$out"
cd "$out"
made=()
kept=()
note() { # note FILE: records whether FILE was made now or kept
  if [[ " ${new[*]-} " == *" $1 "* ]]; then made+=("$1"); else kept+=("$1"); fi
}
new=()

days_ca=3650
days_leaf=825
key() { # key FILE: an EC P-256 private key, if missing
  if [[ ! -s $1 ]]; then
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 \
      -out "$1" 2>/dev/null
    new+=("$1")
  fi
}

# The CA.
key ca.key
if [[ ! -s ca.crt ]]; then
  openssl req -x509 -new -key ca.key -sha256 -days "$days_ca" \
    -subj "/O=Dial development/CN=Dial development CA" \
    -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -addext "subjectKeyIdentifier=hash" \
    -out ca.crt
  new+=(ca.crt)
fi

# leaf NAME CN EXTENSIONS: NAME.crt signed by the CA, if missing.
leaf() {
  local name=$1 cn=$2 ext=$3
  key "$name.key"
  if [[ ! -s $name.crt ]]; then
    local csr ext_file
    csr=$(mktemp) ext_file=$(mktemp)
    printf '%b\n' "$ext" >"$ext_file"
    openssl req -new -key "$name.key" -subj "/O=Dial development/CN=$cn" \
      -out "$csr"
    openssl x509 -req -in "$csr" -CA ca.crt -CAkey ca.key \
      -CAcreateserial -CAserial ca.srl -sha256 -days "$days_leaf" \
      -extfile "$ext_file" -out "$name.crt" 2>/dev/null
    rm -f "$csr" "$ext_file"
    new+=("$name.crt")
  fi
}

san="DNS:localhost,IP:127.0.0.1,IP:::1"
for s in "${sans[@]+"${sans[@]}"}"; do
  if [[ $s =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ || $s == *:* ]]; then
    san+=",IP:$s"
  elif [[ $s =~ ^[A-Za-z0-9*]([A-Za-z0-9.-]*[A-Za-z0-9])?$ ]]; then
    san+=",DNS:$s"
  else
    echo "$0: --san $s: not an IP address or DNS name" >&2
    exit 2
  fi
done
common="basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nauthorityKeyIdentifier=keyid"
leaf server dial-scheduler \
  "$common\nextendedKeyUsage=serverAuth\nsubjectAltName=$san"
leaf worker dial-worker "$common\nextendedKeyUsage=clientAuth"
leaf user dial-user "$common\nextendedKeyUsage=clientAuth"

# Tokens: 32 random bytes as hex; the scheduler's file holds their SHA-256.
mkdir -p tokens
principals=("admin admin" "user alice" "user bob" "viewer viewer"
  "worker worker")
for p in "${principals[@]}"; do
  name=${p#* }
  if [[ ! -s tokens/$name.token ]]; then
    head -c 32 /dev/urandom | od -An -v -tx1 | tr -d ' \n' \
      >"tokens/$name.token"
    new+=("tokens/$name.token")
  fi
done
if [[ ! -s auth-tokens ]]; then
  {
    echo "# dial-scheduler --auth-tokens: <role> <name> <sha256-hex of the token>"
    for p in "${principals[@]}"; do
      name=${p#* }
      hash=$(sha256sum <"tokens/$name.token" | cut -d' ' -f1)
      echo "$p $hash"
    done
  } >auth-tokens
  new+=(auth-tokens)
fi

chmod 644 ca.crt server.crt worker.crt user.crt  # public; keys stay 0600

# The certificates must chain to the CA (catches a kept file from another
# CA).
for c in server worker user; do
  if ! openssl verify -CAfile ca.crt "$c.crt" >/dev/null 2>&1; then
    echo "$0: $out/$c.crt is not signed by $out/ca.crt: delete both and run again" >&2
    exit 1
  fi
done

for f in ca.crt ca.key server.crt server.key worker.crt worker.key user.crt \
  user.key auth-tokens; do
  note "$f"
done
for p in "${principals[@]}"; do note "tokens/${p#* }.token"; done

dir=$(pwd)
echo "dev-ca: $dir"
((${#made[@]})) && echo "  made: ${made[*]}"
((${#kept[@]})) && echo "  kept (already there): ${kept[*]}"
echo "  server certificate names: $(openssl x509 -in server.crt -noout \
  -ext subjectAltName | tail -n +2 | sed 's/^ *//')"
echo "  principals (auth-tokens): admin (admin), alice and bob (user)," \
  "viewer (viewer), worker (worker)"
cat <<EOF
  scheduler: dial-scheduler --tls-cert=$dir/server.crt --tls-key=$dir/server.key \\
               --tls-client-ca=$dir/ca.crt --auth-tokens=$dir/auth-tokens ...
  worker:    dial-worker --tls-ca=$dir/ca.crt --tls-cert=$dir/worker.crt \\
               --tls-key=$dir/worker.key --token="\$(cat $dir/tokens/worker.token)" ...
  dialctl:   DIAL_TOKEN="\$(cat $dir/tokens/alice.token)" dialctl --tls-ca=$dir/ca.crt \\
               --tls-cert=$dir/user.crt --tls-key=$dir/user.key ...
EOF
