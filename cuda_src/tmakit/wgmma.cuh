// Warpgroup matrix multiply-accumulate (sm_90a), named after the PTX it emits. PTX ISA sections:
// "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions" (9.7.15): wgmma.mma_async (9.7.15.5.2),
// wgmma.fence (9.7.15.6.1), wgmma.commit_group (9.7.15.6.2), wgmma.wait_group (9.7.15.6.3), "Matrix Descriptor
// Format" (9.7.15.5.1.2.2); "setmaxnreg" (9.7.19.x).
//
// Who calls what:
//   - wgmma.* are .sync.aligned over a WARPGROUP: all 128 threads of 4 consecutive warps whose first warp index
//     is a multiple of 4 call them together, with the same descriptors and immediates.
//   - setmaxnreg: every thread of the warpgroup; the kernel needs a register cap at entry
//     (__launch_bounds__(threads, 1)) and each warpgroup role in one branch of a single if/else.
//
// Operand types (WgmmaType) and the K of one instruction, always 32 bytes of K: bf16 / f16 k16, tf32 k8, e4m3 /
// e5m2 / s8 / u8 k32. Accumulators are f32, or s32 for s8/u8. Only 16-bit operands may be MN-major (imm-trans-a/b);
// the others are K-major.
//
// Accumulator fragment of m64nNkK (N/2 32-bit registers per thread, whatever the type): thread t of the warpgroup
// (warp w = t/32, lane l) holds rows 16w + l/4 (+8) and columns 8j + 2(l%4) (+1): d[4j + 0/1] = (row, col 0/1),
// d[4j + 2/3] = (row + 8, col 0/1), j = 0 .. N/8 - 1 (wgmma_d_row / wgmma_d_col below).
//
// N: every multiple of 16 from 16 to 256 (the ISA allows multiples of 8 for most types; 16 keeps one list for all).
// The operand lists (N/2 "+f" or "+r" registers, up to 128) are written by the TMAKIT_WG_* macros below, one macro
// per register count, and each instruction string by one macro over (N, K, types, form): no hand-copied lists.
#pragma once
#include "tmakit/config.cuh"
#include "tmakit/types.cuh"

// "%0" ", %1" ... placeholder lists: TMAKIT_WG_REGS_R is "{%0, .., %R-1}" for the R = N/2 accumulators of each N
// (a multiple of 16 from 16 to 256, so R a multiple of 8), by decades: TMAKIT_WG_DEC(t) is %t0 .. %t9 (t empty for
// 0-9), TMAKIT_WG_ONES<k>(t) its first k.
#define TMAKIT_WG_P(n) ", %" #n
#define TMAKIT_WG_ONES2(t) TMAKIT_WG_P(t##0) TMAKIT_WG_P(t##1)
#define TMAKIT_WG_ONES4(t) TMAKIT_WG_ONES2(t) TMAKIT_WG_P(t##2) TMAKIT_WG_P(t##3)
#define TMAKIT_WG_ONES6(t) TMAKIT_WG_ONES4(t) TMAKIT_WG_P(t##4) TMAKIT_WG_P(t##5)
#define TMAKIT_WG_ONES8(t) TMAKIT_WG_ONES6(t) TMAKIT_WG_P(t##6) TMAKIT_WG_P(t##7)
#define TMAKIT_WG_DEC(t) TMAKIT_WG_ONES8(t) TMAKIT_WG_P(t##8) TMAKIT_WG_P(t##9)
#define TMAKIT_WG_FIRST8 "%0" TMAKIT_WG_P(1) TMAKIT_WG_P(2) TMAKIT_WG_P(3) TMAKIT_WG_P(4) TMAKIT_WG_P(5) TMAKIT_WG_P(6) TMAKIT_WG_P(7)
#define TMAKIT_WG_FIRST10 TMAKIT_WG_FIRST8 TMAKIT_WG_P(8) TMAKIT_WG_P(9)
#define TMAKIT_WG_REGS_8 "{" TMAKIT_WG_FIRST8 "}"
#define TMAKIT_WG_REGS_16 "{" TMAKIT_WG_FIRST10 TMAKIT_WG_ONES6(1) "}"
#define TMAKIT_WG_REGS_24 "{" TMAKIT_WG_FIRST10 TMAKIT_WG_DEC(1) TMAKIT_WG_ONES4(2) "}"
#define TMAKIT_WG_REGS_32 "{" TMAKIT_WG_FIRST10 TMAKIT_WG_DEC(1) TMAKIT_WG_DEC(2) TMAKIT_WG_ONES2(3) "}"
#define TMAKIT_WG_REGS_40 "{" TMAKIT_WG_FIRST10 TMAKIT_WG_DEC(1) TMAKIT_WG_DEC(2) TMAKIT_WG_DEC(3) "}"
#define TMAKIT_WG_REGS_48 "{" TMAKIT_WG_FIRST10 TMAKIT_WG_DEC(1) TMAKIT_WG_DEC(2) TMAKIT_WG_DEC(3) \
  TMAKIT_WG_ONES8(4) "}"
