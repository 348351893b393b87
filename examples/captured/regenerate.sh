#!/usr/bin/env bash
# Regenerates the captured example from src/: compiles the objects (ThinLTO bitcode and
# one native assembly object), archives lib/ (regular) and thin/ (thin), prepares both
# with `dist-lto prepare`, and runs `dist-lto plan` with stock LLD 22, which writes the
# index directory (out/index) and the plans (out/) that are committed with meta.json.
# Replaying needs none of this: `dist-lto plan --replay meta.json` (see the README).
set -euo pipefail
cd "$(dirname "$0")"
LLVM_BIN=${DIST_LTO_LLVM_BIN:-/usr/lib/llvm-22/bin}
DIST_LTO=${DIST_LTO:-../../.venv/bin/dist-lto}
CLANG="$LLVM_BIN/clang"

rm -rf obj lib thin prep out archives
mkdir -p obj lib thin archives
"$CLANG" -O2 -flto=thin -c src/main.c -o obj/main.o
"$CLANG" -O2 -c src/fast.S -o obj/fast.o
"$CLANG" -O2 -flto=thin -c src/util.c -o lib/util.o
"$CLANG" -O2 -flto=thin -c src/unused.c -o lib/unused.o
"$CLANG" -O2 -flto=thin -c src/text.c -o thin/text.o
"$LLVM_BIN/llvm-ar" rcsD archives/libutil.a lib/util.o lib/unused.o
"$LLVM_BIN/llvm-ar" rcsD --thin archives/libtext.a thin/text.o
"$DIST_LTO" prepare --archive archives/libutil.a --objects-out prep/util/objects \
  --manifest-out prep/util/manifest.json
"$DIST_LTO" prepare --archive archives/libtext.a --objects-out prep/text/objects \
  --manifest-out prep/text/manifest.json
rm -rf archives lib  # prepare copied the regular archive's members; the thin one points at thin/
"$DIST_LTO" plan meta.json -- "$CLANG" -fuse-ld=lld -O2 -o app
