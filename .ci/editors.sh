#!/usr/bin/env bash
# CI for the editor integrations: the VS Code extension (install, build, package, unit tests, the
# end-to-end test against the real server), Neovim for tests/test_editors_nvim.py and Emacs with
# eglot for tests/test_editors_emacs.py.
#
#   FSM_PYTHON=/path/to/venv/bin/python .ci/editors.sh
#
# FSM_PYTHON is the Python with fsm-complete installed (default: `python` on PATH, as in an
# activated virtual environment, else python3). Installs Node.js 20+, Neovim, Emacs and eglot with apt-get when
# they are missing (as root, or through sudo). Exits non-zero at the first failing step.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
EXT="$ROOT/vscode-extension"
START=$SECONDS

step() { printf '\n==> %s\n' "$*"; }
fail() { printf 'editors.sh: %s\n' "$*" >&2; exit 1; }
trap 'printf "editors.sh: failed at line %s: %s\n" "$LINENO" "$BASH_COMMAND" >&2' ERR

APT_UPDATED=0
apt_install() {
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || fail "need root (or sudo) to apt-get install $*"
        sudo="sudo"
    fi
    command -v apt-get >/dev/null || fail "apt-get not found: install $* by hand"
    if [ "$APT_UPDATED" -eq 0 ]; then
        $sudo apt-get update -qq
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

PY="${FSM_PYTHON:-$(command -v python || command -v python3 || true)}"
[ -n "$PY" ] || fail "no Python found: set FSM_PYTHON to the Python with fsm-complete installed"
export FSM_PYTHON="$PY"
step "server Python: $FSM_PYTHON ($("$FSM_PYTHON" --version 2>&1))"
(cd "$ROOT" && "$FSM_PYTHON" -c "import lsp_server") \
    || fail "$FSM_PYTHON cannot import lsp_server: pip install the project into it first"

step "Node.js"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    apt_install nodejs npm
fi
NODE_MAJOR="$(node -p 'process.versions.node.split(".")[0]')"
[ "$NODE_MAJOR" -ge 20 ] || fail "Node.js $(node --version) is too old: the extension's tools (vsce 3, esbuild) need Node.js 20+"
echo "node $(node --version), npm $(npm --version)"

step "Neovim (for tests/test_editors_nvim.py)"
command -v nvim >/dev/null || apt_install neovim
nvim --version | head -n 1

step "Emacs and eglot (for tests/test_editors_emacs.py)"
command -v emacs >/dev/null || apt_install emacs-nox
# eglot is built in from Emacs 29; Emacs 28 (Debian 12) needs the elpa-eglot package
emacs --batch --eval "(progn (require 'package) (package-initialize) (require 'eglot))" >/dev/null 2>&1 \
    || apt_install elpa-eglot
emacs --version | head -n 1

cd "$EXT"
step "npm ci"
npm ci --no-audit --no-fund --loglevel=error

step "type check and unit tests (npm test)"
npm test

step "bundle (npm run build)"
npm run build

step "package the .vsix (vsce)"
rm -f ./*.vsix
npm run package
VSIX="$(ls ./*.vsix)"
[ -s "$VSIX" ] || fail "vsce produced no .vsix"
echo "packaged $EXT/${VSIX#./}"

step "end-to-end test against the real server (npm run test:e2e)"
npm run test:e2e

step "done in $((SECONDS - START)) s"
