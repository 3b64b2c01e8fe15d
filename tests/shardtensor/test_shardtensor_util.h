/* Helpers shared by the ShardTensor and redistribute tests. */
#ifndef TEST_SHARDTENSOR_UTIL_H
#define TEST_SHARDTENSOR_UTIL_H

#include <stdint.h>

#include "sg_shardtensor.h"

#define ST_MAX_SPECS 16

/* Every mesh shape for nprocs ranks: "a=P", then "a=k,b=P/k" for every
 * divisor k < P (4: "a=1,b=4", "a=2,b=2"; with3: also a 3-D
 * "a=2,b=1,c=P/2" when P is even). */
int st_mesh_specs(int nprocs, int with3, char specs[][64]);

/* Element i of a deterministic global tensor (small integers, exact in
 * every dtype; bf16 in [-100, 100]). */
double st_value(int64_t i, sg_dtype dt, uint64_t seed);
void st_store(void *p, sg_dtype dt, int64_t i, double v);
double st_load(const void *p, sg_dtype dt, int64_t i);

/* Allocate and fill a contiguous global tensor. */
sg_status st_make_global(sg_tensor *g, sg_dtype dt, int ndim,
                         const int64_t *shape, uint64_t seed);

/* Index of this rank among the ranks of its Partial group (mixed radix of
 * its coordinates over the Partial mesh dims) and the group's size. */
void st_partial_index(sg_mesh_t mesh, const sg_placement *pl, int *k, int *K);

/* Fill x's interior with this rank's Partial summand of G: integers whose
 * sum over the Partial group is G exactly (no Partial: G's box). */
sg_status st_fill_summands(sg_shardtensor *x, const sg_tensor *G);

/* Fill the whole local block (margins included) with v. */
sg_status st_fill_local(sg_shardtensor *x, double v);

/* Number of margin elements of x's local block that are not v. */
int64_t st_margin_changed(const sg_shardtensor *x, double v);

/* Number of elements of x's interior that differ bitwise from G's box
 * (scaled: zero_if_nonfirst makes ranks with a nonzero Partial index expect
 * zeros instead). */
int64_t st_interior_mismatch(const sg_shardtensor *x, const sg_tensor *G,
                             int zero_if_nonfirst);

/* All combinations of {Shard(0), Shard(1), ..., Replicate, Partial} over
 * nm mesh dims (nshard tensor dims shardable); returns the count. */
int st_placement_combos(int nm, int nshard,
                        sg_placement (*out)[SG_MESH_MAX_DIMS], int max);

#endif
