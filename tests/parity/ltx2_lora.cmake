# LoRA (issue 27) references for the ltx2_video and ltx2_image plugins (tools/reference/ltx2_lora_fixtures.py): the
# tiny LTX-2.0 pipeline checkpoint (ltx2_pipeline_fixtures.py, case "plain") and the tiny LTX-2 image checkpoint
# (ltx2_image_fixtures.py, case "base_pag"), each with two peft LoRAs written as diffusers/PEFT, ComfyUI and
# Lightricks' original-name files, and the outputs with none, one and two of them applied by diffusers + peft.
# Fixtures only (no test in this file). Generated into the build tree, never
# committed: by the build (target ltx2_lora_fixtures, part of ALL) and, if missing, by the ctest FIXTURES_SETUP test.
# The cache key covers the builders the script imports (fixture_cache.py hashes tools/reference imports transitively).
if(TARGET ddo_ltx2_pipeline AND TARGET ddo_ltx2_image)
  set(LTX2_LORA_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/ltx2_lora)
  ddo_reference_fixtures(ltx2_lora SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/ltx2_lora_fixtures.py
    DIR ${LTX2_LORA_FIXTURE_DIR} COMMENT "generating LTX-2 LoRA fixtures with diffusers and peft")
endif()
