#!/bin/sh
# valgrind_ffmpeg.sh VALGRIND PROBE COMMAND... — runs COMMAND under VALGRIND (its options included in COMMAND's
# place: the caller passes them), unless valgrind cannot run FFmpeg's libraries on this CPU at all. Some CPUs
# lack an instruction that valgrind's emulated CPU claims (rdtscp: libhwy, which libavcodec loads, runs it in its
# start-up code), so every FFmpeg program dies of SIGILL there before lamina runs a line. PROBE (ffmpeg_probe)
# only opens the libraries; where it cannot run under valgrind the test is skipped (77), not passed, saying why.
# Any other failure of the probe, and every result of COMMAND, is reported as it is.
valgrind=$1 probe=$2
shift 2
out=$("$valgrind" -q "$probe" 2>&1)
rc=$?
if [ $rc -ne 0 ]; then
  if printf '%s\n' "$out" | grep -q 'SIGILL'; then
    printf '%s\n' "$out" | grep -E 'Illegal opcode|at 0x' | head -3
    echo "valgrind_ffmpeg.sh: valgrind cannot run FFmpeg's libraries on this CPU (SIGILL in their start-up code" \
         "above, before any lamina code): test skipped"
    exit 77
  fi
  printf '%s\n' "$out"
  echo "valgrind_ffmpeg.sh: $probe failed under valgrind ($rc)"
  exit $rc
fi
exec "$valgrind" "$@"