#define TMAKIT_WG_REGS_56 "{" TMAKIT_WG_FIRST10 TMAKIT_WG_DEC(1) TMAKIT_WG_DEC(2) TMAKIT_WG_DEC(3) TMAKIT_WG_DEC(4) \
  TMAKIT_WG_ONES6(5) "}"
#define TMAKIT_WG_REGS_64 "{" TMAKIT_WG_FIRST10 TMAKIT_WG_DEC(1) TMAKIT_WG_DEC(2) TMAKIT_WG_DEC(3) TMAKIT_WG_DEC(4) \
  TMAKIT_WG_DEC(5) TMAKIT_WG_ONES4(6) "}"
#define TMAKIT_WG_REGS_72 "{" TMAKIT_WG_FIRST10 TMAKIT_WG_DEC(1) TMAKIT_WG_DEC(2) TMAKIT_WG_DEC(3) TMAKIT_WG_DEC(4) \
  TMAKIT_WG_DEC(5) TMAKIT_WG_DEC(6) TMAKIT_WG_ONES2(7) "}"
#define TMAKIT_WG_REGS_80 "{" TMAKIT_WG_FIRST10 TMAKIT_WG_DEC(1) TMAKIT_WG_DEC(2) TMAKIT_WG_DEC(3) TMAKIT_WG_DEC(4) \
  TMAKIT_WG_DEC(5) TMAKIT_WG_DEC(6) TMAKIT_WG_DEC(7) "}"
#define TMAKIT_WG_REGS_88 "{" TMAKIT_WG_FIRST10 TMAKIT_WG_DEC(1) TMAKIT_WG_DEC(2) TMAKIT_WG_DEC(3) TMAKIT_WG_DEC(4) \
  TMAKIT_WG_DEC(5) TMAKIT_WG_DEC(6) TMAKIT_WG_DEC(7) TMAKIT_WG_ONES8(8) "}"
#define TMAKIT_WG_REGS_96 "{" TMAKIT_WG_FIRST10 TMAKIT_WG_DEC(1) TMAKIT_WG_DEC(2) TMAKIT_WG_DEC(3) TMAKIT_WG_DEC(4) \
  TMAKIT_WG_DEC(5) TMAKIT_WG_DEC(6) TMAKIT_WG_DEC(7) TMAKIT_WG_DEC(8) TMAKIT_WG_ONES6(9) "}"
#define TMAKIT_WG_REGS_104 "{" TMAKIT_WG_FIRST10 TMAKIT_WG_DEC(1) TMAKIT_WG_DEC(2) TMAKIT_WG_DEC(3) \
  TMAKIT_WG_DEC(4) TMAKIT_WG_DEC(5) TMAKIT_WG_DEC(6) TMAKIT_WG_DEC(7) TMAKIT_WG_DEC(8) TMAKIT_WG_DEC(9) \
  TMAKIT_WG_ONES4(10) "}"
#define TMAKIT_WG_REGS_112 "{" TMAKIT_WG_FIRST10 TMAKIT_WG_DEC(1) TMAKIT_WG_DEC(2) TMAKIT_WG_DEC(3) \
  TMAKIT_WG_DEC(4) TMAKIT_WG_DEC(5) TMAKIT_WG_DEC(6) TMAKIT_WG_DEC(7) TMAKIT_WG_DEC(8) TMAKIT_WG_DEC(9) \
  TMAKIT_WG_DEC(10) TMAKIT_WG_ONES2(11) "}"
#define TMAKIT_WG_REGS_120 "{" TMAKIT_WG_FIRST10 TMAKIT_WG_DEC(1) TMAKIT_WG_DEC(2) TMAKIT_WG_DEC(3) \
  TMAKIT_WG_DEC(4) TMAKIT_WG_DEC(5) TMAKIT_WG_DEC(6) TMAKIT_WG_DEC(7) TMAKIT_WG_DEC(8) TMAKIT_WG_DEC(9) \
  TMAKIT_WG_DEC(10) TMAKIT_WG_DEC(11) "}"
#define TMAKIT_WG_REGS_128 "{" TMAKIT_WG_FIRST10 TMAKIT_WG_DEC(1) TMAKIT_WG_DEC(2) TMAKIT_WG_DEC(3) \
  TMAKIT_WG_DEC(4) TMAKIT_WG_DEC(5) TMAKIT_WG_DEC(6) TMAKIT_WG_DEC(7) TMAKIT_WG_DEC(8) TMAKIT_WG_DEC(9) \
  TMAKIT_WG_DEC(10) TMAKIT_WG_DEC(11) TMAKIT_WG_ONES8(12) "}"

