#!/bin/sh
# `npm run example -- <name> [args]` runs examples/<name>/main.ts on the workspace's Node 24;
# `npm run example -- <name> --deno|--bun [args]` on Deno or Bun. `exec`, so that signals reach the
# example itself (its Main.runMain stops it cleanly).
set -e
root=$(cd "$(dirname "$0")/.." && pwd)
name=$1
if [ -z "$name" ] || [ ! -f "$root/examples/$name/main.ts" ]; then
  echo "usage: npm run example -- <name> [--deno|--bun] [args]; examples:" $(cd "$root/examples" && for d in */; do [ -f "$d/main.ts" ] && printf '%s ' "${d%/}"; done) >&2
  exit 2
fi
shift
# The binaries themselves, not node_modules/.bin's shims (Deno's runs it under a Node wrapper).
deno="$root/node_modules/deno-cli/deno"; [ -x "$deno" ] || deno="$root/node_modules/.bin/deno"
bun="$root/node_modules/bun-cli/bin/bun.exe"; [ -x "$bun" ] || bun="$root/node_modules/.bin/bun"
case "$1" in
  --deno) shift; exec "$deno" run -A "$root/examples/$name/main.ts" "$@" ;;
  --bun) shift; exec "$bun" run "$root/examples/$name/main.ts" "$@" ;;
  *) exec node "$root/examples/$name/main.ts" "$@" ;;
esac
