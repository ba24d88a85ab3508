//===- AddressSanitizer.h - whether a test is built with ASan -----*- C++ -*-===//
//
// KILN_TEST_HAS_ASAN: 1 when the including test is built with
// AddressSanitizer (scripts/sanitize.sh, with clang or GCC), else 0. The
// CUDA tests use it where ASan's redzones take over from their own checks
// (FakeCudaApi's guard bytes) or report first (a stack overflow).
// codegen/cuda/CudaEmulation.h has its own test: it is included alone
// into host-built kernels.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_UNIT_CUDA_ADDRESSSANITIZER_H
#define KILN_TESTS_UNIT_CUDA_ADDRESSSANITIZER_H

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_TEST_HAS_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(KILN_TEST_HAS_ASAN)
#define KILN_TEST_HAS_ASAN 1
#endif
#ifndef KILN_TEST_HAS_ASAN
#define KILN_TEST_HAS_ASAN 0
#endif

#endif // KILN_TESTS_UNIT_CUDA_ADDRESSSANITIZER_H
