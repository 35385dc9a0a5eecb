#!/usr/bin/env bash
# Runs the README's first command as a newcomer would, on a machine where
# nothing but Rust may be installed, and checks that it serves the example
# app: `cargo run -p lockd -- up --build`, then `POST /jobs/1` must answer
# 200. CI runs this before anything else installs tools (scripts/setup.sh).
#
# protoc is kept out of reach even where the machine has one: every PATH
# directory that holds a `protoc` is replaced by a copy made of links to all
# its other programs, and PROTOC is unset, so the build must use the protoc
# the project vendors (.cargo/config.toml). The server listens on a free
# port (LOCKD_LISTEN) and keeps its locks in a throwaway store.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"

work="$(mktemp -d)"
server=""
cleanup() {
    if [[ -n "$server" ]] && kill -0 "$server" 2>/dev/null; then
        kill -TERM "$server" 2>/dev/null || true
        wait "$server" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# --- protoc out of reach -------------------------------------------------------
hidden_path=""
IFS=: read -r -a dirs <<<"$PATH"
for dir in "${dirs[@]}"; do
    [[ -n "$dir" && -d "$dir" ]] || continue
    if [[ -e "$dir/protoc" ]]; then
        shadow="$work/path/$(printf '%s' "$dir" | tr '/' '_')"
        mkdir -p "$shadow"
        for prog in "$dir"/*; do
            [[ "$(basename -- "$prog")" == protoc ]] || ln -s "$prog" "$shadow/"
        done
        dir="$shadow"
    fi
    hidden_path="${hidden_path:+$hidden_path:}$dir"
done
if PATH="$hidden_path" command -v protoc >/dev/null; then
    echo "first-command: could not hide protoc" >&2
    exit 1
fi
echo "first-command: protoc is out of reach (the build must use the vendored one)"

# --- the first command -----------------------------------------------------------
log="$work/up.log"
# Created before the server starts: the loop below reads it at once, maybe
# before the background shell has opened it.
: >"$log"
start=$(date +%s)
echo "first-command: cargo run -p lockd -- up --build"
env -u PROTOC PATH="$hidden_path" LOCKD_LISTEN=127.0.0.1:0 LOCKD_STORE="redb:$work/locks.redb" \
    cargo run -p lockd -- up --build >"$log" 2>&1 &
server=$!

url=""
# A cold machine compiles the host and the three components first.
deadline=$((start + 40 * 60))
while [[ -z "$url" ]]; do
    url="$(sed -n 's/^lockd listening on //p' "$log")"
    [[ -n "$url" ]] && break
    if ! kill -0 "$server" 2>/dev/null || (($(date +%s) > deadline)); then
        tail -n 60 "$log"
        echo "first-command: lockd up --build did not start" >&2
        exit 1
    fi
    sleep 1
done
ready=$(date +%s)
echo "first-command: serving at $url after $((ready - start)) s"

# --- POST /jobs/1 -------------------------------------------------------------------
# Plain bash (/dev/tcp): a fresh machine may have neither curl nor python.
hostport="${url#http://}"
exec 3<>"/dev/tcp/${hostport%:*}/${hostport##*:}"
printf 'POST /jobs/1 HTTP/1.1\r\nHost: %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n' "$hostport" >&3
response="$(cat <&3)"
exec 3<&-
status_line="${response%%$'\r'*}"
echo "first-command: POST /jobs/1 -> $status_line"
echo "first-command: ${response##*$'\r\n\r\n'}"
if [[ "$status_line" != "HTTP/1.1 200 OK" ]]; then
    tail -n 40 "$log"
    echo "first-command: expected 200" >&2
    exit 1
fi
grep -q '"fencing_token"' <<<"$response" || { echo "first-command: no fencing token in the reply" >&2; exit 1; }
echo "first-command: ok, cold start to first answer $(($(date +%s) - start)) s"
