#!/usr/bin/env bash
# test_install.sh — `cmake --install` of a build into a scratch prefix, then a small C program built
# against it through pkg-config, shared and static, and run: the hidden layer on the CPU against tanh in
# double. Usage: test_install.sh BUILD_DIR. Exit 0 when both builds link and run right.
set -u
B=${1:?usage: test_install.sh BUILD_DIR}
command -v pkg-config >/dev/null || { echo "test_install: pkg-config is missing (apt-get install pkg-config)"; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cmake --install "$B" --prefix "$T/prefix" >"$T/install.log" 2>&1 || { cat "$T/install.log"; exit 1; }
pc=$(find "$T/prefix" -name lamina.pc | head -1)
[ -n "$pc" ] || { echo "test_install: no lamina.pc installed"; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
libdir=$(pkg-config --variable=libdir lamina)
for f in "$T/prefix/bin/lamina" "$T/prefix/include/lamina.h" "$libdir/liblamina.so" "$libdir/liblamina.a"; do
  [ -e "$f" ] || { echo "test_install: $f was not installed"; exit 1; }
done
cat >"$T/app.c" <<'C'
#include <math.h>
#include <stdio.h>
#include "lamina.h"
int main(void) {
  enum { N = 1000 };
  float g[N], w[N], out[N];
  for (int i = 0; i < N; i++) g[i] = (float)(i % 256), w[i] = 0.001f * (float)(i % 97) - 0.03f;
  lam_ctx *ctx;
  if (lam_ctx_create(&ctx, LAM_DEVICE_CPU) != LAM_OK || lam_hidden(ctx, N, g, LAM_DTYPE_F32, w, out, NULL) != LAM_OK) {
    printf("failed: %s\n", lam_last_error());
    return 1;
  }
  double worst = 0;
  for (int i = 0; i < N; i++) {
    double e = fabs(out[i] - tanh((double)g[i] / 255.0 * w[i]));
    if (!(e <= worst)) worst = e;
  }
  lam_ctx_free(ctx);
  printf("lamina %s: max error %.2e\n", LAMINA_VERSION, worst);
  return worst <= 1e-6 ? 0 : 1;
}
C
fail=0
# shared: the line pkg-config gives
if cc "$T/app.c" -o "$T/app_shared" $(pkg-config --cflags --libs lamina) -lm 2>"$T/cc.log" &&
  LD_LIBRARY_PATH="$libdir" "$T/app_shared"; then
  echo "ok - shared: cc app.c \$(pkg-config --cflags --libs lamina) links and runs"
else
  echo "not ok - shared link or run"; cat "$T/cc.log"; fail=1
fi
# static: lamina-static.pc names liblamina.a and what it needs
if cc "$T/app.c" -o "$T/app_static" $(pkg-config --cflags --libs lamina-static) -lm 2>"$T/cc.log" && "$T/app_static" &&
  ! ldd "$T/app_static" | grep -q liblamina; then
  echo "ok - static: cc app.c \$(pkg-config --cflags --libs lamina-static) links and runs"
else
  echo "not ok - static link or run"; cat "$T/cc.log"; fail=1
fi
"$T/prefix/bin/lamina" --version >/dev/null || { echo "not ok - the installed CLI does not run"; fail=1; }
exit $fail
