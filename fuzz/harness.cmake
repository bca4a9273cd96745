# The fuzz targets, shared by the libFuzzer build (fuzz/CMakeLists.txt, CELLM_FUZZ=ON) and the
# corpus replay tests of the default build (tests/fuzz_regression/): one source per target,
# fuzz/<target>.cpp, defining LLVMFuzzerTestOneInput (and LLVMFuzzerInitialize when it loads
# something once). scripts/fuzz and the replay test take the list from here.
set(CELLM_FUZZ_TARGETS fuzz_gguf fuzz_tokenizer fuzz_chat_template fuzz_server_request)
set(CELLM_FUZZ_DIR ${CMAKE_CURRENT_LIST_DIR})
# fuzz_server_request needs only the request parser of src/server/ (and the sampler's check of
# what it parses, and the JSON text of its error bodies), not cellm_server, which links the
# whole engine: its sources are compiled in, over cellm_core alone (no models, no support
# library).
set(CELLM_FUZZ_SOURCES_fuzz_server_request
    ${PROJECT_SOURCE_DIR}/src/server/completion_request.cpp ${PROJECT_SOURCE_DIR}/src/server/api_error.cpp
    ${PROJECT_SOURCE_DIR}/src/batching/json_text.cpp ${PROJECT_SOURCE_DIR}/src/batching/sampler.cpp
    ${PROJECT_SOURCE_DIR}/src/batching/token_filter.cpp)
set(CELLM_FUZZ_LIBS_fuzz_server_request cellm_core nlohmann_json::nlohmann_json)

# The shared support code (fuzz/support/), compiled once for every target of a build.
if(NOT TARGET cellm_fuzz_support)
  file(GLOB support CONFIGURE_DEPENDS ${CELLM_FUZZ_DIR}/support/*.cpp)
  add_library(cellm_fuzz_support STATIC ${support})
  target_link_libraries(cellm_fuzz_support PUBLIC cellm_model cellm_tokenizer nlohmann_json::nlohmann_json)
  target_include_directories(cellm_fuzz_support PUBLIC ${CELLM_FUZZ_DIR})
  target_compile_definitions(cellm_fuzz_support PUBLIC CELLM_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  cellm_warnings(cellm_fuzz_support)
endif()

# An executable `exe` (in bin/) of fuzz target `target` from the given sources, linked with
# CELLM_FUZZ_LIBS_<target>, or by default the support code and the layers it uses.
function(cellm_fuzz_executable exe target)
  add_executable(${exe} ${ARGN})
  if(DEFINED CELLM_FUZZ_LIBS_${target})
    target_link_libraries(${exe} PRIVATE ${CELLM_FUZZ_LIBS_${target}})
    target_include_directories(${exe} PRIVATE ${CELLM_FUZZ_DIR})
  else()
    target_link_libraries(${exe} PRIVATE cellm_fuzz_support)
  endif()
  set_target_properties(${exe} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
  cellm_warnings(${exe})
endfunction()
