# shellcheck shell=bash
# Sourced by tools/bench-gpu and tools/test-gpu for --bundle DIR (a folder
# made by tools/device-bundle and carried to a lent GPU machine):
#   sg_bundle_setup DIR REPO_ROOT
# (1) unpacks DIR/debs/*.deb with `dpkg -x` into $SG_BUNDLE_PREFIX (default
#     /tmp/sgdeps; never /) and copies DIR/deps there (PnetCDF/netCDF-C),
#     once per manifest;
# (2) puts DIR/build-cuda (the slim copy) at REPO_ROOT/build-cuda when
#     there is none with an sg-train, links the path it was configured at
#     to REPO_ROOT (its CTest files and run paths are absolute), and points
#     its CTest files at the bundle's mpiexec where /usr/bin has none;
#     links the build machine's deps prefix (tools named by absolute path
#     in the tests) to PREFIX/deps where that path does not exist;
# (3) fills the gaps only: the libraries build-cuda's binaries, mpiexec and
#     hydra do not find on this machine are linked into PREFIX/gap from the
#     bundle, build-cuda/lib, the CUDA toolkit or python3's nvidia-* pip
#     wheels (NCCL, cuBLAS, cuFFT, the CUDA runtime), and PREFIX/gap goes
#     first on LD_LIBRARY_PATH: the machine's own libraries stay in use
#     (python3 and torch see the same ones), ours fill what is missing.
#     SG_BUNDLE_PREFER=1 links every library the bundle has instead (to
#     try the bundle on a machine that has them all, e.g. the build machine;
#     it also points the CTest files at the bundle's mpiexec: use it on a
#     copy, as on the device);
# (4) exports PATH (PREFIX/usr/bin first: mpiexec, hydra_pmi_proxy),
#     LD_LIBRARY_PATH and SG_MPIEXEC (tools/env.sh keeps it).
# Returns non-zero, saying why, when a library is still missing.
sg_bundle_setup() {
  local src=$1 root=$2 pre=${SG_BUNDLE_PREFIX:-/tmp/sgdeps} d f m p old
  src=$(cd "$src" 2>/dev/null && pwd) && [ -f "$src/MANIFEST.txt" ] ||
    { echo "bundle: no device bundle at '$1' (make one with tools/device-bundle)" >&2; return 1; }
  command -v dpkg >/dev/null || { echo "bundle: no dpkg on this machine" >&2; return 1; }
  # (1)
  if ! cmp -s "$src/MANIFEST.txt" "$pre/.manifest" 2>/dev/null; then
    rm -rf "$pre" && mkdir -p "$pre" || return 1
    for d in "$src"/debs/*.deb; do
      dpkg -x "$d" "$pre" || { echo "bundle: dpkg -x $d failed" >&2; return 1; }
    done
    [ -d "$src/deps" ] && cp -a "$src/deps" "$pre/deps"
    cp "$src/MANIFEST.txt" "$pre/.manifest"
    echo "bundle: $(ls "$src"/debs/*.deb | wc -l) debs unpacked into $pre"
  fi
  # (2)
  if [ ! -x "$root/build-cuda/bin/sg-train" ] && [ -d "$src/build-cuda" ]; then
    rm -rf "$root/build-cuda" && cp -a "$src/build-cuda" "$root/build-cuda" || return 1
    echo "bundle: build-cuda/ from $src/build-cuda (run only: no objects to build on)"
  fi
  old=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$root/build-cuda/CMakeCache.txt" 2>/dev/null)
  if [ -n "$old" ] && [ "$old" != "$root" ] && [ ! -e "$old" ]; then
    mkdir -p "$(dirname "$old")" && ln -s "$root" "$old" &&
      echo "bundle: build-cuda/ was configured at $old: linked there"
  fi
  # the test binaries and CTest files name ncdump, nccopy, ncvalidator by
  # the deps prefix of the build machine: a link there (a new path only)
  d=$(cat "$pre/deps/PREFIX" 2>/dev/null)
  if [ -n "$d" ] && [ ! -e "$d" ]; then
    mkdir -p "$(dirname "$d")" && ln -s "$pre/deps" "$d" && echo "bundle: $d linked to $pre/deps"
  fi
  if { [ ! -x /usr/bin/mpiexec.mpich ] || [ "${SG_BUNDLE_PREFER:-0}" = 1 ]; } && [ -d "$root/build-cuda" ]; then
    find "$root/build-cuda" -name CTestTestfile.cmake -exec \
      sed -i "s#\"/usr/bin/mpiexec.mpich\"#\"$pre/usr/bin/mpiexec.mpich\"#g" {} +
  fi
  # (3)
  local gap=$pre/gap
  rm -rf "$gap" && mkdir -p "$gap" || return 1
  # UCX and hwloc find their plugins beside the library as loaded
  for d in ucx hwloc; do
    [ -d "$pre/usr/lib/x86_64-linux-gnu/$d" ] && ln -s "$pre/usr/lib/x86_64-linux-gnu/$d" "$gap/$d"
  done
  local dirs=("$pre" "$root/build-cuda/lib")
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d $d ] && dirs+=("$d"); done
  for d in $(python3 -c 'import nvidia; print(" ".join(nvidia.__path__))' 2>/dev/null); do dirs+=("$d"); done
  local targets=("$root"/build-cuda/bin/sg-* "$root"/build-cuda/bin/bench/* "$root"/build-cuda/bin/tests/*
    "$root"/build-cuda/lib/*.so "$pre"/usr/bin/mpiexec.hydra "$pre"/usr/bin/hydra_pmi_proxy "$pre"/deps/bin/*)
  export LD_LIBRARY_PATH=$gap${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  local linked=() unresolved=() want
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    if [ "${SG_BUNDLE_PREFER:-0}" = 1 ]; then # every library ldd lists that the bundle has
      want=$(for f in "${targets[@]}"; do [ -f "$f" ] && ldd "$f" 2>/dev/null; done |
        awk '$2 == "=>" {print $1}' | sort -u)
    else
      want=$(for f in "${targets[@]}"; do [ -f "$f" ] && ldd "$f" 2>/dev/null; done |
        awk '/=> not found/ {print $1}' | sort -u)
    fi
    local new=0
    for m in $want; do
      [ -e "$gap/$m" ] && continue
      case " ${unresolved[*]-} " in *" $m "*) continue ;; esac
      p=""
      for d in "${dirs[@]}"; do
        [ "${SG_BUNDLE_PREFER:-0}" = 1 ] && [ "$d" != "$pre" ] && continue
        p=$(find -L "$d" -maxdepth 6 -path "$gap" -prune -o -name "$m" -print 2>/dev/null | head -1 || true)
        [ -n "$p" ] && break
      done
      if [ -n "$p" ]; then
        ln -s "$p" "$gap/$m" && linked+=("$m") && new=1
      elif [ "${SG_BUNDLE_PREFER:-0}" != 1 ]; then
        unresolved+=("$m")
      fi
    done
    [ $new = 0 ] && break
  done
  export PATH=$pre/usr/bin:$pre/deps/bin:$PATH
  export SG_MPIEXEC=$pre/usr/bin/mpiexec.mpich
  echo "bundle: ${#linked[@]} libraries linked into $gap (the rest from this machine): ${linked[*]-}"
  # what still does not load
  mapfile -t unresolved < <(for f in "${targets[@]}"; do [ -f "$f" ] && ldd "$f" 2>/dev/null; done |
    awk '/=> not found/ {print $1}' | sort -u)
  if [ ${#unresolved[@]} -gt 0 ]; then
    echo "bundle: still not found: ${unresolved[*]} (not in the bundle, the CUDA toolkit or python3's nvidia-* wheels)" >&2
    return 1
  fi
  return 0
}
