// LeakSanitizer suppressions for third-party code only, compiled into ddo's executables when DDO_SANITIZE is on:
// the sanitizer runtime asks the executable for __lsan_default_suppressions(), also during gtest discovery, where no
// environment (LSAN_OPTIONS) can be passed. Every entry names a library that is not ours and says why.
extern "C" const char * __lsan_default_suppressions() {
    return
        // LibTorch's CUDA library allocates process-lifetime registries in static initialisers
        // (_GLOBAL__sub_I_CachingHostAllocator.cpp) and never frees them: reported in every binary that links
        // libtorch_cuda.so, before main() runs any ddo code.
        "leak:libtorch_cuda.so\n";
}
