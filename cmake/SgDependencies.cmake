# Find shardgrid's dependencies and make imported targets:
#   MPI::MPI_C, OpenMP::OpenMP_C, SG::cblas, SG::fftw (float + double,
#   threads), SG::netcdf, SG::pnetcdf.
# The PnetCDF/netCDF prefix from tools/install-deps is found through
# SG_DEPS_PREFIX (cache or environment) or CMAKE_PREFIX_PATH.
find_package(PkgConfig REQUIRED)

set(SG_DEPS_PREFIX "$ENV{SG_DEPS_PREFIX}" CACHE PATH
    "Prefix holding PnetCDF and netCDF-C built by tools/install-deps")
if(SG_DEPS_PREFIX)
  list(PREPEND CMAKE_PREFIX_PATH ${SG_DEPS_PREFIX})
  set(ENV{PKG_CONFIG_PATH} "${SG_DEPS_PREFIX}/lib/pkgconfig:$ENV{PKG_CONFIG_PATH}")
endif()

find_package(MPI REQUIRED COMPONENTS C)
find_package(OpenMP REQUIRED COMPONENTS C)
set(SG_HAVE_OPENMP 1)
# Which MPI: from mpi.h itself (the version string is not always known)
include(CheckSymbolExists)
set(CMAKE_REQUIRED_INCLUDES ${MPI_C_INCLUDE_DIRS})
check_symbol_exists(MPICH_VERSION "mpi.h" SG_MPI_IS_MPICH)
check_symbol_exists(OMPI_MAJOR_VERSION "mpi.h" SG_MPI_IS_OPENMPI)
unset(CMAKE_REQUIRED_INCLUDES)
if(SG_MPI_IS_MPICH)
  set(SG_MPI_FLAVOR mpich)
elseif(SG_MPI_IS_OPENMPI)
  set(SG_MPI_FLAVOR openmpi)
else()
  set(SG_MPI_FLAVOR other)
endif()

# CBLAS (OpenBLAS preferred)
find_path(SG_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas)
find_library(SG_CBLAS_LIBRARY NAMES openblas cblas blas)
if(NOT SG_CBLAS_INCLUDE_DIR OR NOT SG_CBLAS_LIBRARY)
  message(FATAL_ERROR "CBLAS not found (cblas.h and libopenblas). On Debian: "
    "apt-get install libopenblas-dev, or run tools/install-deps.")
endif()
add_library(SG::cblas INTERFACE IMPORTED)
target_include_directories(SG::cblas INTERFACE ${SG_CBLAS_INCLUDE_DIR})
target_link_libraries(SG::cblas INTERFACE ${SG_CBLAS_LIBRARY})
get_filename_component(SG_BLAS_NAME ${SG_CBLAS_LIBRARY} NAME_WE)
string(REGEX REPLACE "^lib" "" SG_BLAS_NAME "${SG_BLAS_NAME}")

# FFTW, double and float, with threads
find_path(SG_FFTW_INCLUDE_DIR fftw3.h)
foreach(lib fftw3 fftw3f fftw3_omp fftw3f_omp)
  string(TOUPPER ${lib} LIBU)
  find_library(SG_${LIBU}_LIBRARY NAMES ${lib})
  if(NOT SG_${LIBU}_LIBRARY)
    message(FATAL_ERROR "FFTW library ${lib} not found. On Debian: "
      "apt-get install libfftw3-dev, or run tools/install-deps.")
  endif()
endforeach()
if(NOT SG_FFTW_INCLUDE_DIR)
  message(FATAL_ERROR "fftw3.h not found (apt-get install libfftw3-dev)")
endif()
add_library(SG::fftw INTERFACE IMPORTED)
target_include_directories(SG::fftw INTERFACE ${SG_FFTW_INCLUDE_DIR})
target_link_libraries(SG::fftw INTERFACE ${SG_FFTW3F_OMP_LIBRARY}
  ${SG_FFTW3_OMP_LIBRARY} ${SG_FFTW3F_LIBRARY} ${SG_FFTW3_LIBRARY})
