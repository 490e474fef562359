"""Which ranking of candidates answers most questions right, on the same generations?

    python bench/chooser_eval.py RUN.jsonl [RUN.jsonl ...]

Reads bench/spider_eval.py runs of the `constrained+candidates` arm (each candidate's ranking
features and correctness, `candidate_features`) and prints, for each ordering of the features
`gridrail.ask._choose` could use, how many questions its chosen candidate answers correctly,
beside the oracle (some candidate is correct) and the greedy candidate alone.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gridrail.ask import RANKING

ORDERINGS = {
    "runs, rows, ended, agree, order (before coverage)": ("runs", "rows", "ended", "agree"),
    "runs, rows, ended, agree, coverage, order (session 8)": (
        "runs", "rows", "ended", "agree", "coverage",
    ),
    "runs, rows, ended, coverage, agree, order": ("runs", "rows", "ended", "coverage", "agree"),
    "runs, rows, coverage, ended, agree, order": ("runs", "rows", "coverage", "ended", "agree"),
    "runs, ended, rows, agree, coverage, order (ask)": RANKING,
    "runs, ended, agree, coverage, order": ("runs", "ended", "agree", "coverage"),
    "runs, ended, order (greedy first)": ("runs", "ended"),
    "runs, rows, ended, agree, confidence, order": ("runs", "rows", "ended", "agree", "confidence"),
    "runs, ended, agree, confidence, order": ("runs", "ended", "agree", "confidence"),
    "runs, ended, confidence, order": ("runs", "ended", "confidence"),
}  # fmt: skip


def chosen(features: list[dict], keys: tuple[str, ...]) -> dict | None:
    clean = [(i, f) for i, f in enumerate(features) if f["clean"]]
    if not clean:
        return None
    # runs recorded before a feature existed rank by the others (0 for the missing one)
    return max(clean, key=lambda p: (*(p[1].get(k, 0) for k in keys), -p[0]))[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", type=Path, nargs="+")
    args = parser.parse_args()
    questions = []
    for path in args.runs:
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row.get("kind") != "question" or "arms" not in row:  # stubs of resumed runs
                continue
            arm = row["arms"].get("constrained+candidates")
            if arm and "candidate_features" in arm:
                questions.append(arm["candidate_features"])
    n = len(questions)
    print(f"{n} questions")
    print("| ordering | EX |\n|---|---:|")
    for name, keys in ORDERINGS.items():
        right = sum(bool((c := chosen(f, keys)) and c["correct"]) for f in questions)
        print(f"| {name} | {right}/{n} |")
    greedy = sum(f[0]["correct"] for f in questions)
    oracle = sum(any(c["correct"] for c in f) for f in questions)
    print(f"| greedy candidate alone | {greedy}/{n} |")
    print(f"| some candidate correct (oracle) | {oracle}/{n} |")


if __name__ == "__main__":
    main()
