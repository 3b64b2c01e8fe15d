# Optional CUDA backend: detected with check_language(CUDA).
#   SG_ENABLE_CUDA=AUTO  build it when nvcc works
#   SG_ENABLE_CUDA=ON    build it or fail
#   SG_ENABLE_CUDA=OFF   never
set(SG_HAVE_CUDA 0)
set(SG_HAVE_NCCL 0)
if(NOT SG_ENABLE_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    find_path(SG_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(SG_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
    if(NOT SG_NCCL_INCLUDE_DIR OR NOT SG_NCCL_LIBRARY)
      if(SG_ENABLE_CUDA STREQUAL "ON")
        message(FATAL_ERROR "SG_ENABLE_CUDA=ON but NCCL (nccl.h, libnccl) was not found")
      endif()
      message(STATUS "CUDA found but NCCL not: CUDA backend disabled")
    else()
      set(SG_HAVE_CUDA 1)
      set(SG_HAVE_NCCL 1)
    endif()
  elseif(SG_ENABLE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "SG_ENABLE_CUDA=ON but no working CUDA compiler was found "
      "(put nvcc on PATH or set CMAKE_CUDA_COMPILER)")
  endif()
endif()

# Attach the CUDA sources (C files calling the CUDA runtime, and .cu kernels
# in an object library) to a target.
function(sg_cuda_attach target)
  # layer/cuda/ and layer/sub/cuda/ (shardtensor/ops/cuda/ kernels; the
  # C files of a sub-layer's cuda/ are added by its own CMakeLists.txt);
  # tests/cuda/ holds test programs, not library code
  file(GLOB_RECURSE _cu_c CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/*/cuda/*.c)
  file(GLOB_RECURSE _cu_k CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/*/cuda/*.cu
       ${PROJECT_SOURCE_DIR}/*/*/cuda/*.cu)
  list(REMOVE_DUPLICATES _cu_k)
  list(FILTER _cu_c EXCLUDE REGEX "/(build[^/]*|tests)/")
  list(FILTER _cu_k EXCLUDE REGEX "/(build[^/]*|tests)/")
  target_sources(${target} PRIVATE ${_cu_c})
  if(_cu_k)
    add_library(shardgrid_cuda_kernels OBJECT ${_cu_k})
    set_target_properties(shardgrid_cuda_kernels PROPERTIES
      POSITION_INDEPENDENT_CODE ON CUDA_STANDARD 17)
    # warnings of nvcc and of the host compiler behind it; errors with
    # SG_WERROR (CI), as for the C sources
    target_compile_options(shardgrid_cuda_kernels PRIVATE
      -Xcompiler=-Wall,-Wextra,-Wno-unused-parameter
      $<$<BOOL:${SG_WERROR}>:-Werror=all-warnings -Xcompiler=-Werror>)
    get_target_property(_inc ${target} INCLUDE_DIRECTORIES)
    target_include_directories(shardgrid_cuda_kernels PRIVATE ${_inc})
    target_link_libraries(shardgrid_cuda_kernels PRIVATE MPI::MPI_C CUDA::cudart)
    target_sources(${target} PRIVATE $<TARGET_OBJECTS:shardgrid_cuda_kernels>)
  endif()
  target_include_directories(${target} PRIVATE ${SG_NCCL_INCLUDE_DIR})
  target_link_libraries(${target} PUBLIC CUDA::cudart CUDA::cublas CUDA::cufft
    ${SG_NCCL_LIBRARY})
endfunction()
