# Writes (MODE=write) or checks (MODE=check) docs/dialect/*.md: the markdown
# mlir-tblgen generates from the .td files, under a first line that says so.
# Run through `ninja kiln-docs` and the `docs-up-to-date` ctest test (see
# docs/CMakeLists.txt); needs KILN_SOURCE_DIR and KILN_BINARY_DIR.

# Each document: generated file (relative to the build tree), checked-in
# name under docs/dialect/, and what it is generated from.
set(KILN_DOCS
  "ir/KilnDialect.md" "KilnDialect.md"
    "ir/KilnOps.td (with ir/KilnDialect.td, ir/KilnAttrs.td, ir/KilnInterfaces.td) by mlir-tblgen -gen-dialect-doc"
  "ir/KilnAttrs.md" "KilnAttrs.md"
    "ir/KilnAttrs.td by mlir-tblgen -gen-attrdef-doc"
  "passes/Passes.md" "Passes.md"
    "passes/Passes.td by mlir-tblgen -gen-pass-doc"
)

if(NOT MODE MATCHES "^(write|check)$" OR NOT KILN_SOURCE_DIR OR NOT KILN_BINARY_DIR)
  message(FATAL_ERROR "usage: cmake -DMODE=write|check -DKILN_SOURCE_DIR=... "
                      "-DKILN_BINARY_DIR=... -P GenerateDocs.cmake")
endif()

set(refresh "run `cmake --build ${KILN_BINARY_DIR} --target kiln-docs` "
            "(or `ninja -C ${KILN_BINARY_DIR} kiln-docs`) and commit docs/dialect/")
string(CONCAT refresh ${refresh})

set(stale "")
list(LENGTH KILN_DOCS count)
math(EXPR last "${count} - 1")
foreach(i RANGE 0 ${last} 3)
  math(EXPR j "${i} + 1")
  math(EXPR k "${i} + 2")
  list(GET KILN_DOCS ${i} generated)
  list(GET KILN_DOCS ${j} name)
  list(GET KILN_DOCS ${k} origin)

  set(input "${KILN_BINARY_DIR}/${generated}")
  if(NOT EXISTS "${input}")
    message(FATAL_ERROR "${input} does not exist: build the project first "
                        "(it is written by the KilnIncGen and KilnPassesIncGen "
                        "targets)")
  endif()
  file(READ "${input}" body)
  set(expected "<!-- Generated from ${origin}; do not edit: run the kiln-docs target to refresh. -->\n${body}")

  set(output "${KILN_SOURCE_DIR}/docs/dialect/${name}")
  if(MODE STREQUAL "write")
    # Rewrite only what changed, so an unchanged file keeps its timestamp.
    set(current "")
    if(EXISTS "${output}")
      file(READ "${output}" current)
    endif()
    if(NOT current STREQUAL expected)
      file(WRITE "${output}" "${expected}")
      message(STATUS "wrote docs/dialect/${name}")
    endif()
  else()
    if(NOT EXISTS "${output}")
      list(APPEND stale "docs/dialect/${name} (missing)")
    else()
      file(READ "${output}" current)
      if(NOT current STREQUAL expected)
        list(APPEND stale "docs/dialect/${name}")
      endif()
    endif()
  endif()
endforeach()

if(stale)
  list(JOIN stale ", " stale)
  message(FATAL_ERROR "out of date with the .td files: ${stale}. To refresh, ${refresh}.")
endif()
if(MODE STREQUAL "check")
  message(STATUS "docs/dialect/ matches the generated documentation")
endif()
