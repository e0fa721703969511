// Which async-copy engine this compilation targets. One kernel source serves both:
//   TMAKIT_USE_TMA == 1  -> sm_90+: TMA (cp.async.bulk.tensor) with mbarrier completion
//   TMAKIT_USE_TMA == 0  -> sm_80..89, or any arch with TMAKIT_FORCE_CP_ASYNC defined: Ampere cp.async
// The host picks the backend (tmakit/backend.py) and passes TMAKIT_FORCE_CP_ASYNC when it wants the
// fallback on Hopper, so the choice is made in exactly one place and recorded there.
#pragma once

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && !defined(TMAKIT_FORCE_CP_ASYNC)
#define TMAKIT_USE_TMA 1
#else
#define TMAKIT_USE_TMA 0
#endif

// sm_90-only instructions (TMA, bulk copies, fence.proxy.async, clusters) are compiled only here.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
#define TMAKIT_HAS_SM90 1
#else
#define TMAKIT_HAS_SM90 0
#endif

// Calling an sm_90 wrapper in a build without sm_90 is a bug in the kernel; trap loudly, never no-op.
#define TMAKIT_REQUIRES_SM90() asm volatile("trap;")
// A one-source kernel declares every engine's entry point in every build (so that nvcc's host pass and every
// architecture see the same kernels); the entry the build does not serve traps if launched.
#define TMAKIT_NOT_THIS_BUILD() asm volatile("trap;")
