/* sg-train's config keys (keys.c), shared with sg-plan. */
#ifndef SG_TRAIN_KEYS_H
#define SG_TRAIN_KEYS_H

#include "sg_kv.h"

extern const sg_kv_key sg_train_keys[];
extern const int sg_train_nkeys;

#endif
