# qwen_image_21 real-size structure test: the real Qwen-Image 2.1 transformer config with a synthetic
# (sparse, zero-filled) bf16 checkpoint of the real tensor shapes for 2 blocks, run through the core offload
# engine's disk route (CPU transport, the built linear allocator plugin).
if(TARGET qwen_image_21_impl)
  ddo_add_gtest(qwen_image_21_structure_test LABELS e2e TIMEOUT 900
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/qwen_image_21_structure_test.cpp
    LIBS qwen_image_21_impl)
  target_compile_definitions(qwen_image_21_structure_test PRIVATE QI21_PLUGIN_DIR="${CMAKE_BINARY_DIR}/lib/ddo/plugins")
  add_dependencies(qwen_image_21_structure_test linear)
endif()

# ddo-host on the parity fixture checkpoint: capacities.allocator_backend, allocator options and host staging as
# recorded in the run report.
if(TARGET qwen_image_21_impl AND TARGET qwen_image_21 AND TARGET ddo-host)
  ddo_add_gtest(qwen_image_21_placement_test LABELS e2e TIMEOUT 300
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/qwen_image_21_placement_test.cpp
    LIBS qwen_image_21_impl)
  target_compile_definitions(qwen_image_21_placement_test PRIVATE
    QI21_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/qwen_image_21" DDO_HOST_BIN="$<TARGET_FILE:ddo-host>")
  add_dependencies(qwen_image_21_placement_test ddo-host qwen_image_21 linear)
endif()

# ddo-host's outputs on the parity fixtures: an RGB VAE's PNG equals diffusers' pixels, RGBA stays RGBA, PNG text
# chunks, checkpoint identity across runs and --hash-weights.
if(TARGET qwen_image_21_impl AND TARGET qwen_image_21 AND TARGET ddo-host)
  ddo_add_gtest(qwen_image_21_outputs_test LABELS e2e TIMEOUT 300
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/qwen_image_21_outputs_test.cpp
    LIBS qwen_image_21_impl PNG::PNG)
  target_compile_definitions(qwen_image_21_outputs_test PRIVATE
    QI21_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/qwen_image_21" DDO_HOST_BIN="$<TARGET_FILE:ddo-host>")
  add_dependencies(qwen_image_21_outputs_test ddo-host qwen_image_21 linear ddo_manifest_main)
endif()

# ddo-host driven e2e tests on the fixtures: one helper (the host, the plugin, both allocators and the manifest built
# first; QI21_FIXTURE_DIR, DDO_HOST_BIN and DDO_PYTHON defined).
function(qi21_host_test name)
  cmake_parse_arguments(Q "" "TIMEOUT" "LIBS" ${ARGN})
  ddo_add_gtest(${name} LABELS e2e TIMEOUT ${Q_TIMEOUT} SOURCES ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/${name}.cpp LIBS ${Q_LIBS})
  target_compile_definitions(${name} PRIVATE DDO_PYTHON="${DDO_PYTHON}"
    QI21_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/qwen_image_21" DDO_HOST_BIN="$<TARGET_FILE:ddo-host>")
  add_dependencies(${name} ddo-host qwen_image_21 linear vmm ddo_manifest_main)
endfunction()

if(TARGET qwen_image_21 AND TARGET ddo-host AND DDO_PYTHON)
  # Settings whose effect lives in the model kit: a changed value changes the report, or the run is refused.
  qi21_host_test(qwen_image_21_settings_test TIMEOUT 300 LIBS nlohmann_json::nlohmann_json PNG::PNG)
  # The run command line: adjustments, refusals before loading (exit 2), no overwrite unasked, -o, --seed -1, log
  # level, signals, path locks.
  qi21_host_test(qwen_image_21_cli_test TIMEOUT 300 LIBS ddo_core PNG::PNG)
  # Every schema key and qwen_image_21 option changes the run or is refused; prints the keys without a test.
  qi21_host_test(qwen_image_21_key_effects_test TIMEOUT 600 LIBS ddo_core PNG::PNG)
endif()

# ddo-host from a text prompt on a checkpoint saved whole (the text-path fixtures).
if(TARGET qwen_image_21 AND TARGET ddo-host AND DDO_PYTHON)
  qi21_host_test(qwen_image_21_text_test TIMEOUT 600 LIBS qwen_image_21_impl PNG::PNG)
  target_compile_definitions(qwen_image_21_text_test PRIVATE QI21_TEXT_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/qwen_image_21_text"
    TEXT_QUANT_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/text_quant")
  if(TARGET text_quant_fixtures)
    add_dependencies(qwen_image_21_text_test text_quant_fixtures)
  endif()
endif()

# ddo-host --transformer FILE (Note [Component files]) on the quantized parity fixtures: the GGUF file equals the
# folder form; another model's file, an unused component's file and a truncated file are refused.
if(TARGET qwen_image_21 AND TARGET ddo-host AND DDO_PYTHON AND TARGET qwen_image_21_quant_fixtures)
  qi21_host_test(qwen_image_21_component_file_test TIMEOUT 300 LIBS nlohmann_json::nlohmann_json PNG::PNG ddo_bench_synthetic)
  target_compile_definitions(qwen_image_21_component_file_test PRIVATE
    QI21Q_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/qwen_image_21_quant")
  add_dependencies(qwen_image_21_component_file_test qwen_image_21_quant_fixtures)
endif()

# ddo-host --cache (issue 41) on the step-cache fixtures (tools/reference/qwen_image_21_cache_fixtures.py): the CLI
# path's per-step pattern equals diffusers' hooks', the report, the engine's skipped bytes, calibration, refusals.
if(TARGET qwen_image_21 AND TARGET ddo-host AND DDO_PYTHON AND TARGET qwen_image_21_cache_fixtures)
  qi21_host_test(qwen_image_21_cache_test TIMEOUT 600 LIBS nlohmann_json::nlohmann_json)
  target_compile_definitions(qwen_image_21_cache_test PRIVATE QI21C_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/qwen_image_21_cache")
  add_dependencies(qwen_image_21_cache_test qwen_image_21_cache_fixtures)
endif()

# LoRA through ddo-host (issue 27) against diffusers' load_lora_weights on qwen_image_21, ltx2_image and ltx2_video
# (tools/reference/qwen_image_21_lora_fixtures.py, ltx2_lora_fixtures.py): every key family, every route, quantized
# transformers, refusals.
if(TARGET qwen_image_21 AND TARGET ltx2_video AND TARGET ltx2_image AND TARGET ddo-host AND TARGET ddo_media AND DDO_PYTHON)
  ddo_add_gtest(lora_test LABELS e2e TIMEOUT 900
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/lora_test.cpp
    LIBS ddo_model ddo_media PNG::PNG)
  target_compile_definitions(lora_test PRIVATE
    QI21_LORA_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/qwen_image_21_lora"
    QI21_TEXT_LORA_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/qwen_image_21_text_lora"
    LTX2_LORA_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/ltx2_lora" DDO_HOST_BIN="$<TARGET_FILE:ddo-host>")
  ddo_test_uses_aten(lora_test)
  add_dependencies(lora_test ddo-host qwen_image_21 ltx2_video ltx2_image linear vmm ddo_manifest_main
    qwen_image_21_lora_fixtures qwen_image_21_text_lora_fixtures ltx2_lora_fixtures)
endif()

# ddo-host with condition images (--image, repeatable) on a checkpoint saved whole with its vision tower: the PNG
# equals QwenImage21Pipeline(prompt=..., image=[...]) for 1 and 3 references, RGB and RGBA, guidance on and off, KV
# cache on and off; every route of the vision tower and the transformer equal; bad references refused (exit 2).
if(TARGET qwen_image_21 AND TARGET ddo-host AND DDO_PYTHON AND TARGET qwen_image_21_reference_fixtures)
  qi21_host_test(qwen_image_21_reference_test TIMEOUT 900 LIBS qwen_image_21_impl PNG::PNG)
  target_compile_definitions(qwen_image_21_reference_test PRIVATE
    QI21_REF_FIXTURE_DIR="${CMAKE_BINARY_DIR}/fixtures/qwen_image_21_reference")
  add_dependencies(qwen_image_21_reference_test qwen_image_21_reference_fixtures)
endif()

