// Proxy fences (PTX ISA "membar/fence"). TMA and bulk copies read and write shared memory
// through the ASYNC proxy; ordinary ld/st.shared go through the GENERIC proxy. Writes in one proxy are not
// ordered with accesses in the other unless a proxy fence sits between them.
#pragma once
#include "tmakit/config.cuh"

namespace tmakit {

// fence.proxy.async.shared::cta: order this thread's earlier generic-proxy shared-memory accesses before
// its later async-proxy ones. EVERY thread that wrote the buffer calls it, then the block synchronises,
// then one thread issues the TMA store / bulk copy that reads the buffer. sm_90 (no-op below: there is no
// async proxy to order against).
__device__ __forceinline__ void fence_proxy_async_shared_cta() {
#if TMAKIT_HAS_SM90
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

}  // namespace tmakit
