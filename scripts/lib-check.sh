# Shell functions shared by the GPU checks (sourced, not run): models-check.sh uses them.
# Each expects the caller's `say` and `die`, and `$out` (the check's folder).

# check_gpu: GPU 0 by nvidia-smi: sets gpu_name, total_mib, total_gb (1e9 bytes), cap (its
# compute capability, "9.0") and arch ("90"); writes $out/query-gpu.csv. Fails without one.
check_gpu() {
  local smi="${SPARKCTL_NVIDIA_SMI:-nvidia-smi}" csv
  csv="$("$smi" --query-gpu=name,memory.total,compute_cap --format=csv,noheader,nounits)" \
    || die "nvidia-smi failed: this check needs an NVIDIA GPU (or --smoke)"
  printf '%s\n' "$csv" >"$out/query-gpu.csv"
  gpu_name="$(printf '%s\n' "$csv" | head -n1 | cut -d, -f1 | sed 's/ *$//')"
  total_mib="$(printf '%s\n' "$csv" | head -n1 | awk -F', *' '{print $2}')"
  cap="$(printf '%s\n' "$csv" | head -n1 | awk -F', *' '{print $3}')"
  arch="${cap//./}"
  [[ "$total_mib" =~ ^[0-9]+$ ]] \
    || die "nvidia-smi gives no memory.total ($total_mib): a GPU with memory of its own is needed"
  total_gb="$(awk -v m="$total_mib" 'BEGIN{printf "%.1f", m*1048576/1e9}')"
}

# check_build_llama SRC: a CUDA llama-server for $arch from the llama.cpp sources SRC (a
# directory, or a tarball holding one `llama.cpp` directory), built under $out/llama-build
# (flash attention's kernels left out: a third of the build, and no check here needs them).
# Sets llama_server and build_s.
check_build_llama() {
  local src="$1" build="$out/llama-build"
  if [ -f "$src" ]; then
    mkdir -p "$out/src" && tar -xf "$src" -C "$out/src" || die "cannot unpack $src"
    src="$(find "$out/src" -maxdepth 4 -type d -name llama.cpp | head -n1)"
  fi
  [ -f "$src/CMakeLists.txt" ] || die "no llama.cpp sources at ${src:-?}"
  command -v cmake >/dev/null || die "cmake is needed to build llama-server"
  command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || die "nvcc (CUDA) is needed to build llama-server"
  command -v nvcc >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  say "building a CUDA llama-server for compute capability $cap (sm_$arch) from $src"
  local began=$SECONDS
  cmake -S "$src" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    "-DCMAKE_CUDA_ARCHITECTURES=$arch" -DGGML_CUDA_FA=OFF -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >"$out/llama-cmake.log" 2>&1 \
    || { tail -n 30 "$out/llama-cmake.log" | tee -a "$log"; die "cmake failed"; }
  cmake --build "$build" --target llama-server -j "$(nproc)" >"$out/llama-build.log" 2>&1 \
    || { tail -n 30 "$out/llama-build.log" | tee -a "$log"; die "the llama-server build failed"; }
  build_s=$((SECONDS - began))
  llama_server="$build/bin/llama-server"
  say "llama-server built in ${build_s} s"
}

# check_python_gguf [WHEELS]: python3 ($py) with gguf and numpy, from WHEELS when it lacks them.
check_python_gguf() {
  "$py" -c 'import gguf, numpy' 2>/dev/null && return 0
  [ -n "${1:-}" ] || die "python3 lacks gguf/numpy: pip install gguf numpy, give --wheels DIR, or --gguf FILE"
  "$py" -m pip install -q --no-index --no-deps --target "$out/site" "$1"/*.whl >>"$log" 2>&1 \
    || die "cannot install the wheels in $1"
  export PYTHONPATH="$out/site${PYTHONPATH:+:$PYTHONPATH}"
}

# check_free_port: a TCP port free now on 127.0.0.1.
check_free_port() {
  "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# check_own_processes: what this run started and still runs — a sparkctl (the front door) or
# a llama-server whose environment names this run's state dir (each inherits it from the
# script). One line each: pid, command.
check_own_processes() {
  local p pid exe
  local ours=("$(readlink -f "$sparkctl")" "$(readlink -f "$llama_server")")
  for p in /proc/[0-9]*; do
    pid="${p#/proc/}"
    exe="$(readlink "$p/exe" 2>/dev/null)" || continue
    [ "$exe" = "${ours[0]}" ] || [ "$exe" = "${ours[1]}" ] || continue
    tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qxF "SPARKCTL_STATE_DIR=$SPARKCTL_STATE_DIR" \
      || continue
    echo "$pid $(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)"
  done
}

# check_stop_the_rest: what sparkctl's own stops left ($out/left-after-stops.txt) is stopped
# here (TERM, then KILL after 10 s); what still runs then goes to $out/left-running.txt.
check_stop_the_rest() {
  check_own_processes >"$out/left-after-stops.txt"
  local pid _ tries=0
  while read -r pid _; do kill "$pid" 2>/dev/null; done <"$out/left-after-stops.txt"
  while [ -n "$(check_own_processes)" ] && [ $tries -lt 20 ]; do sleep 0.5; tries=$((tries + 1)); done
  check_own_processes | while read -r pid _; do kill -KILL "$pid" 2>/dev/null; done
  sleep 0.5
  check_own_processes >"$out/left-running.txt"
  [ -s "$out/left-running.txt" ] && say "still running after the cleanup: $(cat "$out/left-running.txt")"
  return 0
}
