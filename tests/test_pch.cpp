// The donor of the precompiled header every LibTorch test reuses (<ATen/ATen.h> + test_paths.hpp;
// ddo_test_uses_aten in cmake/ddo_testing.cmake): this file compiles nothing of its own.
