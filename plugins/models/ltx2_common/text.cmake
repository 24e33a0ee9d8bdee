# ddo_ltx2_text: LTX2Pipeline's prompt path (models.md §5.8): prompts stripped, tokenized with the Gemma tokenizer
# (left padding to max_sequence_length), every hidden state of the Gemma-3 text tower stacked for the connectors,
# the negative prompt and the per-prompt repeat of encode_prompt.
ddo_ltx2_part(ddo_ltx2_text SOURCES src/prompt_encoder.cpp LIBS ddo_gemma3 ddo_sentencepiece)