// "+f"(d[i]) / "+r"(d[i]) ... operand lists (C is the constraint letter's string), in blocks of 8 to 32.
#define TMAKIT_WG_C4(C, i) C(d[(i)]), C(d[(i) + 1]), C(d[(i) + 2]), C(d[(i) + 3])
#define TMAKIT_WG_C8(C, i) TMAKIT_WG_C4(C, i), TMAKIT_WG_C4(C, (i) + 4)
#define TMAKIT_WG_C16(C, i) TMAKIT_WG_C8(C, i), TMAKIT_WG_C8(C, (i) + 8)
#define TMAKIT_WG_C24(C, i) TMAKIT_WG_C16(C, i), TMAKIT_WG_C8(C, (i) + 16)
#define TMAKIT_WG_C32(C, i) TMAKIT_WG_C16(C, i), TMAKIT_WG_C16(C, (i) + 16)
#define TMAKIT_WG_ACC_8(C) TMAKIT_WG_C8(C, 0)
#define TMAKIT_WG_ACC_16(C) TMAKIT_WG_C16(C, 0)
#define TMAKIT_WG_ACC_24(C) TMAKIT_WG_C24(C, 0)
#define TMAKIT_WG_ACC_32(C) TMAKIT_WG_C32(C, 0)
#define TMAKIT_WG_ACC_40(C) TMAKIT_WG_C32(C, 0), TMAKIT_WG_C8(C, 32)
#define TMAKIT_WG_ACC_48(C) TMAKIT_WG_C32(C, 0), TMAKIT_WG_C16(C, 32)
#define TMAKIT_WG_ACC_56(C) TMAKIT_WG_C32(C, 0), TMAKIT_WG_C24(C, 32)
#define TMAKIT_WG_ACC_64(C) TMAKIT_WG_C32(C, 0), TMAKIT_WG_C32(C, 32)
#define TMAKIT_WG_ACC_72(C) TMAKIT_WG_C32(C, 0), TMAKIT_WG_C32(C, 32), TMAKIT_WG_C8(C, 64)
#define TMAKIT_WG_ACC_80(C) TMAKIT_WG_C32(C, 0), TMAKIT_WG_C32(C, 32), TMAKIT_WG_C16(C, 64)
#define TMAKIT_WG_ACC_88(C) TMAKIT_WG_C32(C, 0), TMAKIT_WG_C32(C, 32), TMAKIT_WG_C24(C, 64)
#define TMAKIT_WG_ACC_96(C) TMAKIT_WG_C32(C, 0), TMAKIT_WG_C32(C, 32), TMAKIT_WG_C32(C, 64)
#define TMAKIT_WG_ACC_104(C) TMAKIT_WG_C32(C, 0), TMAKIT_WG_C32(C, 32), TMAKIT_WG_C32(C, 64), TMAKIT_WG_C8(C, 96)
#define TMAKIT_WG_ACC_112(C) TMAKIT_WG_C32(C, 0), TMAKIT_WG_C32(C, 32), TMAKIT_WG_C32(C, 64), TMAKIT_WG_C16(C, 96)
#define TMAKIT_WG_ACC_120(C) TMAKIT_WG_C32(C, 0), TMAKIT_WG_C32(C, 32), TMAKIT_WG_C32(C, 64), TMAKIT_WG_C24(C, 96)
#define TMAKIT_WG_ACC_128(C) TMAKIT_WG_C32(C, 0), TMAKIT_WG_C32(C, 32), TMAKIT_WG_C32(C, 64), TMAKIT_WG_C32(C, 96)
#define TMAKIT_WG_F "+f"
#define TMAKIT_WG_I "+r"

