/* shardgrid — halo exchange plans: the exchange (dim-by-dim forward
 * with corners, boundary fills, and the adjoint: reverse, summing). */
#include <limits.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "halo_impl.h"
#include "sg_device.h"
#include "sg_halo_pack.h"
#include "sg_log.h"
#include "sg_trace.h"

/* ---- local fills at physical edges / local wrap -------------------------- */

sg_status sg_halo_fill_local(struct sg_halo_plan *p, int d, int s,
                             int adjoint) {
  sg_status st = SG_OK;
  hdim *q = &p->dim[d];
  int64_t h = q->h[s];
  if (h == 0) return SG_OK;
  if (p->bnd[d] == SG_BOUNDARY_ZERO) {
    sg_halo_box b = sg_halo_make_box(p, d, s ? q->n : -h, h);
    sg_halo_zero_host(p->block, &b, p->esize);
    return SG_OK;
  }
  for (int64_t j = 0; j < h; ++j) {
    int64_t i = s ? q->n + j : -1 - j;
    int64_t src = sg_halo_edge_source(p->bnd[d], q->n, i);
    sg_halo_box hb = sg_halo_make_box(p, d, i, 1);
    sg_halo_box sb = sg_halo_make_box(p, d, src, 1);
    if (adjoint)
      SG_TRY(sg_halo_move_add_host(p->block, &sb, &hb, p->dtype));
    else
      sg_halo_copy_host(p->block, &hb, &sb, p->esize);
  }
fail:
  return st;
}

/* The error of a halo wait past the timeout (sg_comm_set_timeout) on dim
 * d: side >= 0: waiting for that side's neighbour (known exactly); -1:
 * for the messages of both neighbours (MPI: which one is late is not
 * known). */
sg_status sg_halo_timeout(const struct sg_halo_plan *p, const sg_deadline *dl,
                          int d, int side, const char *how) {
  const hdim *q = &p->dim[d];
  char what[256];
  if (side >= 0) {
    snprintf(what, sizeof what, "halo exchange (dim %d, %s)", d, how);
    return sg_timeout_error(dl, what, p->comm, q->nb[side]);
  }
  snprintf(
      what, sizeof what,
      "halo exchange (dim %d, %s, neighbours: ranks %d and %d of the halo's "
      "communicator; one of them did not arrive)",
      d, how, q->nb[0], q->nb[1]);
  return sg_timeout_error(dl, what, MPI_COMM_NULL, -1);
}

/* ---- the state machine ---------------------------------------------------- */

static int step_dim(const struct sg_halo_plan *p, int step) {
  return p->order[p->phase == PHASE_ADJ ? p->ndims - 1 - step : step];
}

static sg_status begin_step(struct sg_halo_plan *p) {
  sg_status st = SG_OK;
  int d = step_dim(p, p->step);
  hdim *q = &p->dim[d];
  const int64_t es = (int64_t)p->esize;
  if (p->shm) {
    SG_TRY(sg_halo_shm_begin(p, d));
  } else if (p->phase == PHASE_FWD) {
    /* receives first, then each side's send as soon as it is packed;
     * persistent handles stay valid (inactive) after completion */
    q->nreq = 0;
    for (int s = 0; s < 2; ++s) {
      if (q->local[s] || q->h[s] == 0) continue;
      if (q->rdirect[s]) {
        SG_MPI(MPI_Irecv(p->block + q->rbox[s].base * es, q->rcount[s],
                         q->rtype[s], q->nb[s], sg_halo_tag(p, d, s == 0, 0),
                         p->comm, &q->req[q->nreq]));
        q->unpack[q->nreq++] = -1;
      } else {
        SG_MPI(MPI_Start(&q->frecv[s]));
        q->req[q->nreq] = q->frecv[s];
        q->unpack[q->nreq++] = s;
      }
    }
    for (int s = 0; s < 2; ++s) {
      if (q->local[s] || q->s[s] == 0) continue;
      if (q->sdirect[s]) {
        SG_MPI(MPI_Isend(p->block + q->sbox[s].base * es, q->scount[s],
                         q->stype[s], q->nb[s], sg_halo_tag(p, d, s == 1, 0),
                         p->comm, &q->req[q->nreq]));
      } else {
        sg_halo_pack_host(p->block, &q->sbox[s], p->esize, q->sbuf[s]);
        SG_MPI(MPI_Start(&q->fsend[s]));
        q->req[q->nreq] = q->fsend[s];
      }
      q->unpack[q->nreq++] = -1;
    }
    q->pending = q->nreq;
    for (int s = 0; s < 2; ++s)
      if (q->local[s]) SG_TRY(sg_halo_fill_local(p, d, s, 0));
  } else {
    for (int s = 0; s < 2; ++s)
      if (!q->local[s] && q->h[s] > 0) {
        sg_halo_pack_host(p->block, &q->rbox[s], p->esize, q->rbuf[s]);
        sg_halo_zero_host(p->block, &q->rbox[s], p->esize);
      }
    if (q->na) SG_MPI(MPI_Startall(q->na, q->areq));
    for (int s = 0; s < 2; ++s)
      if (q->local[s]) SG_TRY(sg_halo_fill_local(p, d, s, 1));
  }
fail:
  return st;
}

