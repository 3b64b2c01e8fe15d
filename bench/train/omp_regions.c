/* omp_regions.so: where a second OpenMP thread is lost, without a quiet
 * machine. Preloaded into a libgomp program run with OMP_WAIT_POLICY=passive
 * (waiting threads sleep, so a thread's CPU time is its work), it wraps
 * GOMP_parallel and measures each thread's CPU time (CLOCK_THREAD_CPUTIME_ID)
 * in every parallel region, and prints at exit
 *   CP serial S regions N crit C total T work W
 * S: the main thread's CPU outside multi-thread regions (serial code, and
 * regions run with one thread), C: the sum over regions of the busiest
 * thread's CPU, T = S + C (the step's length on idle cores, barrier costs
 * aside), W: S plus all threads' CPU in the regions. W / T estimates the
 * speedup over one thread; a region whose max is well above sum / nthreads
 * is unbalanced. With OMP_REGIONS_TOP=K, the K regions with the most lost
 * time (max - sum / threads), as "FN offset n max sum ser nser": offset in
 * the outlined function's object (resolve with nm), ser / nser the region's
 * one-thread runs. Dynamic schedules move work to the thread that runs, so
 * on a loaded machine their max overstates a quiet machine's.
 * Build: gcc -O2 -shared -fPIC -fopenmp -o omp_regions.so omp_regions.c -ldl
 * Use:   OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2 LD_PRELOAD=./omp_regions.so
 *        build/bin/sg-train ...   (bench/RESULTS.md, "Two threads per rank") */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAXT = 64, NF = 512 };

static double tcpu(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct wrap {
  void (*fn)(void *);
  void *data;
  double t[MAXT];
} wrap;

static void tramp(void *p) {
  wrap *w = p;
  double t0 = tcpu();
  w->fn(w->data);
  w->t[omp_get_thread_num() % MAXT] += tcpu() - t0;
}

typedef struct entry {
  void *fn;
  double max, sum, ser;
  long n, nser;
  int nth;
} entry;

static entry tab[NF];
static int ntab, depth;
static double in_regions, crit, work;
static long nreg;

static entry *find(void *fn) {
  for (int k = 0; k < ntab; ++k)
    if (tab[k].fn == fn) return &tab[k];
  if (ntab == NF) return NULL;
  tab[ntab].fn = fn;
  return &tab[ntab++];
}

typedef void (*par_fn)(void (*)(void *), void *, unsigned, unsigned);

void GOMP_parallel(void (*fn)(void *), void *data, unsigned nt, unsigned fl) {
  static par_fn real;
  if (!real) real = (par_fn)dlsym(RTLD_NEXT, "GOMP_parallel");
  if (depth) {
    real(fn, data, nt, fl);
    return;
  }
  entry *e = find((void *)fn);
  if (nt == 1 || (nt == 0 && omp_get_max_threads() == 1)) {
    double t0 = tcpu();
    real(fn, data, nt, fl);
    if (e) e->ser += tcpu() - t0, e->nser++;
    return;
  }
  wrap w;
  memset(&w, 0, sizeof w);
  w.fn = fn;
  w.data = data;
  depth = 1;
  double t0 = tcpu();
  real(tramp, &w, nt, fl);
  in_regions += tcpu() - t0;
  depth = 0;
  double mx = 0, s = 0;
  int used = 0;
  for (int i = 0; i < MAXT; ++i) {
    s += w.t[i];
    if (w.t[i] > mx) mx = w.t[i];
    if (w.t[i] > 0) ++used;
  }
  crit += mx;
  work += s;
  nreg++;
  if (e)
    e->max += mx, e->sum += s, e->n++, e->nth = used > e->nth ? used : e->nth;
}

static int by_loss(const void *a, const void *b) {
  const entry *x = a, *y = b;
  double lx = x->max - (x->nth ? x->sum / x->nth : 0);
  double ly = y->max - (y->nth ? y->sum / y->nth : 0);
  return lx < ly ? 1 : lx > ly ? -1 : 0;
}

__attribute__((destructor)) static void report(void) {
  double serial = tcpu() - in_regions;
  fprintf(stderr, "CP serial %.4f regions %ld crit %.4f total %.4f work %.4f\n",
          serial, nreg, crit, serial + crit, serial + work);
  const char *top = getenv("OMP_REGIONS_TOP");
  if (!top) return;
  qsort(tab, (size_t)ntab, sizeof tab[0], by_loss);
  for (int k = 0; k < ntab && k < atoi(top); ++k) {
    Dl_info di;
    unsigned long off = 0;
    if (dladdr(tab[k].fn, &di))
      off = (unsigned long)((char *)tab[k].fn - (char *)di.dli_fbase);
    fprintf(stderr, "  FN %lx n %6ld  max %.4f  sum %.4f  ser %.4f nser %ld\n",
            off, tab[k].n, tab[k].max, tab[k].sum, tab[k].ser, tab[k].nser);
  }
}