// Operand numbers after the R = N/2 accumulators. SS: desc-a %R, desc-b %R+1, scale-d %R+2 (a predicate), then for
// 16-bit types imm-trans-a %R+3, imm-trans-b %R+4. RS: a0..a3 %R..%R+3, desc-b %R+4, scale-d %R+5, imm-trans-b %R+6.
// The SS tails: TRANS for 16-bit types (imm-scale-a/b 1, imm-trans-a/b), SCALE for tf32 / fp8 (imm-scale-a/b 1, no
// transpose), INT for s8 / u8 (scale-d only).
#define TMAKIT_WG_SS_PRED_8 "setp.ne.b32 p, %10, 0;\n"
#define TMAKIT_WG_SS_TRANS_8 ", %8, %9, p, 1, 1, %11, %12;"
#define TMAKIT_WG_SS_SCALE_8 ", %8, %9, p, 1, 1;"
#define TMAKIT_WG_SS_INT_8 ", %8, %9, p;"
#define TMAKIT_WG_RS_TAIL_8 ", {%8, %9, %10, %11}, %12, p, 1, 1, %14;"
#define TMAKIT_WG_RS_PRED_8 "setp.ne.b32 p, %13, 0;\n"
#define TMAKIT_WG_SS_PRED_16 "setp.ne.b32 p, %18, 0;\n"
#define TMAKIT_WG_SS_TRANS_16 ", %16, %17, p, 1, 1, %19, %20;"
#define TMAKIT_WG_SS_SCALE_16 ", %16, %17, p, 1, 1;"
#define TMAKIT_WG_SS_INT_16 ", %16, %17, p;"
#define TMAKIT_WG_RS_TAIL_16 ", {%16, %17, %18, %19}, %20, p, 1, 1, %22;"
#define TMAKIT_WG_RS_PRED_16 "setp.ne.b32 p, %21, 0;\n"
#define TMAKIT_WG_SS_PRED_24 "setp.ne.b32 p, %26, 0;\n"
#define TMAKIT_WG_SS_TRANS_24 ", %24, %25, p, 1, 1, %27, %28;"
#define TMAKIT_WG_SS_SCALE_24 ", %24, %25, p, 1, 1;"
#define TMAKIT_WG_SS_INT_24 ", %24, %25, p;"
#define TMAKIT_WG_RS_TAIL_24 ", {%24, %25, %26, %27}, %28, p, 1, 1, %30;"
#define TMAKIT_WG_RS_PRED_24 "setp.ne.b32 p, %29, 0;\n"
#define TMAKIT_WG_SS_PRED_32 "setp.ne.b32 p, %34, 0;\n"
#define TMAKIT_WG_SS_TRANS_32 ", %32, %33, p, 1, 1, %35, %36;"
#define TMAKIT_WG_SS_SCALE_32 ", %32, %33, p, 1, 1;"
#define TMAKIT_WG_SS_INT_32 ", %32, %33, p;"
#define TMAKIT_WG_RS_TAIL_32 ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;"
#define TMAKIT_WG_RS_PRED_32 "setp.ne.b32 p, %37, 0;\n"
#define TMAKIT_WG_SS_PRED_40 "setp.ne.b32 p, %42, 0;\n"
#define TMAKIT_WG_SS_TRANS_40 ", %40, %41, p, 1, 1, %43, %44;"
#define TMAKIT_WG_SS_SCALE_40 ", %40, %41, p, 1, 1;"
#define TMAKIT_WG_SS_INT_40 ", %40, %41, p;"
#define TMAKIT_WG_RS_TAIL_40 ", {%40, %41, %42, %43}, %44, p, 1, 1, %46;"
#define TMAKIT_WG_RS_PRED_40 "setp.ne.b32 p, %45, 0;\n"
#define TMAKIT_WG_SS_PRED_48 "setp.ne.b32 p, %50, 0;\n"
#define TMAKIT_WG_SS_TRANS_48 ", %48, %49, p, 1, 1, %51, %52;"
#define TMAKIT_WG_SS_SCALE_48 ", %48, %49, p, 1, 1;"
#define TMAKIT_WG_SS_INT_48 ", %48, %49, p;"
#define TMAKIT_WG_RS_TAIL_48 ", {%48, %49, %50, %51}, %52, p, 1, 1, %54;"
#define TMAKIT_WG_RS_PRED_48 "setp.ne.b32 p, %53, 0;\n"
#define TMAKIT_WG_SS_PRED_56 "setp.ne.b32 p, %58, 0;\n"
#define TMAKIT_WG_SS_TRANS_56 ", %56, %57, p, 1, 1, %59, %60;"
#define TMAKIT_WG_SS_SCALE_56 ", %56, %57, p, 1, 1;"
#define TMAKIT_WG_SS_INT_56 ", %56, %57, p;"
#define TMAKIT_WG_RS_TAIL_56 ", {%56, %57, %58, %59}, %60, p, 1, 1, %62;"
#define TMAKIT_WG_RS_PRED_56 "setp.ne.b32 p, %61, 0;\n"
#define TMAKIT_WG_SS_PRED_64 "setp.ne.b32 p, %66, 0;\n"
#define TMAKIT_WG_SS_TRANS_64 ", %64, %65, p, 1, 1, %67, %68;"
#define TMAKIT_WG_SS_SCALE_64 ", %64, %65, p, 1, 1;"
#define TMAKIT_WG_SS_INT_64 ", %64, %65, p;"
#define TMAKIT_WG_RS_TAIL_64 ", {%64, %65, %66, %67}, %68, p, 1, 1, %70;"
#define TMAKIT_WG_RS_PRED_64 "setp.ne.b32 p, %69, 0;\n"
#define TMAKIT_WG_SS_PRED_72 "setp.ne.b32 p, %74, 0;\n"
#define TMAKIT_WG_SS_TRANS_72 ", %72, %73, p, 1, 1, %75, %76;"
#define TMAKIT_WG_SS_SCALE_72 ", %72, %73, p, 1, 1;"
#define TMAKIT_WG_SS_INT_72 ", %72, %73, p;"
#define TMAKIT_WG_RS_TAIL_72 ", {%72, %73, %74, %75}, %76, p, 1, 1, %78;"
#define TMAKIT_WG_RS_PRED_72 "setp.ne.b32 p, %77, 0;\n"
#define TMAKIT_WG_SS_PRED_80 "setp.ne.b32 p, %82, 0;\n"
#define TMAKIT_WG_SS_TRANS_80 ", %80, %81, p, 1, 1, %83, %84;"
#define TMAKIT_WG_SS_SCALE_80 ", %80, %81, p, 1, 1;"
#define TMAKIT_WG_SS_INT_80 ", %80, %81, p;"
#define TMAKIT_WG_RS_TAIL_80 ", {%80, %81, %82, %83}, %84, p, 1, 1, %86;"
#define TMAKIT_WG_RS_PRED_80 "setp.ne.b32 p, %85, 0;\n"
#define TMAKIT_WG_SS_PRED_88 "setp.ne.b32 p, %90, 0;\n"
#define TMAKIT_WG_SS_TRANS_88 ", %88, %89, p, 1, 1, %91, %92;"
#define TMAKIT_WG_SS_SCALE_88 ", %88, %89, p, 1, 1;"
#define TMAKIT_WG_SS_INT_88 ", %88, %89, p;"
#define TMAKIT_WG_RS_TAIL_88 ", {%88, %89, %90, %91}, %92, p, 1, 1, %94;"
#define TMAKIT_WG_RS_PRED_88 "setp.ne.b32 p, %93, 0;\n"
#define TMAKIT_WG_SS_PRED_96 "setp.ne.b32 p, %98, 0;\n"
#define TMAKIT_WG_SS_TRANS_96 ", %96, %97, p, 1, 1, %99, %100;"
#define TMAKIT_WG_SS_SCALE_96 ", %96, %97, p, 1, 1;"
#define TMAKIT_WG_SS_INT_96 ", %96, %97, p;"
#define TMAKIT_WG_RS_TAIL_96 ", {%96, %97, %98, %99}, %100, p, 1, 1, %102;"
#define TMAKIT_WG_RS_PRED_96 "setp.ne.b32 p, %101, 0;\n"
#define TMAKIT_WG_SS_PRED_104 "setp.ne.b32 p, %106, 0;\n"
#define TMAKIT_WG_SS_TRANS_104 ", %104, %105, p, 1, 1, %107, %108;"
#define TMAKIT_WG_SS_SCALE_104 ", %104, %105, p, 1, 1;"
#define TMAKIT_WG_SS_INT_104 ", %104, %105, p;"
#define TMAKIT_WG_RS_TAIL_104 ", {%104, %105, %106, %107}, %108, p, 1, 1, %110;"
#define TMAKIT_WG_RS_PRED_104 "setp.ne.b32 p, %109, 0;\n"
#define TMAKIT_WG_SS_PRED_112 "setp.ne.b32 p, %114, 0;\n"
#define TMAKIT_WG_SS_TRANS_112 ", %112, %113, p, 1, 1, %115, %116;"
#define TMAKIT_WG_SS_SCALE_112 ", %112, %113, p, 1, 1;"
#define TMAKIT_WG_SS_INT_112 ", %112, %113, p;"
#define TMAKIT_WG_RS_TAIL_112 ", {%112, %113, %114, %115}, %116, p, 1, 1, %118;"
#define TMAKIT_WG_RS_PRED_112 "setp.ne.b32 p, %117, 0;\n"
#define TMAKIT_WG_SS_PRED_120 "setp.ne.b32 p, %122, 0;\n"
#define TMAKIT_WG_SS_TRANS_120 ", %120, %121, p, 1, 1, %123, %124;"
#define TMAKIT_WG_SS_SCALE_120 ", %120, %121, p, 1, 1;"
#define TMAKIT_WG_SS_INT_120 ", %120, %121, p;"
#define TMAKIT_WG_RS_TAIL_120 ", {%120, %121, %122, %123}, %124, p, 1, 1, %126;"
#define TMAKIT_WG_RS_PRED_120 "setp.ne.b32 p, %125, 0;\n"
#define TMAKIT_WG_SS_PRED_128 "setp.ne.b32 p, %130, 0;\n"
#define TMAKIT_WG_SS_TRANS_128 ", %128, %129, p, 1, 1, %131, %132;"
#define TMAKIT_WG_SS_SCALE_128 ", %128, %129, p, 1, 1;"
#define TMAKIT_WG_SS_INT_128 ", %128, %129, p;"
#define TMAKIT_WG_RS_TAIL_128 ", {%128, %129, %130, %131}, %132, p, 1, 1, %134;"
#define TMAKIT_WG_RS_PRED_128 "setp.ne.b32 p, %133, 0;\n"

