// A ring of box buffers: load box k+Stages-1 while the block works on box k (the async-copy pattern done
// right: one barrier per stage, phases tracked per stage, a buffer refilled only after every thread is done
// with it). Works on both box_load paths: every iteration issues exactly one stage load, one cp.async group
// (box_load_none past the end), so on the cp.async path the wait for stage k leaves the Stages-1 later
// loads in flight. A stage may hold several boxes on its one barrier (for_each_stage_pipelined).
#pragma once
#include "tmakit/box_load.cuh"

namespace tmakit {

// for_each_stage_pipelined<Stages>(...) walks this block's stages first, first+step, ... < count.
//   smem:        Stages * stage_bytes of shared memory, aligned for the swizzle; stage_bytes a multiple of it
//   bars:        Stages mbarriers in shared memory
//   load_stage:  (uint64_t stage, uint8_t* buffer, uint64_t* bar) -> void, run by ALL threads: exactly one
//                box_load, or box_load_expect + box_load_part per box + box_load_commit
//   consume:     (uint64_t stage, const uint8_t* buffer) -> void, run by ALL threads
// ALL threads of the block call it.
template <int Stages, class LoadStage, class Consume>
__device__ __forceinline__ void for_each_stage_pipelined(uint8_t* smem, uint32_t stage_bytes, uint64_t* bars,
                                                         uint64_t first, uint64_t step, uint64_t count,
                                                         LoadStage load_stage, Consume consume) {
  // One stage is the ring without overlap (load, wait, consume): for grids of one block per stage, where the
  // other resident blocks do the overlapping.
  static_assert(Stages >= 1 && Stages <= 8, "a ring has 1..8 stages");
  for (int s = 0; s < Stages; ++s) box_barrier_init(&bars[s]);
  uint32_t parities = 0;  // bit s: the phase parity stage s waits for next (a bit mask, not an array indexed
                          // at run time, which would live in local memory)
  // Prologue: fill all but one stage.
  for (int s = 0; s < Stages - 1; ++s) {
    const uint64_t stage = first + (uint64_t)s * step;
    if (stage < count) load_stage(stage, smem + s * stage_bytes, &bars[s]);
    else box_load_none();
  }
  for (uint64_t k = 0;; ++k) {
    const uint64_t stage = first + k * step;
    if (stage >= count) break;
    // Refill the stage consumed in iteration k-1; the __syncthreads() that ended it freed the buffer.
    const uint64_t ahead = stage + (uint64_t)(Stages - 1) * step;
    const int refill = (int)((k + Stages - 1) % Stages);
    if (ahead < count) load_stage(ahead, smem + refill * stage_bytes, &bars[refill]);
    else box_load_none();
    const int s = (int)(k % Stages);
    MbarrierPhase phase{&bars[s], (parities >> s) & 1u};
    box_wait_block<Stages - 1>(phase);  // stages k+1 .. k+Stages-1 stay in flight
    parities ^= 1u << s;
    consume(stage, smem + s * stage_bytes);
    __syncthreads();
  }
}

// for_each_box_pipelined<Stages>(...): the ring of one box per stage.
//   coords_of:   (uint64_t box) -> Coords
//   consume:     (uint64_t box, const uint8_t* image) -> void, run by ALL threads
// ALL threads of the block call it.
template <int Stages, class CoordsOf, class Consume>
__device__ __forceinline__ void for_each_box_pipelined(const BoxSource& src, int rank, uint32_t box_bytes,
                                                       uint8_t* smem, uint32_t stage_bytes, uint64_t* bars,
                                                       uint64_t first, uint64_t step, uint64_t count,
                                                       CoordsOf coords_of, Consume consume) {
  for_each_stage_pipelined<Stages>(
      smem, stage_bytes, bars, first, step, count,
      [&](uint64_t box, uint8_t* buffer, uint64_t* bar) { box_load(src, buffer, coords_of(box), rank, box_bytes, bar); },
      consume);
}

}  // namespace tmakit
