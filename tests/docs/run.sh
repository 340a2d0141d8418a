#!/usr/bin/env bash
# The documentation layer of the test command (issue 32): the user guide under docs/ builds with
# mdBook (pinned, installed once into the tools cache with cargo from crates.io) without a
# warning, every internal link of the built book and of README.md resolves (page and #anchor),
# and the settings tables agree with the binary's `serve --help`. See check.py.
#
#   CLUECDC_BIN=target/debug/cluecdc tests/docs/run.sh
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
TOOLS=${XDG_CACHE_HOME:-$HOME/.cache}/cluecdc/tools
MDBOOK_VERSION=0.5.4
mdbook_root="$TOOLS/mdbook-$MDBOOK_VERSION"
mdbook="$mdbook_root/bin/mdbook"

die() { echo "docs: $*" >&2; exit 1; }
now() { date +%s%N; }
since() { local ms=$((($(now) - $1) / 1000000)); printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100)); }
[ -n "${CLUECDC_BIN:-}" ] || die "CLUECDC_BIN is not set: point it at the built cluecdc binary (the test command does this)"
[ -x "$CLUECDC_BIN" ] || die "no executable cluecdc at $CLUECDC_BIN: cargo build first"

mkdir -p "$TOOLS"
with_lock() { # with_lock NAME CMD...: CMD holding $TOOLS/NAME.lock (as scripts/stack does)
  local name="$1" fd rc; shift
  exec {fd}>"$TOOLS/$name.lock"
  flock "$fd"
  "$@"; rc=$?
  exec {fd}>&-
  return "$rc"
}
install_mdbook() {
  [[ -x "$mdbook" ]] && "$mdbook" --version 2>/dev/null | grep -qx "mdbook v$MDBOOK_VERSION" && return 0
  echo "docs: installing mdBook $MDBOOK_VERSION (cargo install from crates.io) into $mdbook_root"
  rm -rf "$mdbook_root.partial"
  # Its own temporary target directory (not the project's shared one); only the HTML renderer
  # with search: no `serve`/`watch` (a web server and a file watcher the test never runs).
  env -u CARGO_TARGET_DIR cargo install mdbook --version "$MDBOOK_VERSION" --locked \
    --no-default-features --features search --root "$mdbook_root.partial" --quiet || return 1
  rm -rf "$mdbook_root" && mv "$mdbook_root.partial" "$mdbook_root"
}

t=$(now)
with_lock mdbook install_mdbook || die "installing mdBook $MDBOOK_VERSION failed (see above)"
echo "docs: $("$mdbook" --version) ready ($(since "$t") s)"

t=$(now)
rm -rf "$root/docs/book"
out=$("$mdbook" build "$root/docs" 2>&1); rc=$?
if [ "$rc" -ne 0 ] || grep -qE '(WARN|ERROR)' <<<"$out"; then
  echo "$out"
  die "mdbook build failed or warned (exit $rc); fix the messages above"
fi
echo "docs: book built into docs/book ($(since "$t") s)"

python3 "$here/check.py" --root "$root" --bin "$CLUECDC_BIN" || die "documentation checks failed (see above)"
