# Text-model loaders that need no LibTorch: tokenizer.json values that `tokenizers` treats as the supported default
# ("" for null, true where it is inert) are accepted and encode the same ids.
if(TARGET ddo_tokenizers)
  ddo_add_gtest(bpe_tokenizer_equivalent_values_test LABELS unit
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/bpe_tokenizer_equivalent_values_test.cpp
    LIBS ddo_tokenizers nlohmann_json::nlohmann_json)
endif()
