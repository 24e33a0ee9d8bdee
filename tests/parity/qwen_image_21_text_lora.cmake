# A text-encoder LoRA on qwen_image_21 from a prompt (issue 27; Note [LoRA files]): fixtures only, written by
# tools/reference/qwen_image_21_text_lora_fixtures.py (which builds on qwen_image_21_text_fixtures.py's checkpoint and
# qwen_image_21_lora_fixtures.py's lora_a; the cache follows those imports) into the build tree, never committed: the
# checkpoint ddo-host runs from a prompt, a peft LoRA on its Qwen3-VL language model (diffusers/PEFT and kohya keys),
# and diffusers' images from the prompt without it, with it at 0.7, and with it plus lora_a at 0.7 on the transformer.
if(TARGET qwen_image_21_impl)
  set(QI21TL_FIXTURE_DIR ${CMAKE_BINARY_DIR}/fixtures/qwen_image_21_text_lora)
  ddo_reference_fixtures(qwen_image_21_text_lora
    SCRIPT ${CMAKE_SOURCE_DIR}/tools/reference/qwen_image_21_text_lora_fixtures.py DIR ${QI21TL_FIXTURE_DIR}
    COMMENT "making a text-encoder LoRA with peft and running QwenImage21Pipeline from a prompt with it")
endif()