set(SG_FFT_NAME "FFTW3")

# netCDF-C: pkg-config (the install-deps prefix, or Debian's MPI flavour)
set(SG_HAVE_NETCDF 0)
set(SG_HAVE_NETCDF_PAR 0)
set(SG_HAVE_PNETCDF 0)
if(NOT SG_WITH_NETCDF STREQUAL "OFF")
  if(SG_MPI_FLAVOR STREQUAL "openmpi")
    # Debian's libnetcdf-mpi-dev (built against OpenMPI) installs
    # netcdf-mpi.pc; its headers with netcdf_par.h are in netcdf/mpi/include
    pkg_search_module(SG_NETCDF IMPORTED_TARGET GLOBAL netcdf-mpi netcdf)
  else()
    pkg_check_modules(SG_NETCDF IMPORTED_TARGET GLOBAL netcdf)
  endif()
  if(SG_NETCDF_FOUND)
    add_library(SG::netcdf ALIAS PkgConfig::SG_NETCDF)
    set(SG_HAVE_NETCDF 1)
    find_path(SG_NETCDF_PAR_H netcdf_par.h
      HINTS ${SG_NETCDF_INCLUDE_DIRS} /usr/lib/x86_64-linux-gnu/netcdf/mpi/include
      NO_DEFAULT_PATH)
    if(SG_NETCDF_PAR_H)
      target_include_directories(PkgConfig::SG_NETCDF INTERFACE ${SG_NETCDF_PAR_H})
      set(CMAKE_REQUIRED_INCLUDES ${SG_NETCDF_INCLUDE_DIRS} ${SG_NETCDF_PAR_H})
      include(CheckSymbolExists)
      check_symbol_exists(NC_HAS_PARALLEL4 "netcdf_meta.h" SG_NC_META)
      file(STRINGS "${SG_NETCDF_PAR_H}/netcdf_meta.h" _par4 REGEX "define NC_HAS_PARALLEL4")
      if(_par4 MATCHES "NC_HAS_PARALLEL4[ \t]+1")
        set(SG_HAVE_NETCDF_PAR 1)
      endif()
    endif()
  elseif(SG_WITH_NETCDF STREQUAL "ON")
    message(FATAL_ERROR "netCDF-C not found. Run tools/install-deps (MPICH: builds "
      "parallel netCDF-C into a cached prefix and passes SG_DEPS_PREFIX), or pass "
      "-DSG_WITH_NETCDF=OFF to build without NetCDF I/O.")
  endif()
endif()
if(NOT SG_WITH_PNETCDF STREQUAL "OFF")
  pkg_check_modules(SG_PNETCDF IMPORTED_TARGET GLOBAL pnetcdf)
  if(SG_PNETCDF_FOUND)
    add_library(SG::pnetcdf ALIAS PkgConfig::SG_PNETCDF)
    set(SG_HAVE_PNETCDF 1)
  elseif(SG_WITH_PNETCDF STREQUAL "ON")
    message(FATAL_ERROR "PnetCDF not found. Run tools/install-deps, or pass "
      "-DSG_WITH_PNETCDF=OFF to build without it.")
  endif()
endif()

# A library built against another MPI than ours loads two MPI libraries and
# aborts at run time: refuse it at configure time.
if(SG_MPI_FLAVOR STREQUAL "mpich")
  foreach(dir ${SG_PNETCDF_LIBRARY_DIRS} ${SG_NETCDF_LIBRARY_DIRS})
    if(dir MATCHES "^/usr/lib")
      message(FATAL_ERROR "PnetCDF/netCDF in ${dir} is Debian's OpenMPI build; with "
        "MPICH use the prefix built by tools/install-deps (SG_DEPS_PREFIX).")
    endif()
  endforeach()
endif()
