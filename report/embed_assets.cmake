# Writes OUTPUT, a header that holds the page's style sheet and script as string constants:
#   cmake -DCSS=report_page.css -DJS=report_page.js -DOUTPUT=report_assets.h -P embed_assets.cmake
# Run at build time whenever either file changes (report/CMakeLists.txt).
function(mitra_embed variable file delimiter)
  file(READ ${file} text)
  string(FIND "${text}" ")${delimiter}\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "${file} contains )${delimiter}\", which ends the raw string it is embedded in")
  endif()
  set(${variable} "inline constexpr const char* k${variable} = R\"${delimiter}(${text})${delimiter}\";\n"
      PARENT_SCOPE)
endfunction()

mitra_embed(ReportStyle ${CSS} CSS)
mitra_embed(ReportScript ${JS} JS)
file(WRITE ${OUTPUT}.tmp
  "// Generated from report_page.css and report_page.js by report/embed_assets.cmake.\n"
  "#pragma once\n\nnamespace mitra::report {\n\n${ReportStyle}\n${ReportScript}\n}  // namespace mitra::report\n")
file(COPY_FILE ${OUTPUT}.tmp ${OUTPUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUTPUT}.tmp)