// wgmma.mma_async with A and B from shared memory. FORM: TRANS (16-bit, with imm-trans), SCALE (tf32/fp8), INT.
#define TMAKIT_WGMMA_SS(N, R, K, D, TA, TB, FORM, C, ...)                                                          \
  asm volatile("{\n.reg .pred p;\n" TMAKIT_WG_SS_PRED_##R "wgmma.mma_async.sync.aligned.m64n" #N "k" #K "." #D    \
               "." #TA "." #TB " " TMAKIT_WG_REGS_##R TMAKIT_WG_SS_##FORM##_##R "\n}"                             \
               : TMAKIT_WG_ACC_##R(C)                                                                             \
               : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(scale_d)) __VA_ARGS__                            \
               : "memory")
#define TMAKIT_WG_TRANS_OPERANDS , "n"(int(TransA)), "n"(int(TransB))
// wgmma.mma_async with A (64 x K) from registers and B from shared memory (16-bit types).
#define TMAKIT_WGMMA_RS(N, R, TYPE)                                                                          \
  asm volatile("{\n.reg .pred p;\n" TMAKIT_WG_RS_PRED_##R                                                   \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #TYPE "." #TYPE " " TMAKIT_WG_REGS_##R      \
               TMAKIT_WG_RS_TAIL_##R "\n}"                                                                   \
               : TMAKIT_WG_ACC_##R(TMAKIT_WG_F)                                                              \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(scale_d)),   \
                 "n"(int(TransB))                                                                            \
               : "memory")

