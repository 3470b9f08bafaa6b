#!/usr/bin/env bash
# What the H200 machine offers, for planning a llama-server + CUPTI campaign there. Prints to stdout.
# Each probe is guarded by `timeout` so one hang cannot lose the rest.
set -u
sec() { echo; echo "=== $* ==="; }
run() { sec "$*"; timeout 30 bash -c "$*" 2>&1; echo "[rc=$?]"; }
run 'date -u; uname -a; cat /etc/os-release | head -4'
run 'nvidia-smi'
run 'nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv'
run 'nvcc --version; which nvcc'
run 'ls -la /usr/local/ | grep -i cuda; readlink -f /usr/local/cuda'
run 'ls /usr/local/cuda/extras/CUPTI/samples/ | head -100'
run 'ls /usr/local/cuda/extras/CUPTI/lib64/ | head -40; ls /usr/local/cuda/extras/CUPTI/samples/common/'
run 'which nsys ncu compute-sanitizer cuda-gdb cuobjdump c++filt gcc g++ cmake ninja make git; true'
run 'cmake --version; ninja --version; gcc --version | head -1; g++ --version | head -1'
run 'nproc; free -g; df -h / /tmp; cat /proc/meminfo | head -3'
run 'which python3; python3 --version'
run 'python3 -c "import torch, transformers; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"cudnn\", torch.backends.cudnn.version()); print(\"transformers\", transformers.__version__); print(torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0)); print(\"devices\", torch.cuda.device_count())"'
for m in fastapi uvicorn httpx aiohttp gguf numpy pandas prometheus_client safetensors sentencepiece tiktoken; do
  run "python3 -c 'import $m; print(\"$m\", getattr($m, \"__version__\", \"?\"))'"
done
run 'python3 -m pip list 2>/dev/null | grep -i -E "^(torch|transformers|triton|fastapi|uvicorn|starlette|pydantic|httpx|gguf|cupy|nvidia-cuda-cupti|accelerate|kernels|flash)" '
run 'python3 -c "import torch, os; p=os.path.dirname(torch.__file__); print(p)"; find /usr/local /opt /usr/lib -name "libcupti.so*" 2>/dev/null | head -20'
run 'env | grep -i -E "^(CUDA|LD_LIBRARY|PATH|NCCL|TORCH|NVIDIA)" | sort'
