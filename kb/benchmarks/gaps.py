"""How similar questions are grouped on the content gaps page (issue #18): cosine
similarity of question embeddings for paraphrases of one golden question
(evals/paraphrases/golden.jsonl, written for this), for two golden questions of one
corpus about the same file, and for two about different files."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings

EVALS = Path(settings.BASE_DIR) / "evals"
CORPORA = ["handbook", "poetry-docs", "rq-docs"]
THRESHOLDS = [0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8]


def _cases() -> list[dict[str, Any]]:
    cases = []
    for corpus in CORPORA:
        for name in (f"{corpus}.jsonl", f"{corpus}-holdout.jsonl"):
            for line in (EVALS / name).read_text().splitlines():
                if line.strip():
                    cases.append({**json.loads(line), "corpus": corpus})
    return cases


def run() -> dict[str, Any]:
    from kb import embedding

    cases = _cases()
    by_id = {c["id"]: c for c in cases}
    paraphrases = [
        json.loads(line)
        for line in (EVALS / "paraphrases" / "golden.jsonl").read_text().splitlines()
        if line.strip()
    ]
    if unknown := [p["id"] for p in paraphrases if p["id"] not in by_id]:
        raise ValueError(f"paraphrases of no golden case: {unknown}")
    embedder = embedding.get_embedder()
    vectors = _unit(embedder.embed_queries([c["question"] for c in cases]))
    again = _unit(embedder.embed_queries([p["question"] for p in paraphrases]))
    index = {c["id"]: i for i, c in enumerate(cases)}
    same = [float(vectors[index[p["id"]]] @ v) for p, v in zip(paraphrases, again)]
    same_file, other_file = [], []
    for i, j in itertools.combinations(range(len(cases)), 2):
        a, b = cases[i], cases[j]
        if a["corpus"] != b["corpus"]:
            continue
        sim = float(vectors[i] @ vectors[j])
        (same_file if _files(a) & _files(b) else other_file).append(sim)
    return {
        "paraphrase_pairs": _summary(same),
        "same_file_pairs": _summary(same_file),
        "other_file_pairs": _summary(other_file),
        "thresholds": [
            {
                "threshold": t,
                "paraphrases_grouped": _share(same, t),
                "same_file_grouped": _share(same_file, t),
                "other_file_grouped": _share(other_file, t),
            }
            for t in THRESHOLDS
        ],
    }


def _files(case: dict[str, Any]) -> set[str]:
    return {s["file"] for s in case["required_spans"]}


def _unit(vectors) -> np.ndarray:
    array = np.asarray(vectors, dtype=np.float32)
    return array / np.linalg.norm(array, axis=1, keepdims=True)


def _summary(values: list[float]) -> dict[str, Any]:
    array = np.asarray(values)
    p10, p50, p90 = np.percentile(array, [10, 50, 90])
    return {
        "n": len(values),
        "p10": round(float(p10), 3),
        "median": round(float(p50), 3),
        "p90": round(float(p90), 3),
        "max": round(float(array.max()), 3),
    }


def _share(values: list[float], threshold: float) -> float:
    return round(sum(v >= threshold for v in values) / len(values), 4)


def markdown(report: dict[str, Any]) -> str:
    lines = ["| pairs | n | p10 | median | p90 | max |", "|---|---|---|---|---|---|"]
    for key in ("paraphrase_pairs", "same_file_pairs", "other_file_pairs"):
        s = report[key]
        lines.append(
            f"| {key.replace('_', ' ')} | {s['n']} | {s['p10']} | "
            f"{s['median']} | {s['p90']} | {s['max']} |"
        )
    lines += [
        "",
        "| threshold | paraphrases grouped | same file grouped | other file grouped |",
        "|---|---|---|---|",
    ]
    for row in report["thresholds"]:
        lines.append(
            f"| {row['threshold']} | {row['paraphrases_grouped']:.1%} | "
            f"{row['same_file_grouped']:.1%} | {row['other_file_grouped']:.2%} |"
        )
    return "\n".join(lines)