// Expand BODY(N, R) for the compile-time N (a multiple of 16 from 16 to 256; R = N / 2).
#define TMAKIT_WG_BY_N(N, BODY)                                                                               \
  static_assert(N % 16 == 0 && N >= 16 && N <= 256, "m64nNkK with N a multiple of 16, 16..256");              \
  if constexpr (N == 16) {                                                                                    \
    BODY(16, 8);                                                                                              \
  } else if constexpr (N == 32) {                                                                             \
    BODY(32, 16);                                                                                             \
  } else if constexpr (N == 48) {                                                                             \
    BODY(48, 24);                                                                                             \
  } else if constexpr (N == 64) {                                                                             \
    BODY(64, 32);                                                                                             \
  } else if constexpr (N == 80) {                                                                             \
    BODY(80, 40);                                                                                             \
  } else if constexpr (N == 96) {                                                                             \
    BODY(96, 48);                                                                                             \
  } else if constexpr (N == 112) {                                                                            \
    BODY(112, 56);                                                                                            \
  } else if constexpr (N == 128) {                                                                            \
    BODY(128, 64);                                                                                            \
  } else if constexpr (N == 144) {                                                                            \
    BODY(144, 72);                                                                                            \
  } else if constexpr (N == 160) {                                                                            \
    BODY(160, 80);                                                                                            \
  } else if constexpr (N == 176) {                                                                            \
    BODY(176, 88);                                                                                            \
  } else if constexpr (N == 192) {                                                                            \
    BODY(192, 96);                                                                                            \
  } else if constexpr (N == 208) {                                                                            \
    BODY(208, 104);                                                                                           \
  } else if constexpr (N == 224) {                                                                            \
    BODY(224, 112);                                                                                           \
  } else if constexpr (N == 240) {                                                                            \
    BODY(240, 120);                                                                                           \
  } else {                                                                                                    \
    BODY(256, 128);                                                                                           \
  }

namespace tmakit {

// The operand types wgmma takes (PTX ISA 9.7.15.5.2, .atype / .btype).
enum class WgmmaType : uint32_t { kBf16 = 0, kF16 = 1, kTf32 = 2, kE4m3 = 3, kE5m2 = 4, kS8 = 5, kU8 = 6 };

// Bytes of one element and elements of K in one instruction (always 32 bytes of K).
TMAKIT_HD constexpr uint32_t wgmma_type_bytes(WgmmaType t) {
  return t == WgmmaType::kTf32 ? 4u : (t == WgmmaType::kBf16 || t == WgmmaType::kF16) ? 2u : 1u;
}
TMAKIT_HD constexpr uint32_t wgmma_k(WgmmaType t) { return 32u / wgmma_type_bytes(t); }
TMAKIT_HD constexpr bool wgmma_is_integer(WgmmaType t) { return t == WgmmaType::kS8 || t == WgmmaType::kU8; }

// ---------------------------------------------------------------------------------------------------------
// The shared-memory matrix descriptor (PTX ISA 9.7.15.5.1.2.2 "Matrix Descriptor Format"), 64 bits:
//   bits  0-13  matrix start address >> 4 (18-bit shared address, 16-byte units)
//   bits 16-29  leading dimension byte offset >> 4 (LBO)
//   bits 32-45  stride dimension byte offset >> 4 (SBO)
//   bits 49-51  matrix base offset: where the swizzle pattern's repeat starts, (pattern start >> 7) & 7, when that
//               is not on the pattern's 1024/512/256-byte boundary (0 for stages aligned to it)
//   bits 62-63  swizzle mode: 0 none (interleave), 1 = 128B, 2 = 64B, 3 = 32B
// The host derives every field from the TensorMap that fills the stage (tmakit/layout/wgmma.py,
// wgmma_descriptors) and hands kernels the descriptors of a stage at shared address 0; wgmma_desc_rebase moves one
// to the stage's address.
enum WgmmaSwizzle : uint32_t { kWgmmaSwizzleNone = 0, kWgmmaSwizzle128B = 1, kWgmmaSwizzle64B = 2, kWgmmaSwizzle32B = 3 };

TMAKIT_HD uint64_t wgmma_make_desc(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes, uint32_t swizzle,
                                   uint32_t base_offset = 0) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFFu) >> 4) |
         (static_cast<uint64_t>((lbo_bytes & 0x3FFFFu) >> 4) << 16) |
         (static_cast<uint64_t>((sbo_bytes & 0x3FFFFu) >> 4) << 32) |
         (static_cast<uint64_t>(base_offset & 7u) << 49) | (static_cast<uint64_t>(swizzle & 3u) << 62);
}

