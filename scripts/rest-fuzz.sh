#!/usr/bin/env bash
# REST fuzzing: schemathesis (from PyPI) against /openapi.json of a live
# `lockd serve`, with a bounded number of examples per operation. Every check
# runs: no 5xx, responses match the document, schema-invalid requests are
# refused, auth is enforced. Afterwards the server must still be running and
# answering. Exits non-zero on any failure.
#
#   REST_FUZZ_EXAMPLES=N   examples per operation (default 100)
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/venv-fuzz
if [[ ! -x "$venv/bin/st" ]]; then
    echo "rest-fuzz: installing schemathesis into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==4.32.5"
fi

cargo build --quiet -p lockd
token="$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
log="$(mktemp)"
target/debug/lockd serve --store memory --listen 127.0.0.1:0 --auth-token "$token" >"$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; rm -f "$log"' EXIT

url=""
for _ in $(seq 300); do
    url="$(sed -n 's/^lockd listening on //p' "$log")"
    [[ -n "$url" ]] && break
    sleep 0.1
done
[[ -n "$url" ]] || { cat "$log"; echo "rest-fuzz: lockd serve did not start"; exit 1; }

"$venv/bin/st" run "$url/openapi.json" \
    --header "Authorization: Bearer $token" \
    --max-examples "${REST_FUZZ_EXAMPLES:-100}" \
    --checks all \
    --generation-deterministic

# Still alive, still answering.
kill -0 "$server" || { cat "$log"; echo "rest-fuzz: the server died"; exit 1; }
python3 - "$url" <<'PY'
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1] + "/healthz", timeout=5) as r:
    assert r.status == 200, r.status
print("rest-fuzz: server healthy after fuzzing")
PY
