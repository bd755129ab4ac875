# CMake helpers shared by every part of FlashLadder.

# fl_require_package(<Name> <min-version> <debian-package> [TARGET <t>])
# Fails configure with the exact distro package to install.
function(fl_require_package name version pkg)
  cmake_parse_arguments(ARG "" "TARGET" "" ${ARGN})
  find_package(${name} ${version} QUIET)
  if(NOT ${name}_FOUND OR (ARG_TARGET AND NOT TARGET ${ARG_TARGET}))
    message(FATAL_ERROR
      "FlashLadder needs ${name} (>= ${version}), which was not found.\n"
      "Install it with:  sudo apt-get install ${pkg}\n"
      "(or run the README's install command, which installs every dependency)")
  endif()
endfunction()

# The commit every result names (run reports, ladder_bench): $FL_GIT_SHA when set (a tree copied
# with a .git that is not its own says so there; bench/pytorch/runinfo.py reads the same variable), else
# git's short sha at configure time, else "unknown".
find_package(Git QUIET)
set(FL_GIT_SHA "")
if(DEFINED ENV{FL_GIT_SHA} AND NOT "$ENV{FL_GIT_SHA}" STREQUAL "")
  set(FL_GIT_SHA $ENV{FL_GIT_SHA})
elseif(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short=12 HEAD WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
                  OUTPUT_VARIABLE FL_GIT_SHA OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
if(NOT FL_GIT_SHA)
  set(FL_GIT_SHA "unknown")
endif()

# Compile options shared by every CUDA target.
function(fl_cuda_options target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo>
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${FL_WERROR}>>:-Werror>)
  if(FL_PTXAS_VERBOSE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-v>)
  endif()
endfunction()
option(FL_PTXAS_VERBOSE "Print ptxas resource usage for every kernel" OFF)

# ---- Hopper (sm_90a) ----------------------------------------------------------------------
# wgmma and setmaxnreg exist only in the architecture-specific target sm_90a. It is built
# whenever CMAKE_CUDA_ARCHITECTURES names 90 in any form (90, 90-real, 90a, ...; "native" as
# detected; "all"/"all-major"). nvcc 13.0's -arch=sm_90a shorthand also ran a plain sm_90 pass
# that rejects them, so the targets get the explicit -gencode form and no other architecture.
set(FL_HOPPER_GENCODE "-gencode=arch=compute_90a,code=sm_90a")
set(FL_PTXAS_GUARD ${CMAKE_CURRENT_LIST_DIR}/ptxas_guard.sh)
set(FL_HOPPER OFF)
set(fl_archs ${CMAKE_CUDA_ARCHITECTURES})
if(fl_archs STREQUAL "native" AND DEFINED CMAKE_CUDA_ARCHITECTURES_NATIVE)
  set(fl_archs ${CMAKE_CUDA_ARCHITECTURES_NATIVE})
endif()
foreach(arch IN LISTS fl_archs)
  if(arch MATCHES "^90" OR arch STREQUAL "all" OR arch STREQUAL "all-major")
    set(FL_HOPPER ON)
  endif()
endforeach()
if(FL_HOPPER AND CMAKE_CUDA_COMPILER_VERSION VERSION_LESS 12.0)
  message(WARNING "sm_90a needs nvcc 12.0 or newer (found ${CMAKE_CUDA_COMPILER_VERSION}): "
                  "the Hopper rungs are built without their kernels")
  set(FL_HOPPER OFF)
endif()

# fl_hopper_target(<target>)
# Compiles the CUDA sources of <target> for sm_90a only when FL_HOPPER is ON, and defines
# FL_HOPPER_SM90A=1 for them; otherwise the target keeps the build's architectures and gets
# FL_HOPPER_SM90A=0, and its sources must leave their sm_90a kernels out (#if FL_HOPPER_SM90A)
# and register a `supports` that refuses with fl::hopper_supports(d, FL_HOPPER_SM90A) (tma.h):
# "needs an sm_90 GPU (built without sm_90a)". With FL_HOPPER, every CUDA compile of the target
# runs through common/ptxas_guard.sh, which fails it when ptxas reports setmaxnreg ignored
# (C7508: the kernel needs __launch_bounds__(threads, 1)) or wgmma serialized (C7510, C7511,
# C7515). ptxas prints those as "info", so -Werror cannot catch them; the guard reads its output
# (tests/cpu/test_hopper_sass.cpp proves a bad probe fails and the good one passes).
function(fl_hopper_target target)
  if(NOT FL_HOPPER)
    target_compile_definitions(${target} PRIVATE FL_HOPPER_SM90A=0)
    return()
  endif()
  find_program(FL_SH sh REQUIRED)
  set(launcher ${FL_SH} ${FL_PTXAS_GUARD})
  get_target_property(previous ${target} CUDA_COMPILER_LAUNCHER)  # e.g. ccache: runs inside
  if(previous)
    list(APPEND launcher ${previous})
  endif()
  set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES OFF
                        CUDA_COMPILER_LAUNCHER "${launcher}")
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${FL_HOPPER_GENCODE}>)
  target_compile_definitions(${target} PRIVATE FL_HOPPER_SM90A=1)
