/* kernels.h — what the CPU's nn kernels of several op families share (cpu/<family>.c): the size below which
 * a loop runs on one thread. */
#ifndef LAMINA_CPU_KERNELS_H
#define LAMINA_CPU_KERNELS_H

#include "cpu.h"

/* Below this many values a loop runs on one thread: starting a team costs more than it saves, and
 * with many cores (16 on the GPU machine) tiny models would spend their time in fork and join. */
#define PAR_MIN ((size_t)32768)

#endif
