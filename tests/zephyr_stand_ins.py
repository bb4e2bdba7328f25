"""Stand-ins for the Zephyr CMake functions an export's zephyr/CMakeLists.txt calls, written
from their documented behaviour (Zephyr's cmake/modules/extensions.cmake): a library named and
made current, sources, definitions and include folders added to it, a linker snippet recorded
for a location (in linker_snippets.txt of the build folder). With them the module's
CMakeLists.txt runs for real in plain CMake (Zephyr is not installed where the suite runs)."""
from __future__ import annotations

STAND_INS = """
cmake_minimum_required(VERSION 3.20)
project(zephyr_stand_in C)
macro(zephyr_library_named name)
  set(ZEPHYR_CURRENT_LIBRARY ${name})
  set_property(GLOBAL PROPERTY stand_in_library ${name})
  add_library(${name} STATIC "")
endmacro()
function(zephyr_library_sources)
  target_sources(${ZEPHYR_CURRENT_LIBRARY} PRIVATE ${ARGN})
endfunction()
function(zephyr_library_compile_definitions)
  target_compile_definitions(${ZEPHYR_CURRENT_LIBRARY} PRIVATE ${ARGN})
endfunction()
function(zephyr_include_directories)
  include_directories(${ARGN})
endfunction()
function(zephyr_linker_sources location file)
  file(APPEND "${CMAKE_BINARY_DIR}/linker_snippets.txt" "${location} ${file}\\n")
endfunction()
"""


def zephyr_project(symbol: str, after: str = "") -> str:
    """A CMakeLists.txt of an application that enables CONFIG_<symbol> and adds the module in
    folder ${MODULE}, then runs `after`."""
    return f"{STAND_INS}set(CONFIG_{symbol} y)\nadd_subdirectory(${{MODULE}}/zephyr module)\n{after}"
