# mitra_warnings(target): the project's warning flags on one target.
function(mitra_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra)
  if(MITRA_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
