# CELLM_FUZZ: every layer is compiled with libFuzzer's coverage hooks, AddressSanitizer and
# UndefinedBehaviorSanitizer, so a finding deep in the tokenizer or the GGUF reader is caught
# where it happens, not where its damage shows. Included before src/ by the top-level file.
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "CELLM_FUZZ needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++-14, "
                      "or use scripts/fuzz")
endif()
add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
                    -fno-omit-frame-pointer -g -Wno-unknown-warning-option)
add_link_options(-fsanitize=address,undefined)
