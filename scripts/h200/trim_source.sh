#!/usr/bin/env bash
# Make .carry/llama.cpp: the pinned llama.cpp source trimmed to fit the device tool's 64 MiB
# working tree (about 40 MB), as GPU.md describes. Run here, in the repo root, before a device call
# that builds llama-server with CUDA (`carry: [".carry"]`).
set -euo pipefail
SRC=$(${PYTHON:-python3} -c "from perflib import server; print(server.download_source(progress=False))")
rm -rf .carry/llama.cpp && mkdir -p .carry && cp -r "$SRC" .carry/llama.cpp
cd .carry/llama.cpp
rm -rf docs tests benches media examples conversion app pocs ci .github skills
find models -type f ! -name 'ggml-vocab-llama-bpe.gguf' -delete
# keep scripts/ui-assets.cmake: the server's web-UI target needs it
find scripts -type f ! -name 'ui-assets.cmake' -delete && find scripts -type d -empty -delete
for d in ggml-blas ggml-cann ggml-et ggml-hexagon ggml-metal ggml-musa ggml-opencl ggml-openvino ggml-rpc \
         ggml-sycl ggml-virtgpu ggml-vulkan ggml-webgpu ggml-zdnn ggml-zendnn; do rm -rf "ggml/src/$d"; done
dropped="batched-bench gguf-split imatrix llama-bench perplexity tokenize tts rpc cvector-generator export-lora tuning results"
for d in $dropped; do
  rm -rf "tools/$d"
  sed -i "/add_subdirectory($d)/d" tools/CMakeLists.txt
done
du -sh .
