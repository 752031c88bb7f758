#!/usr/bin/env bash
# Installs what tests/test_export_frameworks.py reads apsi's exports with; none of it needs a GPU.
#   pip (into the running Python, e.g. an activated venv): torch, DeepSpeed 0.19.8, torchtitan 0.3.0
#     with torchao (its float8 converter), transformers and six (Megatron-DeepSpeed's imports).
#   sources no registry serves, into $APSI_FRAMEWORKS_DIR (default ~/.cache/apsi-frameworks):
#     megatron-lm        Megatron-LM at core_v0.19.0 (the release apsi/export/common.py VERSIONS names)
#     megatron-deepspeed Megatron-DeepSpeed's main branch (its last tag, v2.4, is from 2021)
#     megatron-bridge    Megatron-Bridge's r0.6.0 release branch (read as source only: 0.6 needs a GPU)
#   Each is taken from APSI_MEGATRON_LM / APSI_MEGATRON_DEEPSPEED / APSI_MEGATRON_BRIDGE when set
#   (a checkout or an unpacked archive, whose commit $APSI_MEGATRON_LM_COMMIT etc. may name; linked,
#   not copied), otherwise cloned at that tag.
# Megatron-LM 0.19 requires Python 3.12 or later. torch from the package registry is its CUDA build
# (about 4.7 GB with its nvidia-* wheels; it imports and runs on a machine without a GPU); set
# APSI_TORCH to another requirement (e.g. a CPU wheel's file) to install that instead.
set -euo pipefail
PY="${PYTHON:-python}"
DEST="${APSI_FRAMEWORKS_DIR:-$HOME/.cache/apsi-frameworks}"

if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then
  echo "install.sh: Megatron-LM core_v0.19.0 needs Python 3.12 or later; $("$PY" --version 2>&1) runs here" >&2
  exit 2
fi

"$PY" -m pip install -q "${APSI_TORCH:-torch==2.13.0}"
# DeepSpeed builds from its source distribution against the torch just installed.
"$PY" -m pip install -q --no-build-isolation "deepspeed==0.19.8"
"$PY" -m pip install -q "torchtitan==0.3.0" torchao transformers six einops packaging

mkdir -p "$DEST"
source_tree() {  # name, env var, repository, tag
  local name="$1" given="${!2:-}" repo="$3" tag="$4"
  if [[ -n "$given" ]]; then
    [[ -d "$given" ]] || { echo "install.sh: $2=$given is not a folder" >&2; exit 2; }
    ln -sfn "$(cd "$given" && pwd)" "$DEST/$name"
  elif [[ ! -d "$DEST/$name" ]]; then
    git clone -q --depth 1 --branch "$tag" "$repo" "$DEST/$name"
  fi
  # What the report names as the tree's origin: the tag and, from git or $<VAR>_COMMIT, its commit.
  local commit_var="$2_COMMIT"
  local commit
  commit="${!commit_var:-unknown}"
  if [[ "$(git -C "$DEST/$name" rev-parse --show-toplevel 2>/dev/null)" == "$(readlink -f "$DEST/$name")" ]]; then
    commit="$(git -C "$DEST/$name" rev-parse HEAD)"
  fi
  echo "$tag $commit" > "$DEST/$name.origin"
  echo "$name: $(readlink -f "$DEST/$name") ($tag $commit)"
}
source_tree megatron-lm APSI_MEGATRON_LM https://github.com/NVIDIA/Megatron-LM.git core_v0.19.0
source_tree megatron-deepspeed APSI_MEGATRON_DEEPSPEED https://github.com/microsoft/Megatron-DeepSpeed.git main
source_tree megatron-bridge APSI_MEGATRON_BRIDGE https://github.com/NVIDIA-NeMo/Megatron-Bridge.git r0.6.0
"$PY" -c 'import torch, deepspeed, torchtitan; print("torch", torch.__version__, "deepspeed", deepspeed.__version__, "torchtitan 0.3.0")'
