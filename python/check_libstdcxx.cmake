# Run after the extension is linked (cmake -DELF=... -DREADELF=... -P check_libstdcxx.cmake):
# refuses an extension that does not load libstdc++.so. A compiler that copies libstdc++ into
# shared objects (GCC configured with --with-static-standard-libraries) gives the extension a
# second C++ library beside the one torch has loaded; their std::locale facets disagree and the
# extension crashes at its first formatted number. Programs built with it run fine.
execute_process(COMMAND ${READELF} -d ${ELF} OUTPUT_VARIABLE dynamic RESULT_VARIABLE status)
if(status EQUAL 0 AND NOT dynamic MATCHES "NEEDED[^\n]*libstdc\\+\\+")
  file(REMOVE ${ELF})
  message(FATAL_ERROR
    "${ELF} carries its own copy of libstdc++ (this compiler links it statically into shared "
    "objects), which crashes beside torch's: configure the build with a compiler that links "
    "libstdc++ dynamically, e.g. -DCMAKE_CXX_COMPILER=/usr/bin/g++ (scripts/gpu-build picks "
    "one itself)")
endif()
