"""A secret stays secret (redact.py): the words that are secrets, and those that are not."""

from __future__ import annotations

import pytest

from genbench.redact import MASK, redact, redact_bytes, redact_doc, register, secrets_in

pytestmark = pytest.mark.core


@pytest.mark.parametrize(
    "text, want",
    [
        ("SIMKEY=sk-abc genbench sim", "SIMKEY=*** genbench sim"),
        ("HF_TOKEN=hf_xyz vllm serve m", "HF_TOKEN=*** vllm serve m"),
        ("vllm serve m --api-key sk-abc --port 8000", "vllm serve m --api-key *** --port 8000"),
        ("x --hf-token=hf_1 --db-password pw9", "x --hf-token=*** --db-password ***"),
        ("AWS_SECRET_ACCESS_KEY=a1b2", "AWS_SECRET_ACCESS_KEY=***"),
        # where a secret is, and words that only look like one, are kept
        ("sim --api-key-env OPENAI_API_KEY --api-key-file /k", None),
        ("vllm --max-tokens 16 --tokenizer t TOKENIZERS_PARALLELISM=false", None),
        ("--token-ids was auto, now off; --bytes-per-token 2048 --tokens-per-sample 9", None),
        ("a flag with no value: --api-key --port 1", None),
    ],
)
def test_secret_words_are_masked_and_others_kept(text, want):
    assert redact(text) == (text if want is None else want)


def test_a_registered_value_is_masked_anywhere_and_json_stays_json():
    register("sk-planted-123")
    line = '{"command":"x --api-key sk-abc","said":"Bearer sk-planted-123 refused"}'
    assert redact(line) == '{"command":"x --api-key ***","said":"Bearer *** refused"}'
    assert redact_bytes(b"args: sk-planted-123\xff\n") == b"args: ***\xff\n"
    doc = redact_doc({"a": ["HF_TOKEN=hf_1", 3], "sk-planted-123": None})
    assert doc == {"a": ["HF_TOKEN=***", 3], MASK: None}


def test_a_command_lines_secrets_and_the_settings_that_hold_them():
    values, names = secrets_in(["sim", "--api-key", "sk-1", "--api-key-env", "K", "--port", "1"],
                               {"HF_TOKEN": "hf_2", "CUDA_VISIBLE_DEVICES": "0"})  # fmt: skip
    assert values == ["hf_2", "sk-1"]
    assert names == ["HF_TOKEN (its environment)", "--api-key", "--api-key-env K"]
