# Gemma-3 text path (LTX-2's prompt encoder), included from this folder's CMakeLists.txt. Two static libraries,
# linked into the plugins that need them (position-independent, hidden symbols, as ddo_tokenizers/ddo_text_models):
#   ddo_sentencepiece  torch-free: the Gemma tokenizer over a checkpoint's tokenizer.model with Debian's
#                      libsentencepiece (pkg-config sentencepiece), the added tokens and padding of transformers'
#                      GemmaTokenizer
#   ddo_gemma3         on ATen: the Gemma-3 text tower (decoder layers as execution groups of the model kit),
#                      returning every hidden state
add_library(ddo_sentencepiece STATIC ${CMAKE_CURRENT_LIST_DIR}/src/sentencepiece_tokenizer.cpp)
target_include_directories(ddo_sentencepiece PUBLIC ${CMAKE_CURRENT_LIST_DIR}/src)
target_link_libraries(ddo_sentencepiece PUBLIC ddo_core PRIVATE ddo_compile_options PkgConfig::SENTENCEPIECE
  nlohmann_json::nlohmann_json)
set_target_properties(ddo_sentencepiece PROPERTIES
  CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON POSITION_INDEPENDENT_CODE ON)

add_library(ddo_gemma3 STATIC ${CMAKE_CURRENT_LIST_DIR}/src/gemma3_text_model.cpp)
target_include_directories(ddo_gemma3 PUBLIC ${CMAKE_CURRENT_LIST_DIR}/src)
target_link_libraries(ddo_gemma3 PUBLIC ddo_model PRIVATE ddo_compile_options nlohmann_json::nlohmann_json)
target_precompile_headers(ddo_gemma3 REUSE_FROM ddo_model_pch)  # core/model/CMakeLists.txt
set_target_properties(ddo_gemma3 PROPERTIES
  CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON POSITION_INDEPENDENT_CODE ON)
