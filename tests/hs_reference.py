"""Run in the vLLM venv: each hidden-states file against Hugging Face's forward pass of the
model on the file's own token_ids. Prints one JSON line per file: its shape and, per layer
id, the largest absolute difference. vLLM's id i < L is HF's hidden_states[i]; id L is the
input of the final norm (HF's hidden_states[L] is after it)."""

import json
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

model_dir, layers, files = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3:]
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
depth = model.config.num_hidden_layers
for path in files:
    data = load_file(path)
    ids, states = data["token_ids"], data["hidden_states"].float()
    seen: dict = {}
    hook = model.model.norm.register_forward_pre_hook(lambda m, a, seen=seen: seen.update(x=a[0]))
    with torch.no_grad():
        out = model(ids[None].long(), output_hidden_states=True)
    hook.remove()
    diffs = {}
    for j, layer in enumerate(layers):
        ref = out.hidden_states[layer][0] if layer < depth else seen["x"][0]
        diffs[str(layer)] = (states[:, j] - ref).abs().max().item()
    shape = list(data["hidden_states"].shape)
    dtype = str(data["hidden_states"].dtype)
    line = {"file": path, "shape": shape, "dtype": dtype, "ids": ids.tolist(), "diff": diffs}
    print(json.dumps(line))
