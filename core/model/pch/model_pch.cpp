// The donor of the precompiled <ATen/ATen.h> that model plugins and their static parts reuse (core/model/CMakeLists.txt,
// ddo_model_pch): this file compiles nothing of its own.
