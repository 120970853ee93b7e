"""The python code blocks of a documentation page, in order (helper of test_guide_code.py).

A block preceded by a line ``<!-- not-run: why -->`` is not executed (Swift and bash blocks
never are: only ```python fences count)."""
from __future__ import annotations

import re
from typing import List, Tuple

FENCE = re.compile(r"^```(\w*)\s*$")
NOT_RUN = re.compile(r"^<!--\s*not-run:")


def blocks(text: str) -> List[Tuple[int, str, bool]]:
    """(line number, code, runs) of each python block of ``text``."""
    out, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m and m.group(1):
            lang, start = m.group(1), i
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            if lang == "python":
                prev = next((lines[k] for k in range(start - 1, -1, -1) if lines[k].strip()), "")
                out.append((start + 1, "\n".join(lines[start + 1:j]), not NOT_RUN.match(prev)))
            i = j + 1
            continue
        i += 1
    return out
