# CUTLASS, an optional dependency of the CUDA build (the CUTLASS arms, src/arms/cutlass/).
#
# Its C++ headers come from a CUTLASS include directory (QCONFORM_CUTLASS_DIR: a CUTLASS checkout,
# or the `cutlass_library/source` folder of the `nvidia-cutlass` wheel, or its `include/` folder), or
# else from the installed `nvidia-cutlass` Python package (`pip install nvidia-cutlass`), found
# without importing it. Sets:
#   QC_CUTLASS          ON when the arms are built
#   QC_CUTLASS_ABSENT   why not, for `qconform arms` ("" when built)
#   QC_CUTLASS_VERSION  "4.2.0" (from cutlass/version.h)
#   QC_CUTLASS_INCLUDES the include directories (include/ and tools/util/include/)
# The instances compile slowly (about a CPU-minute each): configure with QCONFORM_WITH_CUTLASS=OFF to
# leave them out of a CUDA build, or build on many cores (the GPU machine: docs/gpu.md).

set(QC_CUTLASS OFF)
set(QC_CUTLASS_VERSION "")
set(QC_CUTLASS_INCLUDES "")
set(QC_CUTLASS_ABSENT "the build option QCONFORM_WITH_CUTLASS is OFF")

function(_qc_cutlass_root_from dir out_var)
  # Accept the folder holding cutlass/version.h, or one whose include/ (or source/include/) holds it.
  foreach(candidate "${dir}" "${dir}/include" "${dir}/source/include" "${dir}/cutlass_library/source/include")
    if(EXISTS "${candidate}/cutlass/version.h")
      get_filename_component(abs "${candidate}" ABSOLUTE)
      set(${out_var} "${abs}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out_var} "" PARENT_SCOPE)
endfunction()

if(NOT QC_CUDA)
  set(QC_CUTLASS_ABSENT "this build has no CUDA")
elseif(NOT QCONFORM_WITH_CUTLASS STREQUAL "OFF")
  set(_qc_cutlass_inc "")
  set(_qc_cutlass_from "")
  if(QCONFORM_CUTLASS_DIR)
    _qc_cutlass_root_from("${QCONFORM_CUTLASS_DIR}" _qc_cutlass_inc)
    set(_qc_cutlass_from "QCONFORM_CUTLASS_DIR=${QCONFORM_CUTLASS_DIR}")
    if(NOT _qc_cutlass_inc)
      message(FATAL_ERROR "QCONFORM_CUTLASS_DIR=${QCONFORM_CUTLASS_DIR}: expected a folder with cutlass/version.h "
                          "(itself, or its include/ or source/include/), found none")
    endif()
  else()
    find_package(Python3 QUIET COMPONENTS Interpreter)
    if(Python3_Interpreter_FOUND)
      execute_process(
        COMMAND ${Python3_EXECUTABLE} -c
          "import importlib.util as u; s = u.find_spec('cutlass_library'); print(s.submodule_search_locations[0] if s else '')"
        OUTPUT_VARIABLE _qc_cutlass_pkg OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
      if(_qc_cutlass_pkg)
        _qc_cutlass_root_from("${_qc_cutlass_pkg}" _qc_cutlass_inc)
        set(_qc_cutlass_from "the nvidia-cutlass Python package (${_qc_cutlass_pkg})")
      endif()
    endif()
  endif()
  if(_qc_cutlass_inc)
    file(STRINGS "${_qc_cutlass_inc}/cutlass/version.h" _qc_v REGEX "#define CUTLASS_(MAJOR|MINOR|PATCH) ")
    string(REGEX REPLACE ".*CUTLASS_MAJOR ([0-9]+).*CUTLASS_MINOR ([0-9]+).*CUTLASS_PATCH ([0-9]+).*" "\\1.\\2.\\3"
           QC_CUTLASS_VERSION "${_qc_v}")
    get_filename_component(_qc_cutlass_root "${_qc_cutlass_inc}/.." ABSOLUTE)
    set(QC_CUTLASS_INCLUDES "${_qc_cutlass_inc}")
    if(EXISTS "${_qc_cutlass_root}/tools/util/include/cutlass/util/packed_stride.hpp")
      list(APPEND QC_CUTLASS_INCLUDES "${_qc_cutlass_root}/tools/util/include")
    endif()
    set(QC_CUTLASS ON)
    set(QC_CUTLASS_ABSENT "")
    message(STATUS "CUTLASS ${QC_CUTLASS_VERSION} from ${_qc_cutlass_from}: the cuda:cutlass-* arms are built")
  else()
    set(QC_CUTLASS_ABSENT "CUTLASS's headers were not found at configure time (pass -DQCONFORM_CUTLASS_DIR=<dir>, or pip install nvidia-cutlass)")
    if(QCONFORM_WITH_CUTLASS STREQUAL "ON")
      message(FATAL_ERROR "QCONFORM_WITH_CUTLASS=ON: ${QC_CUTLASS_ABSENT}")
    endif()
    message(STATUS "${QC_CUTLASS_ABSENT}; the cuda:cutlass-* arms are not built")
  endif()
endif()

# The kernels: one object library, sm_90a only, compiled as the engines compile CUTLASS (nvcc's
# default --fmad=true: vLLM's `multiply_add` becomes one FFMA), not with qconform_flags' --fmad=false.
# The instances are one translation unit each, so that they compile in parallel; they differ only in
# their template arguments, so each family is one template (kernels/*.cu.in) and a table here, from
# which configure_file writes the translation units into the build tree (kernels/ stays on their
# include path).
if(QC_CUTLASS)
  set(_qc_kernels_src ${CMAKE_CURRENT_SOURCE_DIR}/src/arms/cutlass/kernels)
  set(_qc_kernels_gen ${CMAKE_CURRENT_BINARY_DIR}/src/arms/cutlass/kernels)
  file(GLOB QC_CUTLASS_KERNELS CONFIGURE_DEPENDS ${_qc_kernels_src}/*.cu)

  # PyTorch's FP8 rowwise instances (cutlass_dispatch.hpp, `rowwise_index`): tile 64 or 128 rows x
  # cluster 1 x 2 or 2 x 1, each with default and fast accumulation; launch_rowwise_t<tile>_c<cluster>_<accum>.
  foreach(QC_TILE_M 64 128)
    foreach(_qc_cluster "1;2" "2;1")
      list(GET _qc_cluster 0 QC_CLUSTER_M)
      list(GET _qc_cluster 1 QC_CLUSTER_N)
      foreach(QC_ACCUM default fast)
        if(QC_ACCUM STREQUAL "fast")
          set(QC_FAST true)
        else()
          set(QC_FAST false)
        endif()
        set(QC_INSTANCE t${QC_TILE_M}_c${QC_CLUSTER_M}x${QC_CLUSTER_N}_${QC_ACCUM})
        configure_file(${_qc_kernels_src}/sm90_cutlass_fp8_rowwise_instance.cu.in
                       ${_qc_kernels_gen}/sm90_cutlass_fp8_rowwise_${QC_INSTANCE}.cu @ONLY)
        list(APPEND QC_CUTLASS_KERNELS ${_qc_kernels_gen}/sm90_cutlass_fp8_rowwise_${QC_INSTANCE}.cu)
      endforeach()
    endforeach()
  endforeach()

  # vLLM's INT8 configurations, a row each as `kInt8ConfigTable` (src/arms/cutlass/cutlass_dispatch.hpp)
  # lists them: index, vLLM's name, tile M N K, cluster M N, kernel schedule (cutlass::gemm::...);
  # launch_int8_vllm_config<index>. Configuring fails where a row and the table's row of that index
  # disagree.
  set(QC_CUTLASS_INT8_CONFIGS
      "0 M32_NSmall 64 64 256 1 8 KernelTmaWarpSpecialized"
      "1 M32_NBig 64 128 256 1 4 KernelTmaWarpSpecialized"
      "2 M64 64 64 256 1 1 KernelTmaWarpSpecialized"
      "3 M128 64 128 128 2 1 KernelTmaWarpSpecializedPingpong"
      "4 default 128 128 128 2 1 KernelTmaWarpSpecializedPingpong")
  set(_qc_dispatch ${CMAKE_CURRENT_SOURCE_DIR}/src/arms/cutlass/cutlass_dispatch.hpp)
  file(READ ${_qc_dispatch} _qc_dispatch_hpp)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_qc_dispatch})
  string(REGEX MATCH "kInt8ConfigTable\\[kInt8Configs\\] = {[^;]*};" _qc_int8_table "${_qc_dispatch_hpp}")
  string(REGEX MATCHALL "{\"[^\"]*\", [^}]*}" _qc_int8_rows "${_qc_int8_table}")
  foreach(_qc_row IN LISTS QC_CUTLASS_INT8_CONFIGS)
    string(REPLACE " " ";" _qc_row "${_qc_row}")
    list(GET _qc_row 0 QC_INDEX)
    list(GET _qc_row 1 QC_NAME)
    list(GET _qc_row 2 QC_TILE_M)
    list(GET _qc_row 3 QC_TILE_N)
    list(GET _qc_row 4 QC_TILE_K)
    list(GET _qc_row 5 QC_CLUSTER_M)
    list(GET _qc_row 6 QC_CLUSTER_N)
    list(GET _qc_row 7 QC_SCHEDULE)
    set(_qc_actual "none")
    list(LENGTH _qc_int8_rows _qc_count)
    if(QC_INDEX LESS _qc_count)
      list(GET _qc_int8_rows ${QC_INDEX} _qc_actual)
    endif()
    set(_qc_expected "{\"${QC_NAME} ([^\"]*)\", ${QC_TILE_M}, ${QC_TILE_N}, ${QC_TILE_K}, ${QC_CLUSTER_M}, ${QC_CLUSTER_N}, \"${QC_SCHEDULE}\"")
    if(NOT _qc_actual MATCHES "^${_qc_expected}")
      message(FATAL_ERROR "cmake/cutlass.cmake, QC_CUTLASS_INT8_CONFIGS row ${QC_INDEX}: expected kInt8ConfigTable[${QC_INDEX}] "
                          "(src/arms/cutlass/cutlass_dispatch.hpp) to be ${QC_NAME}, tile ${QC_TILE_M} x ${QC_TILE_N} x "
                          "${QC_TILE_K}, cluster ${QC_CLUSTER_M} x ${QC_CLUSTER_N}, ${QC_SCHEDULE}; found ${_qc_actual}")
    endif()
    configure_file(${_qc_kernels_src}/sm90_cutlass_int8_config.cu.in
                   ${_qc_kernels_gen}/sm90_cutlass_int8_config${QC_INDEX}.cu @ONLY)
    list(APPEND QC_CUTLASS_KERNELS ${_qc_kernels_gen}/sm90_cutlass_int8_config${QC_INDEX}.cu)
  endforeach()

  add_library(qconform_cutlass_kernels OBJECT ${QC_CUTLASS_KERNELS})
  set_target_properties(qconform_cutlass_kernels PROPERTIES CUDA_ARCHITECTURES 90a POSITION_INDEPENDENT_CODE ON)
  target_include_directories(qconform_cutlass_kernels PRIVATE ${_qc_kernels_src} ${QC_CUTLASS_INCLUDES})
  target_compile_options(qconform_cutlass_kernels PRIVATE --expt-relaxed-constexpr -Xcompiler=-Wno-unused-parameter)
  target_compile_definitions(qconform_cutlass_kernels PRIVATE NDEBUG)
endif()
