# Sourced by tools/build, tools/test and tools/demo: which MPI and where the
# dependencies built by tools/install-deps live.
#   SG_MPI=mpich (default) or openmpi
#   SG_DEPS_PREFIX  prefix of PnetCDF/netCDF-C built against MPICH
SG_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SG_MPI=${SG_MPI:-mpich}
case "$SG_MPI" in
  mpich)
    export SG_DEPS_PREFIX=${SG_DEPS_PREFIX:-/opt/shardgrid/deps-mpich}
    SG_MPICC=mpicc.mpich
    SG_MPIEXEC=${SG_MPIEXEC:-/usr/bin/mpiexec.mpich} # tools/bundle-env.sh sets it
    ;;
  openmpi)
    export SG_DEPS_PREFIX=${SG_DEPS_PREFIX:-}
    SG_MPICC=mpicc.openmpi
    SG_MPIEXEC=${SG_MPIEXEC:-/usr/bin/mpiexec.openmpi}
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_MCA_rmaps_base_oversubscribe=1
    ;;
  *) echo "SG_MPI must be mpich or openmpi, not '$SG_MPI'" >&2; exit 2 ;;
esac
export SG_MPI SG_ROOT
# the CUDA toolkit, when present, is often outside PATH
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=$PATH:/usr/local/cuda/bin
fi
# OpenBLAS picks its kernels from a table of CPU models at load time; a CPU
# newer than the table gets the oldest (Debian's 0.3.21: SSE3 "Prescott" on
# Sapphire Rapids, SGEMM 4x slower). Unless the caller chose, use the
# widest kernels this CPU runs (what sg-info's hint says; core/blas_core.c).
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ -r /proc/cpuinfo ]; then
  _sg_flags=$(grep -m1 '^flags' /proc/cpuinfo)
  case "$_sg_flags" in
    *avx512_bf16*) export OPENBLAS_CORETYPE=Cooperlake ;;
    *avx512f*) export OPENBLAS_CORETYPE=SkylakeX ;;
    *" avx2 "*) export OPENBLAS_CORETYPE=Haswell ;;
  esac
  unset _sg_flags
fi