/* Adjoint: add what came back into the edge cells (the forward unpacks
 * each side as it arrives, in wait_fwd). */
static sg_status end_step(struct sg_halo_plan *p) {
  sg_status st = SG_OK;
  int d = step_dim(p, p->step);
  hdim *q = &p->dim[d];
  if (p->shm) return SG_OK; /* received in shm_pump */
  for (int s = 0; s < 2; ++s) {
    if (q->local[s]) continue;
    if (p->phase == PHASE_ADJ && q->s[s] > 0) {
      SG_TRY(
          sg_halo_unpack_add_host(p->block, &q->sbox[s], p->dtype, q->sbuf[s]));
    }
  }
fail:
  return st;
}

/* Forward step of dim q: complete what has arrived (all of it with wait),
 * unpacking each packed side as its message lands while the others are
 * still in flight. *done when nothing is pending. */
static sg_status wait_fwd(struct sg_halo_plan *p, hdim *q, int wait,
                          int *done) {
  sg_status st = SG_OK;
  sg_deadline dl;
  sg_deadline_start(&dl);
  const int timed = wait && dl.limit > 0; /* poll, to give up at the deadline */
  while (q->pending > 0) {
    int idx[8], out = 0;
    MPI_Status stats[8]; /* not MPI_STATUSES_IGNORE: gcc 12 misreads it */
    if (wait && !timed)
      SG_MPI(MPI_Waitsome(q->nreq, q->req, &out, idx, stats));
    else
      SG_MPI(MPI_Testsome(q->nreq, q->req, &out, idx, stats));
    if (timed && out == 0) {
      if (sg_deadline_passed(&dl))
        SG_TRY(sg_halo_timeout(p, &dl, (int)(q - p->dim), -1, "MPI messages"));
      continue;
    }
    if (out == MPI_UNDEFINED) { /* no active request left */
      q->pending = 0;
      break;
    }
    for (int i = 0; i < out; ++i) {
      int s = q->unpack[idx[i]];
      --q->pending;
      if (s >= 0)
        sg_halo_unpack_host(p->block, &q->rbox[s], p->esize, q->rbuf[s]);
    }
    if (!wait) break;
  }
  *done = q->pending == 0;
fail:
  return st;
}

/* Advance as far as possible; with wait, to the end. */
static sg_status advance(struct sg_halo_plan *p, int wait, int *done) {
  sg_status st = SG_OK;
  while (p->step < p->ndims) {
    hdim *q = &p->dim[step_dim(p, p->step)];
    int n = p->phase == PHASE_ADJ ? q->na : 0;
    MPI_Request *r = q->areq;
    MPI_Status stats[8]; /* not MPI_STATUSES_IGNORE: gcc 12 misreads it */
    if (p->shm) {
      int ok = 0;
      SG_TRY(sg_halo_shm_pump(p, step_dim(p, p->step), wait, !wait, &ok));
      if (!ok) break;
      n = 0;
    } else if (p->phase == PHASE_FWD) {
      int ok = 0;
      SG_TRY(wait_fwd(p, q, wait, &ok));
      if (!ok) break;
    }
    if (n) {
      if (wait && sg_comm_timeout() > 0) {
        sg_deadline dl;
        sg_deadline_start(&dl);
        for (int flag = 0; !flag;) {
          SG_MPI(MPI_Testall(n, r, &flag, stats));
          if (!flag && sg_deadline_passed(&dl))
            SG_TRY(sg_halo_timeout(p, &dl, step_dim(p, p->step), -1,
                                   "adjoint, MPI messages"));
        }
      } else if (wait) {
        SG_MPI(MPI_Waitall(n, r, stats));
      } else {
        int flag = 0;
        SG_MPI(MPI_Testall(n, r, &flag, stats));
        if (!flag) break;
      }
    }
    SG_TRY(end_step(p));
    ++p->step;
    if (p->step < p->ndims) SG_TRY(begin_step(p));
  }
  if (done) *done = p->step >= p->ndims;
fail:
  return st;
}

