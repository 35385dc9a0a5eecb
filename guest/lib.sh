# Shared by guest/build-all.sh and the guests' own build.sh scripts:
#   source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"   (or ./lib.sh from guest/)

# A cargo build script (tests/build.rs, through guest/build-all.sh) may run
# these scripts: clear the environment cargo gives build scripts so that none
# of it (RUSTFLAGS for the host target, wrappers, CARGO_TARGET_DIR, ...) leaks
# into the tools we start. Kept: CARGO_HOME, the registry/network settings,
# and CARGO_MAKEFLAGS, so an inner cargo shares the outer jobserver.
clear_cargo_env() {
    local var
    for var in $(compgen -e); do
        case "$var" in
            CARGO_HOME | CARGO_MAKEFLAGS | CARGO_NET_* | CARGO_HTTP_* | CARGO_REGISTRIES_* | CARGO_REGISTRY_*) ;;
            CARGO | CARGO_* | __CARGO_* | RUSTC | RUSTC_* | RUSTDOC | RUSTDOC_* | RUSTFLAGS | RUSTDOCFLAGS) unset "$var" ;;
            TARGET | HOST | OUT_DIR | OPT_LEVEL | PROFILE | DEBUG | NUM_JOBS) unset "$var" ;;
        esac
    done
}

# up_to_date OUT INPUT...: OUT exists and is newer than every INPUT.
up_to_date() {
    local out="$1" f
    shift
    [[ -f "$out" ]] || return 1
    for f in "$@"; do
        [[ "$f" -nt "$out" ]] && return 1
    done
    return 0
}

# exit_if_up_to_date NAME LOCKDIR OUT INPUT...: exits 0 when OUT is up to
# date. Otherwise takes a lock for NAME (two cargo builds may run build-all.sh
# at once) and checks again, so whoever waited finds the output built.
exit_if_up_to_date() {
    local name="$1" lockdir="$2" out="$3"
    shift 3
    if up_to_date "$out" "$@"; then
        echo "$name: up to date ($out)"
        exit 0
    fi
    mkdir -p "$lockdir"
    exec 9>"$lockdir/.$name.lock"
    flock 9
    if up_to_date "$out" "$@"; then
        echo "$name: up to date ($out)"
        exit 0
    fi
}

# apt_install PKG...: installs the packages dpkg does not know. A fresh
# machine may have no package lists yet: then update once and retry.
apt_install() {
    local missing=() p
    for p in "$@"; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    if ((${#missing[@]})); then
        echo "apt-get install ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" ||
            { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"; }
    fi
}

# The componentize-py release the Python guests are built with.
COMPONENTIZE_PY_VERSION=0.25.1

# componentize_py_build NAME MODULE SOURCE STAGE OUT
# Builds the Python module MODULE (the file SOURCE) into the component OUT
# with componentize-py, for the world `command` that the script STAGE lays out
# (`STAGE DIR`). Installs componentize-py into <repo>/target/venv-guests when
# it is missing. Works in a scratch dir so that componentize-py sees only our
# module (it bundles the python path) and writes no __pycache__ into the
# source tree.
componentize_py_build() {
    local name="$1" module="$2" source="$3" stage="$4" out="$5"
    local repo
    repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    local venv="$repo/target/venv-guests"
    local cpy="$venv/bin/componentize-py"
    if ! "$cpy" --version 2>/dev/null | grep -qx "componentize-py $COMPONENTIZE_PY_VERSION"; then
        if ! command -v python3 >/dev/null; then
            apt_install python3 python3-venv
        fi
        python3 -c 'import sys; assert sys.version_info >= (3, 10), "componentize-py needs Python >= 3.10"'
        if [[ ! -x "$venv/bin/pip" ]]; then
            rm -rf "$venv"
            if ! python3 -m venv "$venv" 2>/dev/null; then
                apt_install python3-venv
                rm -rf "$venv"
                python3 -m venv "$venv"
            fi
        fi
        "$venv/bin/pip" install --quiet --disable-pip-version-check "componentize-py==$COMPONENTIZE_PY_VERSION"
    fi

    local work="$repo/target/guest-build/$name"
    rm -rf "$work"
    mkdir -p "$work/src"
    "$stage" "$work/wit"
    cp "$source" "$work/src/"
    echo "$name: componentize-py -> $out"
    # VIRTUAL_ENV would add the venv's site-packages (componentize-py itself)
    # to the bundled python path.
    (cd "$work" && env -u VIRTUAL_ENV "$cpy" -q -d "$work/wit" -w command \
        componentize "$module" -p "$work/src" -o "$work/$name.wasm")
    mv -f "$work/$name.wasm" "$out"
    echo "$name: built $out ($(stat -c %s "$out") bytes)"
}
