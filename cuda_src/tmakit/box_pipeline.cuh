// The box ring: a tmakit::Pipeline whose stages hold boxes of the one-source box load, so that a block loads stage
// k + Stages - 1 while it works on stage k, on either engine (TMA: TmaProducer, thread 0 acquires, arms and issues;
// cp.async: CpAsyncBlockProducer, the whole block copies). Every warp of the block consumes; each releases its
// reads (ReleaseThreads 32) and the producer refills a stage only once every warp did. Blocks are whole warps.
#pragma once
#include "tmakit/box_load.cuh"
#include "tmakit/pipeline.cuh"

namespace tmakit {

template <int Stages>
using BoxPipeline = Pipeline<Stages, BoxProducer, 32>;

// for_each_stage_pipelined<Stages>(...) walks this block's stages first, first+step, ... < count.
//   smem:        Stages * stage_bytes of shared memory, aligned for the swizzle; stage_bytes a multiple of it
//   pipe:        the ring's barriers, in shared memory (initialised here)
//   load_stage:  (uint64_t stage, uint8_t* buffer, Mbarrier* full) -> void, run by ALL threads: one box_load, or
//                box_load_expect + box_load_part per box, completing on `full`
//   consume:     (uint64_t stage, const uint8_t* buffer) -> void, run by ALL threads
// ALL threads of the block call it. One stage is the ring without overlap (load, wait, consume): for grids of one
// block per stage, where the other resident blocks do the overlapping.
template <int Stages, class LoadStage, class Consume>
__device__ __forceinline__ void for_each_stage_pipelined(uint8_t* smem, uint32_t stage_bytes, BoxPipeline<Stages>& pipe,
                                                         uint64_t first, uint64_t step, uint64_t count,
                                                         LoadStage load_stage, Consume consume) {
  static_assert(Stages >= 1 && Stages <= 8, "a ring has 1..8 stages");
  if (blockDim.x % 32u != 0) asm volatile("trap;");  // every warp whole: EMPTY counts one arrival a warp
  if (threadIdx.x == 0) pipe.init(1, blockDim.x / 32u);
  __syncthreads();
  PipelineState<Stages> produced = make_producer_start_state<Stages>();
  PipelineState<Stages> consumed = make_consumer_start_state<Stages>();
  // One stage load; past the end a load of nothing, so that on the cp.async path every slot still commits one
  // (empty) group and the wait below counts the same groups on every iteration.
  auto produce = [&](uint64_t stage) {
    if (stage < count) {
      if (threadIdx.x == 0) pipe.producer_acquire(produced);
      load_stage(stage, smem + produced.index * stage_bytes, pipe.full_barrier(produced));
    }
    pipe.producer_commit(produced);
    produced.advance();
  };
  for (int s = 0; s < Stages - 1; ++s) produce(first + (uint64_t)s * step);
  for (uint64_t k = 0;; ++k) {
    const uint64_t stage = first + k * step;
    if (stage >= count) break;
    produce(stage + (uint64_t)(Stages - 1) * step);  // refills the stage released at the end of iteration k - 1
    pipe.template consumer_wait<Stages - 1>(consumed);  // stages k+1 .. k+Stages-1 stay in flight
    consume(stage, smem + consumed.index * stage_bytes);
    // A consumer may have written the stage (the transpose patches rows and turns images into it): those generic
    // writes are ordered before the async proxy's next load into it (PTX ISA 9.7.13.4, proxy fences).
    if constexpr (IsSame<BoxProducer, TmaProducer>::value) fence_proxy_async_shared_cta();
    pipe.consumer_release(consumed);
    consumed.advance();
  }
}

// for_each_box_pipelined<Stages>(...): the ring of one box per stage.
//   coords_of:   (uint64_t box) -> Coords
//   consume:     (uint64_t box, const uint8_t* image) -> void, run by ALL threads
// ALL threads of the block call it.
template <int Stages, class CoordsOf, class Consume>
__device__ __forceinline__ void for_each_box_pipelined(const BoxSource& src, int rank, uint32_t box_bytes,
                                                       uint8_t* smem, uint32_t stage_bytes, BoxPipeline<Stages>& pipe,
                                                       uint64_t first, uint64_t step, uint64_t count,
                                                       CoordsOf coords_of, Consume consume) {
  for_each_stage_pipelined<Stages>(
      smem, stage_bytes, pipe, first, step, count,
      [&](uint64_t box, uint8_t* buffer, Mbarrier* full) { box_load(src, buffer, coords_of(box), rank, box_bytes, full); },
      consume);
}

}  // namespace tmakit
