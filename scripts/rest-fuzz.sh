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
work="$(mktemp -d)"
# Waits are capped at 2 s (and the schema the fuzzer reads says so, below):
# a generated lock may wait behind a lease or lock another case left held for
# up to 24 h, and the fuzzer gives each request 10 s. Values past the cap are
# still sent, as schema-invalid data the server must refuse.
max_wait_ms=2000
printf '[limits]\nmax_wait_ms = %s\n' "$max_wait_ms" >"$work/lockd.toml"
# A schema-valid request is refused with 400 when the name's state forbids
# it: a permit of a name held as a lock (or another permit count), a lock of a
# semaphore's name, an owner asking for the other mode of a name it holds, a
# campaign, proclaim, resign or leader question on a name that another case
# holds as a lock or a semaphore (docs/contract.md C21, C22, C24). No schema
# can say that, so 400 is an expected answer to valid data there, beside
# schemathesis's defaults.
{
    for operation in lock campaign proclaim resign leader; do
        printf '[[operations]]\ninclude-operation-id = "%s"\n' "$operation"
        printf 'checks.positive_data_acceptance.expected-statuses = ["2xx", "3xx", "400", "401", "403", "404", "409", "429", "5xx"]\n\n'
    done
} >"$work/schemathesis.toml"
# The embedded store, as `lockd serve` runs by default: the snapshot route
# answers a snapshot only there. Dapr's routes take any store name, so that
# fuzzed calls reach the locks (without components daprd's answer to every
# call is a 500 "not configured", which tells the fuzzer nothing).
target/debug/lockd serve --store "redb:$work/locks.redb" --listen 127.0.0.1:0 --auth-token "$token" \
    --config "$work/lockd.toml" --dapr-any-store >"$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; rm -rf "$log" "$work"' EXIT

url=""
for _ in $(seq 300); do
    url="$(sed -n 's/^lockd listening on //p' "$log")"
    [[ -n "$url" ]] && break
    sleep 0.1
done
[[ -n "$url" ]] || { cat "$log"; echo "rest-fuzz: lockd serve did not start"; exit 1; }

# The served document, with the server's wait cap in place of the default.
python3 - "$url/openapi.json" "$work/openapi.json" "$max_wait_ms" "$token" <<'PY'
import json, sys, urllib.request
request = urllib.request.Request(sys.argv[1], headers={"Authorization": "Bearer " + sys.argv[4]})
with urllib.request.urlopen(request, timeout=5) as r:
    doc = json.load(r)
cap = int(sys.argv[3])
def cap_waits(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "wait_ms" and isinstance(value, dict) and "maximum" in value:
                value["maximum"] = cap
            cap_waits(value)
    elif isinstance(node, list):
        for value in node:
            cap_waits(value)
cap_waits(doc)
json.dump(doc, open(sys.argv[2], "w"))
PY

"$venv/bin/st" --config-file "$work/schemathesis.toml" run "$work/openapi.json" --url "$url" \
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
