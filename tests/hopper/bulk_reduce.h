/// @file tests/hopper/bulk_reduce.h
/// @brief A GPU check of the bulk reduce-add wrappers (hopper.cuh: bulk_reduce_add_f32,
/// bulk_commit_group, bulk_wait_group_read), the dQ writer's primitive in FlashAttention-3's
/// backward: many CTAs add fp32 tiles into the same global tiles through the TMA unit.
#pragma once

#include <cuda_runtime.h>

namespace fl_test {

/// Launches @p ctas CTAs; CTA c copies its @p tiles_per_cta tiles of @p tile_floats floats from
/// @p parts (tile t of CTA c at (c * tiles_per_cta + t) * tile_floats) into shared memory, and one
/// thread adds tile t into @p accum's tile (c + t) % @p targets with one bulk reduce-add each, in
/// one bulk group. @p tile_floats: a multiple of 4, at most 8192. Returns cudaErrorNotSupported
/// where the build has no sm_90a code (FL_HOPPER off), else the launch's and the sync's error.
cudaError_t bulk_reduce_add_tiles(float* accum, const float* parts, int ctas, int tiles_per_cta, int targets,
                                  int tile_floats);

}  // namespace fl_test