// The descriptor `desc_at_zero` (derived for a stage at shared address 0) for the same stage at `smem_addr`: only
// the start address moves (a start below 256 KiB never carries out of its 14 bits). The base offset stays, so
// `smem_addr` is on the swizzle's repeat boundary (1024/512/256 bytes: where TMA writes swizzled boxes).
TMAKIT_HD uint64_t wgmma_desc_rebase(uint64_t desc_at_zero, uint32_t smem_addr) {
  return desc_at_zero + ((smem_addr & 0x3FFFFu) >> 4);
}

// A descriptor's fields back (bytes; the swizzle field as encoded), for kernels that check the descriptors they are
// given against their own stage layout at compile time.
TMAKIT_HD constexpr uint32_t wgmma_desc_start(uint64_t desc) { return static_cast<uint32_t>(desc & 0x3FFFu) << 4; }
TMAKIT_HD constexpr uint32_t wgmma_desc_lbo(uint64_t desc) { return static_cast<uint32_t>((desc >> 16) & 0x3FFFu) << 4; }
TMAKIT_HD constexpr uint32_t wgmma_desc_sbo(uint64_t desc) { return static_cast<uint32_t>((desc >> 32) & 0x3FFFu) << 4; }
TMAKIT_HD constexpr uint32_t wgmma_desc_swizzle(uint64_t desc) { return static_cast<uint32_t>(desc >> 62); }

// TMA swizzle mode (swizzle.cuh: 0 none, 1 32B, 2 64B, 3 128B) -> the descriptor's swizzle field.
TMAKIT_HD uint32_t wgmma_swizzle_from_tma(uint32_t tma_mode) {
  return tma_mode == 3u ? kWgmmaSwizzle128B : tma_mode == 2u ? kWgmmaSwizzle64B : tma_mode == 1u ? kWgmmaSwizzle32B
                                                                                                 : kWgmmaSwizzleNone;
}

// Accumulator fragment coordinates (see the header comment): register i of thread t (0..127).
TMAKIT_HD int wgmma_d_row(int t, int i) { return 16 * (t >> 5) + ((t & 31) >> 2) + 8 * ((i >> 1) & 1); }
TMAKIT_HD int wgmma_d_col(int t, int i) { return 8 * (i >> 2) + 2 * (t & 3) + (i & 1); }

// wgmma.fence.sync.aligned: earlier register writes (accumulators, A fragments) are ordered before the next
// wgmma reads them. The warpgroup, before the first wgmma of a batch and after touching the accumulators.
__device__ __forceinline__ void wgmma_fence() {
#if TMAKIT_HAS_SM90
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#else
  TMAKIT_REQUIRES_SM90();
#endif
}

// wgmma.commit_group.sync.aligned: close the batch of wgmma issued since the last commit. The warpgroup.
__device__ __forceinline__ void wgmma_commit_group() {
#if TMAKIT_HAS_SM90
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#else
  TMAKIT_REQUIRES_SM90();
#endif
}

// wgmma.wait_group.sync.aligned N: wait until at most N committed batches are pending; then their accumulators
// may be read and their shared-memory operands overwritten. The warpgroup. Follow it with wgmma_fence_operands on
// the accumulators it completes, before any code reads them.
template <int N>
__device__ __forceinline__ void wgmma_wait_group() {
#if TMAKIT_HAS_SM90
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
#else
  TMAKIT_REQUIRES_SM90();
#endif
}

// Keeps the compiler from moving accumulator reads/writes across an asynchronous wgmma region: after a
// wgmma_wait_group (before reading the results) and before the next batch's wgmma_fence (after writing them).
template <int R>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int R>
__device__ __forceinline__ void wgmma_fence_operands(int32_t (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+r"(d[i])::"memory");
}
// Accumulators kept as n8 tiles x 4 registers (attention's S and O).
template <int R, int C>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[R][C]) {
#pragma unroll
  for (int i = 0; i < R; ++i) wgmma_fence_operands(d[i]);
}

