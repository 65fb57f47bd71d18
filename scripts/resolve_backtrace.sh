#!/usr/bin/env bash
# Resolves the stack lines of tests/support's crash reporter (LD_PRELOAD
# libmgs_crash_report.so) into function, file and line with addr2line.
#   scripts/resolve_backtrace.sh [LOG ...]     (default: standard input)
# Every input line is printed; each "[crash_report]   #i OBJECT +0xOFFSET"
# line is followed by what addr2line says of it (inlined frames included).
# The address looked up is OFFSET - 1: a caller's frame holds the return
# address, which can belong to the next line or function.
set -u
command -v addr2line > /dev/null || { echo "resolve_backtrace: addr2line (binutils) is missing" >&2; exit 2; }
cat "$@" | while IFS= read -r line; do
  printf '%s\n' "$line"
  if [[ $line =~ \[crash_report\]\ +#[0-9]+\ ([^ ]+)\ \+0x([0-9a-f]+) ]]; then
    obj=${BASH_REMATCH[1]}
    [ -r "$obj" ] || continue
    addr=$(printf '0x%x' $(( 0x${BASH_REMATCH[2]} - 1 )))
    addr2line -f -C -i -e "$obj" "$addr" 2> /dev/null | paste - - | sed 's/^/                 -> /'
  fi
done