/* 1 when a side of the plan is another rank's (not an edge or a local
 * wrap): its exchange is timed as "halo" (sg_timer_total; sg-train's
 * time_halo), a one-rank plan's local fills are not. */
static int halo_remote(const struct sg_halo_plan *p) {
  for (int d = 0; d < p->ndims; ++d)
    for (int s = 0; s < 2; ++s)
      if (!p->dim[d].local[s] && p->dim[d].nb[s] != MPI_PROC_NULL) return 1;
  return 0;
}

static sg_status start(struct sg_halo_plan *p, void *block, int phase,
                       const char *what) {
  sg_status st = SG_OK;
  const int timed = p && halo_remote(p);
  if (timed) sg_trace_begin("halo");
  if (!p) SG_RAISE(SG_ERR_INVALID_ARG, "%s: NULL plan", what);
  if (p->phase != PHASE_IDLE)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: an exchange is already in flight", what);
  if (!block && p->count > 0)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: NULL block", what);
  p->block = block;
  p->cur = -1;
  for (int j = 0; j < p->nblk; ++j)
    if (p->shm && p->bwin[j] >= 0 && block == p->blk[j]) p->cur = j;
  p->phase = phase;
  p->step = 0;
  SG_TRY(begin_step(p));
  SG_TRY(advance(p, 0, NULL));
fail:
  if (timed) sg_trace_end("halo");
  return st;
}

static sg_status finish(struct sg_halo_plan *p, int phase, const char *what) {
  sg_status st = SG_OK;
  const int timed = p && halo_remote(p);
  if (timed) sg_trace_begin("halo");
  if (!p) SG_RAISE(SG_ERR_INVALID_ARG, "%s: NULL plan", what);
  if (p->phase != phase)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: no matching exchange was started", what);
  SG_TRY(advance(p, 1, NULL));
  p->phase = PHASE_IDLE;
  p->block = NULL;
  p->cur = -1;
fail:
  if (timed) sg_trace_end("halo");
  return st;
}

sg_status sg_halo_start(sg_halo_plan_t plan, void *block) {
  return start(plan, block, PHASE_FWD, "sg_halo_start");
}

sg_status sg_halo_progress(sg_halo_plan_t plan, int *done) {
  sg_status st = SG_OK;
  if (!plan) SG_RAISE(SG_ERR_INVALID_ARG, "sg_halo_progress: NULL plan");
  if (plan->phase == PHASE_IDLE) {
    if (done) *done = 1;
    return SG_OK;
  }
  SG_TRY(advance(plan, 0, done));
fail:
  return st;
}

sg_status sg_halo_finish(sg_halo_plan_t plan) {
  return finish(plan, PHASE_FWD, "sg_halo_finish");
}

sg_status sg_halo_exchange(sg_halo_plan_t plan, void *block) {
  sg_status st = SG_OK;
  SG_TRY(sg_halo_start(plan, block));
  SG_TRY(sg_halo_finish(plan));
fail:
  return st;
}

sg_status sg_halo_adjoint_start(sg_halo_plan_t plan, void *block) {
  return start(plan, block, PHASE_ADJ, "sg_halo_adjoint_start");
}

sg_status sg_halo_adjoint_finish(sg_halo_plan_t plan) {
  return finish(plan, PHASE_ADJ, "sg_halo_adjoint_finish");
}

sg_status sg_halo_adjoint(sg_halo_plan_t plan, void *block) {
  sg_status st = SG_OK;
  SG_TRY(sg_halo_adjoint_start(plan, block));
  SG_TRY(sg_halo_adjoint_finish(plan));
fail:
  return st;
}
