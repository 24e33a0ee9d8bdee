# LoRA on qwen_image_21 (issue 27; Note [LoRA files]): fixtures only, written by
# tools/reference/qwen_image_21_lora_fixtures.py (which builds on qwen_image_21_fixtures.py and
# qwen_image_21_quant_fixtures.py) into the build tree, never committed: the tiny checkpoint, two peft LoRAs in the
# diffusers/PEFT, kohya and ComfyUI key families, and diffusers' images with them (load_lora_weights), also on the
# SDNQ uint4 and GGUF Q4_K transformers.
if(TARGET qwen_image_21_impl)
  set(QI21L_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/qwen_image_21_lora)
  ddo_reference_fixtures(qwen_image_21_lora SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/qwen_image_21_lora_fixtures.py
    DIR ${QI21L_FIXTURE_DIR} COMMENT "making LoRAs with peft and running diffusers' load_lora_weights with them")
endif()