endfunction()

# fl_add_rung(NUMBER <n> NAME <folder-name> SOURCES <files...> LESSON <files...> [HOPPER])
# Registers a rung: its sources become the library fl_rung_<NN>, its main.cu
# becomes the executable bin/<NN_name> (created in fl_finish_rungs, once every
# rung is known, because a rung's report compares with the previous rung).
# The rung's sources must define  void fl::register_rung_<NN>(fl::Registry&).
# HOPPER: a Hopper-only rung (09, 10, 13), its library built by fl_hopper_target.
# LESSON: the rung's teaching text in reading order (tile constants, kernel, the other files a
# student reads as the lesson), the one list docs/lesson_diff.py reads for docs/lessons.md.
function(fl_add_rung)
  cmake_parse_arguments(ARG "HOPPER" "NUMBER;NAME" "SOURCES;LESSON" ${ARGN})
  foreach(f IN LISTS ARG_LESSON)
    if(NOT EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${f})
      message(FATAL_ERROR "fl_add_rung(${ARG_NAME}): LESSON file ${f} does not exist")
    endif()
  endforeach()
  set(lib fl_rung_${ARG_NUMBER})
  add_library(${lib} STATIC ${ARG_SOURCES})
  target_link_libraries(${lib} PUBLIC fl_cuda)
  target_include_directories(${lib} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  fl_cuda_options(${lib})
  if(ARG_HOPPER)
    fl_hopper_target(${lib})
  endif()
  set_property(GLOBAL APPEND PROPERTY FL_RUNG_NUMBERS ${ARG_NUMBER})
  set_property(GLOBAL APPEND PROPERTY FL_RUNG_NAMES ${ARG_NAME})
  set_property(GLOBAL APPEND PROPERTY FL_RUNG_MAINS ${CMAKE_CURRENT_SOURCE_DIR}/main.cu)
endfunction()

# Generates the registry (one call per rung, in ladder order), builds the
# library fl_rungs and one executable per rung plus fl_tour.
function(fl_finish_rungs)
  get_property(numbers GLOBAL PROPERTY FL_RUNG_NUMBERS)
  get_property(names GLOBAL PROPERTY FL_RUNG_NAMES)
  get_property(mains GLOBAL PROPERTY FL_RUNG_MAINS)
  set(decls "")
  set(calls "")
  foreach(n IN LISTS numbers)
    string(APPEND decls "void register_rung_${n}(Registry&);\n")
    string(APPEND calls "    register_rung_${n}(r);\n")
  endforeach()
  set(FL_REGISTRY_DECLS "${decls}")
  set(FL_REGISTRY_CALLS "${calls}")
  configure_file(${PROJECT_SOURCE_DIR}/common/src/registry_list.cpp.in
                 ${PROJECT_BINARY_DIR}/generated/registry_list.cpp @ONLY)
  # INTERFACE: the generated registry is compiled into each consumer, so the
  # runner (in fl_cuda) finds registry() whatever the static-library order.
  add_library(fl_rungs INTERFACE)
  target_sources(fl_rungs INTERFACE ${PROJECT_BINARY_DIR}/generated/registry_list.cpp)
  foreach(n IN LISTS numbers)
    target_link_libraries(fl_rungs INTERFACE fl_rung_${n})
  endforeach()
  target_link_libraries(fl_rungs INTERFACE fl_cuda)

  list(LENGTH numbers count)
  if(count GREATER 0)
    math(EXPR last "${count} - 1")
    foreach(i RANGE ${last})
      list(GET names ${i} name)
      list(GET mains ${i} main)
      add_executable(${name} ${main})
      target_link_libraries(${name} PRIVATE fl_rungs)
      fl_cuda_options(${name})
      set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
    endforeach()
  endif()
  add_executable(fl_tour ${PROJECT_SOURCE_DIR}/common/src/tour_main.cu)
  target_link_libraries(fl_tour PRIVATE fl_rungs)
  fl_cuda_options(fl_tour)
  set_target_properties(fl_tour PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin
                                            OUTPUT_NAME tour)
  # grade NN: the per-part score table of a rung (docs/labs/instructors.md).
  add_executable(fl_grade ${PROJECT_SOURCE_DIR}/common/src/grade_main.cu)
  target_link_libraries(fl_grade PRIVATE fl_rungs)
  fl_cuda_options(fl_grade)
  set_target_properties(fl_grade PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin
                                             OUTPUT_NAME grade)
  set(FL_RUNG_TARGETS ${names} PARENT_SCOPE)
endfunction()

# ---- the Python package (common/python) --------------------------------------------------
# fl_find_python_bindings(): with FL_BUILD_PYTHON, looks for the Python headers and nanobind
# (pip's: where `python3 -m nanobind --cmake_dir` points, else in build/pip, where the README's
# install command puts it with `pip install --target build/pip nanobind==2.4.0`; nothing is
# downloaded) and sets FL_PYTHON ON when both are there, else prints one line and leaves the
# package out. A macro, called before common/ is added: with FL_PYTHON every library is built
# position-independent, since the extension links the same objects as the executables into a
# shared module.
macro(fl_find_python_bindings)
  set(FL_PYTHON OFF)
  if(FL_BUILD_PYTHON)
    find_package(Python 3.8 COMPONENTS Interpreter Development.Module QUIET)
    set(fl_nb_dir "")
    if(Python_FOUND)
      execute_process(COMMAND ${Python_EXECUTABLE} -m nanobind --cmake_dir
                      OUTPUT_VARIABLE fl_nb_dir OUTPUT_STRIP_TRAILING_WHITESPACE
                      RESULT_VARIABLE fl_nb_rc ERROR_QUIET)
      if(NOT fl_nb_rc EQUAL 0)
        set(fl_nb_dir "")
      endif()
      # A cached nanobind_DIR (an earlier configure) is used first.
      find_package(nanobind 2.0 CONFIG QUIET
                   HINTS ${fl_nb_dir} ${PROJECT_SOURCE_DIR}/build/pip/nanobind/cmake)
    endif()
    if(Python_FOUND AND nanobind_FOUND)
      set(FL_PYTHON ON)
      set(CMAKE_POSITION_INDEPENDENT_CODE ON)
      message(STATUS "Python package flashladder: Python ${Python_VERSION} (${Python_EXECUTABLE}), "
                     "nanobind ${nanobind_VERSION}")
    elseif(NOT Python_FOUND)
      message(STATUS "Python package flashladder not built: no Python headers "
                     "(apt-get install python3-dev) for ${Python_EXECUTABLE}")
    else()
      message(STATUS "Python package flashladder not built: no nanobind for ${Python_EXECUTABLE} "
                     "(python3 -m pip install --target build/pip nanobind==2.4.0)")
    endif()
  endif()
endmacro()

# ---- NCCL (rung 12) ------------------------------------------------------------------------
# fl_find_nccl(): looks for NCCL's nccl.h and libnccl.so.2 and, when both are there, defines
# the IMPORTED target fl::nccl (the library by full path, its include directory) and sets
# FL_NCCL_FOUND, FL_NCCL_LIBRARY, FL_NCCL_INCLUDE_DIR and FL_NCCL_VERSION. Where it looks, in order:
#   1. FL_NCCL_ROOT (cache variable or environment): <root>/include/nccl.h, <root>/lib/libnccl.so*;
#   2. the PyPI wheel nvidia-nccl-cu13 (nvidia/nccl/{include,lib}), pinned in
#      steps/12_ring_attention/requirements.txt: in build/pip (where .ci/run and the README's
#      install command put it: pip install --target build/pip), else wherever the python3 on
#      PATH imports `nvidia.nccl` from (the GPU machine's own install, e.g. PyTorch's);
#   3. the system's NCCL (libnccl-dev; CUDA toolkit directories).
# The wheel ships libnccl.so.2 only (no unversioned .so), hence the full path; the rung's
# executable gets its directory as RPATH so it runs without LD_LIBRARY_PATH. Nothing is
# downloaded here.
set(FL_NCCL_ROOT "$ENV{FL_NCCL_ROOT}" CACHE PATH "NCCL install (include/nccl.h, lib/libnccl.so.2); empty = search")
function(fl_find_nccl)
  set(FL_NCCL_FOUND OFF PARENT_SCOPE)
  if(TARGET fl::nccl)
    set(FL_NCCL_FOUND ON PARENT_SCOPE)
    return()
  endif()
  set(roots "")
  if(FL_NCCL_ROOT)
    list(APPEND roots ${FL_NCCL_ROOT})
  else()
    list(APPEND roots ${PROJECT_SOURCE_DIR}/build/pip/nvidia/nccl)
    find_program(fl_python3 NAMES python3 NO_CACHE)
    if(fl_python3)
      execute_process(
        COMMAND ${fl_python3} -c "import nvidia.nccl as m; print(list(m.__path__)[0])"
        OUTPUT_VARIABLE fl_wheel OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE fl_rc ERROR_QUIET)
      if(fl_rc EQUAL 0 AND fl_wheel)
        list(APPEND roots ${fl_wheel})
      endif()
    endif()
  endif()
  set(inc "")
  set(lib "")
  foreach(root IN LISTS roots)
    if(EXISTS ${root}/include/nccl.h)
      foreach(name libnccl.so.2 libnccl.so)
        if(EXISTS ${root}/lib/${name})
          set(inc ${root}/include)
          set(lib ${root}/lib/${name})
          break()
        endif()
      endforeach()
    endif()
    if(lib)
      break()
    endif()
  endforeach()
  if(NOT lib AND NOT FL_NCCL_ROOT)  # the system's
    find_path(fl_sys_inc nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} NO_CACHE)
    find_library(fl_sys_lib NAMES nccl libnccl.so.2 HINTS ${CUDAToolkit_LIBRARY_DIR} NO_CACHE)
    if(fl_sys_inc AND fl_sys_lib)
      set(inc ${fl_sys_inc})
      set(lib ${fl_sys_lib})
    endif()
  endif()
  if(NOT lib)
    if(FL_NCCL_ROOT)
      set(why "no include/nccl.h and lib/libnccl.so.2 under FL_NCCL_ROOT=${FL_NCCL_ROOT}")
    else()
      set(why "no NCCL found (FL_NCCL_ROOT unset; no nvidia-nccl-cu13 wheel in build/pip or for python3; no system libnccl)")
    endif()
    set(FL_NCCL_WHY "${why}" PARENT_SCOPE)
    return()
  endif()
  file(STRINGS ${inc}/nccl.h fl_code REGEX "^#define NCCL_VERSION_CODE [0-9]+")
  string(REGEX REPLACE ".* ([0-9]+)$" "\\1" fl_code "${fl_code}")
  file(STRINGS ${inc}/nccl.h fl_major REGEX "^#define NCCL_MAJOR [0-9]+")
  file(STRINGS ${inc}/nccl.h fl_minor REGEX "^#define NCCL_MINOR [0-9]+")
  file(STRINGS ${inc}/nccl.h fl_patch REGEX "^#define NCCL_PATCH [0-9]+")
  foreach(v fl_major fl_minor fl_patch)
    string(REGEX REPLACE ".* ([0-9]+)$" "\\1" ${v} "${${v}}")
  endforeach()
  # Non-blocking communicators with ncclCommGetAsyncError / ncclCommAbort (the rung's no-hang
  # path) and ncclConfig_t exist since NCCL 2.14.
  if(fl_code LESS 21400)
    set(FL_NCCL_WHY "NCCL ${fl_major}.${fl_minor}.${fl_patch} at ${lib} is older than 2.14 (no non-blocking communicators)" PARENT_SCOPE)
    return()
  endif()
  add_library(fl::nccl SHARED IMPORTED GLOBAL)
  set_target_properties(fl::nccl PROPERTIES IMPORTED_LOCATION ${lib} IMPORTED_SONAME libnccl.so.2
                        INTERFACE_INCLUDE_DIRECTORIES ${inc})
  get_filename_component(libdir ${lib} DIRECTORY)
  set(FL_NCCL_FOUND ON PARENT_SCOPE)
  set(FL_NCCL_LIBRARY ${lib} PARENT_SCOPE)
  set(FL_NCCL_LIBDIR ${libdir} PARENT_SCOPE)
  set(FL_NCCL_INCLUDE_DIR ${inc} PARENT_SCOPE)
  set(FL_NCCL_VERSION ${fl_major}.${fl_minor}.${fl_patch} PARENT_SCOPE)
endfunction()
