/* Which kernels the host BLAS runs, and whether this CPU has wider ones
 * (sg_device.h). */
#include "sg_device.h"

#include <stddef.h>
#include <strings.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define SG_X86_CPUID 1
#endif

/* OpenBLAS's own query; weak, so a build against another CBLAS links. */
extern char *openblas_get_corename(void) __attribute__((weak));

const char *sg_blas_core(void) {
  return openblas_get_corename ? openblas_get_corename() : NULL;
}

static int named(const char *core, const char *const *names) {
  for (; *names; ++names)
    if (!strcasecmp(core, *names)) return 1;
  return 0;
}

/* The CPU's widest vector kernels OpenBLAS has: 3 AVX-512 with BF16, 2
 * AVX-512, 1 AVX2, 0 neither or unknown. The OS must save the wide
 * registers too (XGETBV), else the kernels fault. */
static int cpu_level(void) {
#ifdef SG_X86_CPUID
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27)))
    return 0; /* OSXSAVE */
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  (void)hi;
  if ((lo & 0x6) != 0x6) return 0; /* XMM and YMM state */
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
  const int avx2 = (b >> 5) & 1,
            avx512 = ((b >> 16) & 1) && (lo & 0xe0) == 0xe0;
  if (!avx512) return avx2;
  unsigned a1 = 0, b1, c1, d1;
  __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1);
  return (a1 >> 5) & 1 ? 3 : 2;
#else
  return 0;
#endif
}

const char *sg_blas_coretype_hint(void) {
  static const char *const bf16[] = {"Cooperlake", "SapphireRapids", NULL};
  static const char *const avx512[] = {"SkylakeX", "Cooperlake",
                                       "SapphireRapids", NULL};
  static const char *const avx2[] = {"Haswell",        "Zen",
                                     "SkylakeX",       "Cooperlake",
                                     "SapphireRapids", NULL};
  const char *core = sg_blas_core();
  if (!core) return NULL;
  switch (cpu_level()) {
  case 3: return named(core, bf16) ? NULL : "Cooperlake";
  case 2: return named(core, avx512) ? NULL : "SkylakeX";
  case 1: return named(core, avx2) ? NULL : "Haswell";
  default: return NULL;
  }
}
