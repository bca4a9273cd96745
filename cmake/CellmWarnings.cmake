# Warnings for the project's own targets (not for imported ones).
function(cellm_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow=local -Wno-unused-parameter -Wno-missing-field-initializers>)
endfunction()
