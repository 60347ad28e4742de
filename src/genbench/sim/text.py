"""The sim's answer text: a long, fixed, seeded run of plain words that every answer (and
every tool call's arguments) is a window of."""

from __future__ import annotations

import random

_WORDS = (
    "the of and to in is that it for on with as was by at be this from or an are "
    "not but have one all were can which when there more will out some time into "
    "about other would these only then first could like over also after most made "
    "new many such way even well back good much through long great where just each"
)
VOCAB = _WORDS.split()  # 66 ASCII words: nothing to JSON-escape
# The text every answer is a window of: words drawn at random (fixed seed) from VOCAB, so no
# answer repeats itself within TEXT_LEN tokens. A plain rotation of VOCAB would repeat every
# 66 words, and a repetition-loop detector would rightly call every answer a loop. Long, so
# that two prompts rarely start at the same place (a duplicate-answer detector would be right
# about those too).
TEXT_LEN = 65536
TEXT = [VOCAB[i] for i in random.Random("genbench-sim-text").choices(range(len(VOCAB)), k=TEXT_LEN)]
