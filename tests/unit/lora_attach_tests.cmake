# LoRA factors follow the weight they adapt (issue 40 item 6; Note [Applying LoRA]): ComponentLora::attach on the
# CPU and the meta device (a second device every machine has), and model::linear's refusal of mixed devices.
if(TARGET ddo_model)
  ddo_add_gtest(lora_attach_test LABELS unit
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/lora_attach_test.cpp
    LIBS ddo_model)
  ddo_test_uses_aten(lora_attach_test)
endif()
