/* shardgrid — placeholder for sg-plan's step-time model and hardware files
 * (sg_plan.h): the time model lands in this file from its own branch (on a
 * merge, take that file whole). Until then sg-plan prints "-" for time. */
#include "sg_plan.h"

sg_status sg_plan_step_time(const sg_plan_problem *pb, const sg_plan_mesh *m,
                            const sg_plan_hw *hw, sg_plan_time *out) {
  (void)pb, (void)m, (void)hw, (void)out;
  return SG_ERR_NOT_SUPPORTED;
}

sg_status sg_plan_hw_load(const char *path, sg_plan_hw *hw) {
  (void)hw;
  return sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                      "hardware file %s: the time model is not in this build",
                      path);
}

sg_status sg_plan_hw_save(const char *path, const sg_plan_hw *hw) {
  (void)hw;
  return sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                      "hardware file %s: the time model is not in this build",
                      path);
}
