// Programmatic dependent launch, named after the PTX it emits. PTX ISA section "Parallel Synchronization and
// Communication Instructions: griddepcontrol" (sm_90, PTX 7.8). A kernel launched with the programmatic stream
// serialization attribute (tmakit: `Kernel.bind(..., pdl=True)`) may start while the kernel before it in the
// stream still runs; it must execute griddepcontrol_wait() before it reads anything that kernel writes. Both
// instructions are no-ops for a kernel launched without the attribute, and compile to nothing below sm_90,
// where launches are always serialized.
#pragma once
#include "tmakit/config.cuh"

namespace tmakit {

// griddepcontrol.launch_dependents: the dependent launch may be scheduled once every CTA of this grid has executed
// this or exited. It orders nothing: the dependent still waits (griddepcontrol_wait) for this grid's memory. Any
// thread; the first execution in a CTA counts.
__device__ __forceinline__ void griddepcontrol_launch_dependents() {
#if TMAKIT_HAS_SM90
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// griddepcontrol.wait: wait until every prerequisite grid has completed and its memory operations are visible to
// this grid. Every thread that reads (or overwrites) what the previous kernel wrote executes it first.
__device__ __forceinline__ void griddepcontrol_wait() {
#if TMAKIT_HAS_SM90
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

}  // namespace tmakit