// wgmma.mma_async.sync.aligned.m64nNkK.f32.A.B, A and B from shared memory: d (64 x N fp32) = A (64 x K) * B (K x N)
// + (scale_d ? d : 0), K = wgmma_k(A). TransA / TransB: 0 = K-major, 1 = MN-major (imm-trans; 16-bit types only).
// N a multiple of 16 from 16 to 256. The warpgroup.
template <int N, WgmmaType A, WgmmaType B, bool TransA = false, bool TransB = false>
__device__ __forceinline__ void wgmma_mma_async_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, bool scale_d) {
  static_assert(!wgmma_is_integer(A) && !wgmma_is_integer(B), "s8/u8 operands accumulate into int32_t registers");
  static_assert(wgmma_type_bytes(A) == wgmma_type_bytes(B) && (A == B || wgmma_type_bytes(A) == 1),
                "A and B: both bf16, both f16, both tf32, or e4m3/e5m2 in any mix");
  static_assert(wgmma_type_bytes(A) == 2 || (!TransA && !TransB), "only 16-bit operands may be MN-major");
#if TMAKIT_HAS_SM90
#define TMAKIT_BODY(NN, R)                                                                                      \
  if constexpr (A == WgmmaType::kBf16) TMAKIT_WGMMA_SS(NN, R, 16, f32, bf16, bf16, TRANS, TMAKIT_WG_F, TMAKIT_WG_TRANS_OPERANDS); \
  else if constexpr (A == WgmmaType::kF16) TMAKIT_WGMMA_SS(NN, R, 16, f32, f16, f16, TRANS, TMAKIT_WG_F, TMAKIT_WG_TRANS_OPERANDS); \
  else if constexpr (A == WgmmaType::kTf32) TMAKIT_WGMMA_SS(NN, R, 8, f32, tf32, tf32, SCALE, TMAKIT_WG_F); \
  else if constexpr (A == WgmmaType::kE4m3 && B == WgmmaType::kE4m3) TMAKIT_WGMMA_SS(NN, R, 32, f32, e4m3, e4m3, SCALE, TMAKIT_WG_F); \
  else if constexpr (A == WgmmaType::kE4m3) TMAKIT_WGMMA_SS(NN, R, 32, f32, e4m3, e5m2, SCALE, TMAKIT_WG_F); \
  else if constexpr (B == WgmmaType::kE4m3) TMAKIT_WGMMA_SS(NN, R, 32, f32, e5m2, e4m3, SCALE, TMAKIT_WG_F); \
  else TMAKIT_WGMMA_SS(NN, R, 32, f32, e5m2, e5m2, SCALE, TMAKIT_WG_F)
  TMAKIT_WG_BY_N(N, TMAKIT_BODY)
#undef TMAKIT_BODY
#else
  TMAKIT_REQUIRES_SM90();
#endif
}

// wgmma.mma_async.sync.aligned.m64nNk32.s32.A.B (A, B in {s8, u8}), from shared memory: d (64 x N int32) = A B
// (+ d). K-major operands. The warpgroup.
template <int N, WgmmaType A, WgmmaType B, bool TransA = false, bool TransB = false>
__device__ __forceinline__ void wgmma_mma_async_ss(int32_t (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, bool scale_d) {
  static_assert(wgmma_is_integer(A) && wgmma_is_integer(B), "int32 accumulators take s8/u8 operands");
  static_assert(!TransA && !TransB, "only 16-bit operands may be MN-major");
#if TMAKIT_HAS_SM90
#define TMAKIT_BODY(NN, R)                                                                                    \
  if constexpr (A == WgmmaType::kS8 && B == WgmmaType::kS8) TMAKIT_WGMMA_SS(NN, R, 32, s32, s8, s8, INT, TMAKIT_WG_I); \
  else if constexpr (A == WgmmaType::kS8) TMAKIT_WGMMA_SS(NN, R, 32, s32, s8, u8, INT, TMAKIT_WG_I);                \
  else if constexpr (B == WgmmaType::kS8) TMAKIT_WGMMA_SS(NN, R, 32, s32, u8, s8, INT, TMAKIT_WG_I);                \
  else TMAKIT_WGMMA_SS(NN, R, 32, s32, u8, u8, INT, TMAKIT_WG_I)
  TMAKIT_WG_BY_N(N, TMAKIT_BODY)
#undef TMAKIT_BODY
#else
  TMAKIT_REQUIRES_SM90();
#endif
}

// wgmma.mma_async.sync.aligned.m64nNk16.f32.T.T with A from registers: a[0..3] is the warp's 16 x 16 slice of A (rows
// 16w..16w+15) in the m16n8k16 A-fragment order (mma_sync.cuh's MmaM16N8K16Layout). A is K-major; TransB as above.
// T in {bf16, f16}. The warpgroup.
template <int N, WgmmaType T, bool TransB = false>
__device__ __forceinline__ void wgmma_mma_async_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b,
                                                   bool scale_d = true) {
  static_assert(T == WgmmaType::kBf16 || T == WgmmaType::kF16, "register A operands here are bf16 or f16");
#if TMAKIT_HAS_SM90
#define TMAKIT_BODY(NN, R)                                         \
  if constexpr (T == WgmmaType::kBf16) TMAKIT_WGMMA_RS(NN, R, bf16); \
  else TMAKIT_WGMMA_RS(NN, R, f16)
  TMAKIT_WG_BY_N(N, TMAKIT_BODY)
#undef TMAKIT_BODY
#else
  TMAKIT_REQUIRES_SM90();
#endif
}

// setmaxnreg.inc.sync.aligned.u32 / setmaxnreg.dec.sync.aligned.u32: raise / lower the calling warpgroup's
// per-thread register count to R (24..256, a multiple of 8). Every thread of the warpgroup.
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(R >= 24 && R <= 256 && R % 8 == 0, "setmaxnreg: 24..256, a multiple of 8");
#if TMAKIT_HAS_SM90
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R));
#else
  TMAKIT_REQUIRES_SM90();
#endif
}
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(R >= 24 && R <= 256 && R % 8 == 0, "setmaxnreg: 24..256, a multiple of 8");
#if TMAKIT_HAS_SM90
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R));
#else
  TMAKIT_REQUIRES_SM90();
#endif
}

}  // namespace tmakit
